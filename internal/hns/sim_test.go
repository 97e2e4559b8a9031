package hns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	. "github.com/onsi/gomega"
)

var (
	testSubnet  = netip.MustParsePrefix("10.244.1.0/24")
	testGateway = netip.MustParseAddr("10.244.1.1")
)

func testNetworkSpec() NetworkSpec {
	return NetworkSpec{Name: "winnet", AdapterName: "Ethernet0", Subnet: testSubnet, Gateway: testGateway}
}

func newTestSim(t *testing.T, opts SimOptions) *Sim {
	t.Helper()
	s := NewSim(opts)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// withNetwork returns a simulator holding the network of testNetworkSpec.
func withNetwork(t *testing.T, opts SimOptions) (*Sim, *Network) {
	t.Helper()
	s := newTestSim(t, opts)
	n, err := s.CreateTransparentNetwork(context.Background(), testNetworkSpec())
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return s, n
}

func isGUID(id string) bool {
	_, err := uuid.Parse(id)
	return err == nil && len(id) == 36
}

func TestSimNetworkLifecycle(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	s := newTestSim(t, SimOptions{})

	n, err := s.CreateTransparentNetwork(ctx, NetworkSpec{
		Name: "winnet", AdapterName: "Ethernet0", Subnet: netip.MustParsePrefix("10.244.1.7/24"), Gateway: testGateway,
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(isGUID(n.ID)).To(BeTrue(), "network ID %q is a GUID", n.ID)
	g.Expect(*n).To(Equal(Network{ID: n.ID, Name: "winnet", AdapterName: "Ethernet0", Subnet: testSubnet, Gateway: testGateway,
		ManagementVNIC: "vEthernet (Ethernet0)"}), "HNS names the management vNIC after the adapter")

	got, err := s.GetNetworkByName(ctx, "winnet")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal(n))

	enabled, err := s.OVSExtensionEnabled(ctx, n.ID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(enabled).To(BeFalse(), "a new network has the OVS extension disabled")
	for range 2 { // enabling is idempotent
		g.Expect(s.EnableOVSExtension(ctx, n.ID)).To(Succeed())
		enabled, err = s.OVSExtensionEnabled(ctx, n.ID)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(enabled).To(BeTrue())
	}
	// IDs are compared case-insensitively, as HNS does.
	enabled, err = s.OVSExtensionEnabled(ctx, strings.ToLower(n.ID))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(enabled).To(BeTrue())

	g.Expect(s.DeleteNetwork(ctx, n.ID)).To(Succeed())
	_, err = s.GetNetworkByName(ctx, "winnet")
	g.Expect(err).To(MatchError(ErrNotFound))
	g.Expect(s.DeleteNetwork(ctx, n.ID)).To(Succeed(), "deleting an absent network is a no-op")
}

func TestSimCreateNetworkRejectsInvalidSpecs(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*NetworkSpec)
	}{
		{"no name", func(s *NetworkSpec) { s.Name = "" }},
		{"no adapter", func(s *NetworkSpec) { s.AdapterName = "" }},
		{"no subnet", func(s *NetworkSpec) { s.Subnet = netip.Prefix{} }},
		{"IPv6 subnet", func(s *NetworkSpec) { s.Subnet = netip.MustParsePrefix("fd00::/64") }},
		{"no gateway", func(s *NetworkSpec) { s.Gateway = netip.Addr{} }},
		{"gateway outside the subnet", func(s *NetworkSpec) { s.Gateway = netip.MustParseAddr("10.0.0.1") }},
		{"short source MAC", func(s *NetworkSpec) { s.SourceMAC = net.HardwareAddr{1, 2, 3} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			s := newTestSim(t, SimOptions{})
			spec := testNetworkSpec()
			tt.mutate(&spec)
			_, err := s.CreateTransparentNetwork(context.Background(), spec)
			g.Expect(err).To(HaveOccurred())
			g.Expect(err).NotTo(MatchError(ErrAdapterInUse))
			_, err = s.GetNetworkByName(context.Background(), spec.Name)
			g.Expect(err).To(MatchError(ErrNotFound))
		})
	}
}

func TestSimAdapterInUse(t *testing.T) {
	tests := []struct {
		name        string
		second      NetworkSpec
		wantInUse   bool
		deleteFirst bool
	}{
		{
			name:      "same adapter, other name",
			second:    NetworkSpec{Name: "other", AdapterName: "Ethernet0", Subnet: testSubnet, Gateway: testGateway},
			wantInUse: true,
		},
		{
			name:      "same adapter, same name",
			second:    testNetworkSpec(),
			wantInUse: true,
		},
		{
			name:      "adapter names are case-insensitive",
			second:    NetworkSpec{Name: "other", AdapterName: "ETHERNET0", Subnet: testSubnet, Gateway: testGateway},
			wantInUse: true,
		},
		{
			name:        "same adapter once the first network is deleted",
			second:      NetworkSpec{Name: "other", AdapterName: "Ethernet0", Subnet: testSubnet, Gateway: testGateway},
			deleteFirst: true,
		},
		{
			name:   "another adapter, same name: HNS does not enforce unique names",
			second: NetworkSpec{Name: "winnet", AdapterName: "Ethernet1", Subnet: testSubnet, Gateway: testGateway},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			s, first := withNetwork(t, SimOptions{})
			if tt.deleteFirst {
				g.Expect(s.DeleteNetwork(ctx, first.ID)).To(Succeed())
			}
			second, err := s.CreateTransparentNetwork(ctx, tt.second)
			if tt.wantInUse {
				g.Expect(err).To(MatchError(ErrAdapterInUse))
				g.Expect(err.Error()).To(ContainSubstring("0x57"))
				g.Expect(err.Error()).To(ContainSubstring(first.ID))
				g.Expect(second).To(BeNil())
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(second.ID).NotTo(Equal(first.ID))
			got, err := s.GetNetworkByName(ctx, tt.second.Name)
			g.Expect(err).NotTo(HaveOccurred())
			if tt.deleteFirst {
				g.Expect(got.ID).To(Equal(second.ID))
			} else {
				g.Expect(got.ID).To(Equal(first.ID), "the first network of that name")
			}
		})
	}
}

func TestSimNotFound(t *testing.T) {
	const missing = "6D3A1F8E-0000-4000-8000-000000000000"
	tests := []struct {
		name string
		call func(ctx context.Context, s *Sim) error
	}{
		{"get network", func(ctx context.Context, s *Sim) error {
			_, err := s.GetNetworkByName(ctx, "nope")
			return err
		}},
		{"enable the extension", func(ctx context.Context, s *Sim) error { return s.EnableOVSExtension(ctx, missing) }},
		{"query the extension", func(ctx context.Context, s *Sim) error {
			_, err := s.OVSExtensionEnabled(ctx, missing)
			return err
		}},
		{"create an endpoint on a missing network", func(ctx context.Context, s *Sim) error {
			_, err := s.CreateEndpoint(ctx, EndpointSpec{Name: "ep", NetworkID: missing, IP: netip.MustParseAddr("10.244.1.5")})
			return err
		}},
		{"get endpoint", func(ctx context.Context, s *Sim) error {
			_, err := s.GetEndpointByName(ctx, "nope")
			return err
		}},
		{"attach a missing endpoint", func(ctx context.Context, s *Sim) error { return s.AttachEndpoint(ctx, missing, "ns") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			s, _ := withNetwork(t, SimOptions{})
			err := tt.call(context.Background(), s)
			g.Expect(err).To(MatchError(ErrNotFound))
		})
	}
}

func TestSimIdempotentNoOps(t *testing.T) {
	const missing = "6D3A1F8E-0000-4000-8000-000000000000"
	tests := []struct {
		name string
		// call runs against a simulator with a network and an endpoint attached to namespace "ns-a".
		call func(ctx context.Context, s *Sim, n *Network, ep *Endpoint) error
		// wantNamespace is the endpoint's namespace after the call.
		wantNamespace string
	}{
		{"delete a missing network", func(ctx context.Context, s *Sim, _ *Network, _ *Endpoint) error {
			return s.DeleteNetwork(ctx, missing)
		}, "ns-a"},
		{"delete a missing endpoint", func(ctx context.Context, s *Sim, _ *Network, _ *Endpoint) error {
			return s.DeleteEndpoint(ctx, missing)
		}, "ns-a"},
		{"detach a missing endpoint", func(ctx context.Context, s *Sim, _ *Network, _ *Endpoint) error {
			return s.DetachEndpoint(ctx, missing, "ns-a")
		}, "ns-a"},
		{"detach from a namespace the endpoint is not in", func(ctx context.Context, s *Sim, _ *Network, ep *Endpoint) error {
			return s.DetachEndpoint(ctx, ep.ID, "ns-b")
		}, "ns-a"},
		{"attach to the namespace the endpoint is in", func(ctx context.Context, s *Sim, _ *Network, ep *Endpoint) error {
			return s.AttachEndpoint(ctx, ep.ID, "ns-a")
		}, "ns-a"},
		{"detach twice", func(ctx context.Context, s *Sim, _ *Network, ep *Endpoint) error {
			if err := s.DetachEndpoint(ctx, ep.ID, "ns-a"); err != nil {
				return err
			}
			return s.DetachEndpoint(ctx, ep.ID, "ns-a")
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			s, n := withNetwork(t, SimOptions{})
			ep, err := s.CreateEndpoint(ctx, EndpointSpec{Name: "pod-a", NetworkID: n.ID, IP: netip.MustParseAddr("10.244.1.5")})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(s.AttachEndpoint(ctx, ep.ID, "ns-a")).To(Succeed())

			g.Expect(tt.call(ctx, s, n, ep)).To(Succeed())

			got, err := s.GetEndpointByName(ctx, "pod-a")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got.NamespaceID).To(Equal(tt.wantNamespace))
			_, err = s.GetNetworkByName(ctx, "winnet")
			g.Expect(err).NotTo(HaveOccurred())
		})
	}
}

func TestSimEndpoints(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	s, n := withNetwork(t, SimOptions{})
	other, err := s.CreateTransparentNetwork(ctx, NetworkSpec{
		Name: "other", AdapterName: "Ethernet1", Subnet: netip.MustParsePrefix("10.9.0.0/16"),
		Gateway: netip.MustParseAddr("10.9.0.1"),
	})
	g.Expect(err).NotTo(HaveOccurred())

	// Defaults: prefix length of the subnet, gateway of the network, a MAC in the Hyper-V range.
	a, err := s.CreateEndpoint(ctx, EndpointSpec{Name: "pod-a", NetworkID: strings.ToLower(n.ID), IP: netip.MustParseAddr("10.244.1.5")})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(isGUID(a.ID)).To(BeTrue())
	g.Expect(a.NetworkID).To(Equal(n.ID))
	g.Expect(a.PrefixLength).To(Equal(24))
	g.Expect(a.Gateway).To(Equal(testGateway))
	g.Expect(a.MAC).To(HaveLen(6))
	g.Expect(a.MAC[:3]).To(Equal(net.HardwareAddr{0x00, 0x15, 0x5d}))
	g.Expect(a.NamespaceID).To(BeEmpty())

	mac := net.HardwareAddr{0x02, 0, 0, 0, 0, 0x0b}
	b, err := s.CreateEndpoint(ctx, EndpointSpec{
		Name: "pod-b", NetworkID: n.ID, IP: netip.MustParseAddr("10.244.1.6"), PrefixLength: 32, MAC: mac,
		Gateway: netip.MustParseAddr("10.244.1.254"),
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(b.MAC).To(Equal(mac))
	g.Expect(b.PrefixLength).To(Equal(32))
	g.Expect(b.Gateway).To(Equal(netip.MustParseAddr("10.244.1.254")))
	mac[0] = 0xff
	got, err := s.GetEndpointByName(ctx, "pod-b")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.MAC[0]).To(Equal(byte(0x02)), "the simulator keeps its own copy")

	c, err := s.CreateEndpoint(ctx, EndpointSpec{Name: "pod-c", NetworkID: other.ID, IP: netip.MustParseAddr("10.9.3.3")})
	g.Expect(err).NotTo(HaveOccurred())

	for _, bad := range []EndpointSpec{
		{Name: "", NetworkID: n.ID, IP: netip.MustParseAddr("10.244.1.7")},
		{Name: "x", NetworkID: n.ID, IP: netip.MustParseAddr("10.9.3.4")},
		{Name: "x", NetworkID: n.ID},
		{Name: "x", NetworkID: n.ID, IP: netip.MustParseAddr("10.244.1.7"), PrefixLength: 33},
		{Name: "x", NetworkID: n.ID, IP: netip.MustParseAddr("10.244.1.7"), MAC: net.HardwareAddr{1}},
	} {
		_, err := s.CreateEndpoint(ctx, bad)
		g.Expect(err).To(HaveOccurred(), "spec %+v", bad)
		g.Expect(err).NotTo(MatchError(ErrNotFound))
	}

	list, err := s.ListEndpoints(ctx, n.ID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(list).To(Equal([]Endpoint{*a, *b}))
	list, err = s.ListEndpoints(ctx, "6D3A1F8E-0000-4000-8000-000000000000")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(list).To(BeEmpty(), "a missing network has no endpoints")

	g.Expect(s.AttachEndpoint(ctx, a.ID, "ns-a")).To(Succeed())
	g.Expect(s.AttachEndpoint(ctx, a.ID, "ns-b")).To(MatchError(ContainSubstring("already attached to namespace")))
	g.Expect(s.AttachEndpoint(ctx, a.ID, "")).To(HaveOccurred())
	got, err = s.GetEndpointByName(ctx, "pod-a")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.NamespaceID).To(Equal("ns-a"))
	g.Expect(s.DetachEndpoint(ctx, a.ID, "ns-a")).To(Succeed())
	g.Expect(s.AttachEndpoint(ctx, a.ID, "ns-b")).To(Succeed(), "a detached endpoint can be attached elsewhere")

	g.Expect(s.DeleteEndpoint(ctx, b.ID)).To(Succeed())
	_, err = s.GetEndpointByName(ctx, "pod-b")
	g.Expect(err).To(MatchError(ErrNotFound))

	// Deleting a network deletes its endpoints, and only those.
	g.Expect(s.DeleteNetwork(ctx, n.ID)).To(Succeed())
	_, err = s.GetEndpointByName(ctx, "pod-a")
	g.Expect(err).To(MatchError(ErrNotFound))
	list, err = s.ListEndpoints(ctx, other.ID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(list).To(Equal([]Endpoint{*c}))
}

func TestSimDuplicateEndpointNames(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	s, n := withNetwork(t, SimOptions{})
	first, err := s.CreateEndpoint(ctx, EndpointSpec{Name: "pod-a", NetworkID: n.ID, IP: netip.MustParseAddr("10.244.1.5")})
	g.Expect(err).NotTo(HaveOccurred())
	second, err := s.CreateEndpoint(ctx, EndpointSpec{Name: "pod-a", NetworkID: n.ID, IP: netip.MustParseAddr("10.244.1.6")})
	g.Expect(err).NotTo(HaveOccurred(), "HNS does not enforce unique endpoint names")
	got, err := s.GetEndpointByName(ctx, "pod-a")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.ID).To(Equal(first.ID))
	g.Expect(s.DeleteEndpoint(ctx, first.ID)).To(Succeed())
	got, err = s.GetEndpointByName(ctx, "pod-a")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.ID).To(Equal(second.ID))
}

func TestSimReboot(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	s, n := withNetwork(t, SimOptions{})
	g.Expect(s.EnableOVSExtension(ctx, n.ID)).To(Succeed())
	ep, err := s.CreateEndpoint(ctx, EndpointSpec{Name: "pod-a", NetworkID: n.ID, IP: netip.MustParseAddr("10.244.1.5")})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.AttachEndpoint(ctx, ep.ID, "ns-a")).To(Succeed())

	g.Expect(s.Reboot(ctx)).To(Succeed())

	_, err = s.GetNetworkByName(ctx, "winnet")
	g.Expect(err).To(MatchError(ErrNotFound))
	_, err = s.GetEndpointByName(ctx, "pod-a")
	g.Expect(err).To(MatchError(ErrNotFound))
	_, err = s.OVSExtensionEnabled(ctx, n.ID)
	g.Expect(err).To(MatchError(ErrNotFound))
	list, err := s.ListEndpoints(ctx, n.ID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(list).To(BeEmpty())
	g.Expect(s.DeleteEndpoint(ctx, ep.ID)).To(Succeed())
	g.Expect(s.DeleteNetwork(ctx, n.ID)).To(Succeed())

	// The adapter is free again; the rebuilt network is a new one, with the extension disabled.
	rebuilt, err := s.CreateTransparentNetwork(ctx, testNetworkSpec())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rebuilt.ID).NotTo(Equal(n.ID))
	enabled, err := s.OVSExtensionEnabled(ctx, rebuilt.ID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(enabled).To(BeFalse())
}

func TestSimInjectedErrors(t *testing.T) {
	errInjected := errors.New("HNS failed with error : Unspecified error")
	tests := []struct {
		op   Op
		call func(ctx context.Context, s *Sim, n *Network) error
	}{
		{OpGetNetworkByName, func(ctx context.Context, s *Sim, _ *Network) error {
			_, err := s.GetNetworkByName(ctx, "winnet")
			return err
		}},
		{OpCreateTransparentNetwork, func(ctx context.Context, s *Sim, _ *Network) error {
			_, err := s.CreateTransparentNetwork(ctx, NetworkSpec{Name: "x", AdapterName: "Ethernet9", Subnet: testSubnet, Gateway: testGateway})
			if err == nil {
				_, err = s.GetNetworkByName(ctx, "x")
			}
			return err
		}},
		{OpEnableOVSExtension, func(ctx context.Context, s *Sim, n *Network) error { return s.EnableOVSExtension(ctx, n.ID) }},
		{OpCreateEndpoint, func(ctx context.Context, s *Sim, n *Network) error {
			_, err := s.CreateEndpoint(ctx, EndpointSpec{Name: "ep", NetworkID: n.ID, IP: netip.MustParseAddr("10.244.1.5")})
			return err
		}},
		{OpListEndpoints, func(ctx context.Context, s *Sim, n *Network) error {
			_, err := s.ListEndpoints(ctx, n.ID)
			return err
		}},
		{OpDeleteEndpoint, func(ctx context.Context, s *Sim, _ *Network) error {
			return s.DeleteEndpoint(ctx, "6D3A1F8E-0000-4000-8000-000000000000")
		}},
	}
	for _, tt := range tests {
		t.Run(string(tt.op), func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			s, n := withNetwork(t, SimOptions{})
			before := s.Calls(tt.op)
			s.FailNext(tt.op, 2, errInjected)
			for i := range 2 {
				err := tt.call(ctx, s, n)
				g.Expect(err).To(MatchError(errInjected), "call %d", i)
			}
			g.Expect(tt.call(ctx, s, n)).To(Succeed(), "the third call goes through")
			g.Expect(s.Calls(tt.op) - before).To(BeNumerically(">=", 3))
		})
	}

	t.Run("a failed create leaves no state and a default error is used", func(t *testing.T) {
		g := NewWithT(t)
		ctx := context.Background()
		s, n := withNetwork(t, SimOptions{})
		s.FailNext(OpCreateEndpoint, 1, nil)
		_, err := s.CreateEndpoint(ctx, EndpointSpec{Name: "ep", NetworkID: n.ID, IP: netip.MustParseAddr("10.244.1.5")})
		g.Expect(err).To(MatchError(ContainSubstring("injected failure of CreateEndpoint")))
		g.Expect(err.Error()).To(HavePrefix(`creating endpoint "ep" on network`))
		list, err := s.ListEndpoints(ctx, n.ID)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(list).To(BeEmpty())
		g.Expect(s.Calls(OpCreateEndpoint)).To(Equal(1))
		g.Expect(s.Calls(OpListEndpoints)).To(Equal(1))
		g.Expect(s.Calls(OpDeleteEndpoint)).To(Equal(0))
	})
}

func TestSimHangingDeleteTimesOut(t *testing.T) {
	tests := []struct {
		name    string
		op      Op
		opts    SimOptions
		bound   time.Duration
		del     func(ctx context.Context, s *Sim, n *Network, ep *Endpoint) error
		present func(ctx context.Context, s *Sim) error
		// joins says a retry joins the hung call instead of making another: at most one endpoint
		// delete is outstanding per endpoint.
		joins bool
	}{
		{
			name:  "endpoint delete, bounded by the endpoint delete timeout",
			op:    OpDeleteEndpoint,
			opts:  SimOptions{Timeouts: Timeouts{EndpointDelete: 150 * time.Millisecond}},
			bound: 150 * time.Millisecond,
			del: func(ctx context.Context, s *Sim, _ *Network, ep *Endpoint) error {
				return s.DeleteEndpoint(ctx, ep.ID)
			},
			present: func(ctx context.Context, s *Sim) error {
				_, err := s.GetEndpointByName(ctx, "pod-a")
				return err
			},
			joins: true,
		},
		{
			name:  "network delete, bounded by the network timeout",
			op:    OpDeleteNetwork,
			opts:  SimOptions{Timeouts: Timeouts{Network: 250 * time.Millisecond}},
			bound: 250 * time.Millisecond,
			del: func(ctx context.Context, s *Sim, n *Network, _ *Endpoint) error {
				return s.DeleteNetwork(ctx, n.ID)
			},
			present: func(ctx context.Context, s *Sim) error {
				_, err := s.GetNetworkByName(ctx, "winnet")
				return err
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			s, n := withNetwork(t, tt.opts)
			ep, err := s.CreateEndpoint(ctx, EndpointSpec{Name: "pod-a", NetworkID: n.ID, IP: netip.MustParseAddr("10.244.1.5")})
			g.Expect(err).NotTo(HaveOccurred())

			release := s.Hang(tt.op)
			defer release()
			start := time.Now()
			err = tt.del(ctx, s, n, ep)
			elapsed := time.Since(start)
			g.Expect(err).To(MatchError(ErrTimeout))
			g.Expect(err.Error()).To(ContainSubstring("deleting"))
			g.Expect(elapsed).To(BeNumerically(">=", tt.bound))
			g.Expect(elapsed).To(BeNumerically("<", tt.bound+500*time.Millisecond))
			g.Expect(s.Calls(tt.op)).To(Equal(1))

			// The hung call still holds nothing: lookups answer, and the object is still there.
			g.Expect(tt.present(ctx, s)).To(Succeed())

			// A retry while HNS still hangs times out again; an endpoint delete joins the hung call.
			for range 3 {
				g.Expect(tt.del(ctx, s, n, ep)).To(MatchError(ErrTimeout))
			}
			calls := 4
			if tt.joins {
				calls = 1
			}
			g.Expect(s.Calls(tt.op)).To(Equal(calls))

			// Released, the hung deletes complete on their own, as HNS's eventually do.
			release()
			g.Eventually(func() error { return tt.present(ctx, s) }).
				WithTimeout(2 * time.Second).WithPolling(10 * time.Millisecond).Should(MatchError(ErrNotFound))
			g.Expect(tt.del(ctx, s, n, ep)).To(Succeed())
			g.Expect(s.Calls(tt.op)).To(Equal(calls + 1))
		})
	}
}

func TestSimLatency(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	const latency = 150 * time.Millisecond
	s, n := withNetwork(t, SimOptions{Latency: latency, Timeouts: Timeouts{Default: 500 * time.Millisecond}})

	start := time.Now()
	_, err := s.GetNetworkByName(ctx, "winnet")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(time.Since(start)).To(BeNumerically(">=", latency))

	s.SetLatency(OpOVSExtensionEnabled, 0)
	start = time.Now()
	_, err = s.OVSExtensionEnabled(ctx, n.ID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(time.Since(start)).To(BeNumerically("<", latency), "SetLatency overrides the default per operation")

	// Latency above the bound is a timeout, returned at the bound.
	s.SetLatency(OpListEndpoints, 2*time.Second)
	start = time.Now()
	_, err = s.ListEndpoints(ctx, n.ID)
	g.Expect(err).To(MatchError(ErrTimeout))
	g.Expect(time.Since(start)).To(BeNumerically("<", 1500*time.Millisecond))
	g.Expect(s.Calls(OpListEndpoints)).To(Equal(1))
}

func TestSimConcurrency(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	s := newTestSim(t, SimOptions{Latency: time.Millisecond})

	// Many agents racing to create the network on one adapter: exactly one wins, the others see 0x57.
	const racers = 8
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		won     []*Network
		inUse   int
		unknown []error
	)
	for i := range racers {
		wg.Go(func() {
			n, err := s.CreateTransparentNetwork(ctx, NetworkSpec{
				Name: fmt.Sprintf("net-%d", i), AdapterName: "Ethernet0", Subnet: testSubnet, Gateway: testGateway,
			})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won = append(won, n)
			case errors.Is(err, ErrAdapterInUse):
				inUse++
			default:
				unknown = append(unknown, err)
			}
		})
	}
	wg.Wait()
	g.Expect(unknown).To(BeEmpty())
	g.Expect(won).To(HaveLen(1))
	g.Expect(inUse).To(Equal(racers - 1))
	n := won[0]

	// Endpoints created, attached, listed, detached and deleted from many goroutines.
	const workers = 16
	for i := range workers {
		wg.Go(func() {
			g := NewWithT(t)
			name := fmt.Sprintf("pod-%d", i)
			ep, err := s.CreateEndpoint(ctx, EndpointSpec{Name: name, NetworkID: n.ID, IP: netip.AddrFrom4([4]byte{10, 244, 1, byte(10 + i)})})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(s.AttachEndpoint(ctx, ep.ID, "ns-"+name)).To(Succeed())
			_, err = s.ListEndpoints(ctx, n.ID)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(s.EnableOVSExtension(ctx, n.ID)).To(Succeed())
			if i%2 == 0 {
				g.Expect(s.DetachEndpoint(ctx, ep.ID, "ns-"+name)).To(Succeed())
				g.Expect(s.DeleteEndpoint(ctx, ep.ID)).To(Succeed())
			}
		})
	}
	wg.Wait()
	list, err := s.ListEndpoints(ctx, n.ID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(list).To(HaveLen(workers / 2))
	for _, ep := range list {
		g.Expect(ep.NamespaceID).To(Equal("ns-" + ep.Name))
	}
	g.Expect(s.Calls(OpCreateEndpoint)).To(Equal(workers))
	g.Expect(s.Calls(OpDeleteEndpoint)).To(Equal(workers / 2))
	g.Expect(s.Calls(OpCreateTransparentNetwork)).To(Equal(racers))
}

func TestLinuxInterfaceName(t *testing.T) {
	tests := []struct {
		name, endpoint, want string
	}{
		{"short names are kept", "pod-a", "pod-a"},
		{"15 bytes are kept", "abcdefghijklmno", "abcdefghijklmno"},
		{"longer names are prefix, dash, hash", "coredns-7db6d8ff4d-x2b9z", "coredn-"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got := LinuxInterfaceName(tt.endpoint)
			g.Expect(len(got)).To(BeNumerically("<=", 15))
			if len(tt.endpoint) <= 15 {
				g.Expect(got).To(Equal(tt.want))
				return
			}
			g.Expect(got).To(HaveLen(15))
			g.Expect(got).To(HavePrefix(tt.want))
			g.Expect(got).To(MatchRegexp(`^.{6}-[0-9a-f]{8}$`))
			g.Expect(LinuxInterfaceName(tt.endpoint)).To(Equal(got), "stable")
			g.Expect(LinuxInterfaceName(tt.endpoint+"x")).NotTo(Equal(got), "distinct")
		})
	}
}
