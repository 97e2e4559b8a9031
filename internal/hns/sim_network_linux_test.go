//go:build linux

package hns

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/vishvananda/netlink"

	"github.com/winnet-io/winnet/internal/hostnet"
	"github.com/winnet-io/winnet/test/hostcmd"
)

const (
	testAdapter     = "Ethernet0"
	testHostIP      = "192.168.50.10/24"
	testHostGateway = "192.168.50.1"
)

var testAdapterMAC = net.HardwareAddr{0x02, 0x50, 0x00, 0x00, 0x00, 0x10}

// newNodeNS creates a namespace playing a Windows host with one physical adapter, testAdapter: a veth (its peer in the namespace too) with
// testHostIP (static, or a DHCP lease when dhcp), a default route via testHostGateway and testAdapterMAC.
func newNodeNS(t *testing.T, dhcp bool) (name, path string) {
	t.Helper()
	name, path = newNetNS(t, "whns-node")
	addr := []string{"ip", "-n", name, "addr", "add", testHostIP, "dev", testAdapter}
	if dhcp {
		addr = append(addr, "valid_lft", "3600", "preferred_lft", "3600")
	}
	for _, args := range [][]string{
		{"ip", "-n", name, "link", "add", testAdapter, "address", testAdapterMAC.String(), "type", "veth", "peer", "name", testAdapter + "p"},
		{"ip", "-n", name, "link", "set", testAdapter, "up"},
		addr,
		{"ip", "-n", name, "route", "add", "default", "via", testHostGateway, "dev", testAdapter},
	} {
		if out, err := hostcmd.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return name, path
}

// hostLinks lists the links of the host namespace but the adapter and the management vNIC: loopback and the
// endpoints' host ends.
func hostLinks(t *testing.T, path string) []string {
	t.Helper()
	return slices.DeleteFunc(linkNames(t, path), func(n string) bool {
		return n == testAdapter || n == testAdapter+"p" || strings.HasPrefix(n, "vEth(") || n == "br-int"
	})
}

// linkConfig is what a test sees of a host link: its MAC, IPv4 addresses (with "dynamic" for a lease) and routes.
type linkConfig struct {
	Exists bool
	Kind   string
	MAC    string
	Addrs  []string
	Routes []string
}

func inspectLink(t *testing.T, path, name string) linkConfig {
	t.Helper()
	var c linkConfig
	inNetNS(t, path, func() {
		l, err := netlink.LinkByName(name)
		if err != nil {
			return
		}
		c.Exists, c.Kind, c.MAC = true, l.Type(), l.Attrs().HardwareAddr.String()
		addrs, err := redump(func() ([]netlink.Addr, error) { return netlink.AddrList(l, netlink.FAMILY_V4) })
		NewWithT(t).Expect(err).NotTo(HaveOccurred())
		for _, a := range addrs {
			s := a.IPNet.String()
			if a.ValidLft != 0xFFFFFFFF {
				s += " dynamic"
			}
			c.Addrs = append(c.Addrs, s)
		}
		routes, err := redump(func() ([]netlink.Route, error) { return netlink.RouteList(l, netlink.FAMILY_V4) })
		NewWithT(t).Expect(err).NotTo(HaveOccurred())
		for _, r := range routes {
			if r.Protocol == netlink.RouteProtocol(2) { // kernel: derived from an address
				continue
			}
			dst := "default"
			if r.Dst != nil && r.Dst.String() != "0.0.0.0/0" {
				dst = r.Dst.String()
			}
			s := dst
			if r.Gw != nil {
				s += " via " + r.Gw.String()
			}
			c.Routes = append(c.Routes, s)
		}
	})
	return c
}

// TestLinuxSimNetworkLikeHNS checks that creating and deleting a Transparent network does to the host what HNS
// does (Microsoft's Transparent network documentation; Antrea PR 3067 and issue 2213).
func TestLinuxSimNetworkLikeHNS(t *testing.T) {
	for _, dhcp := range []bool{false, true} {
		name := "static"
		if dhcp {
			name = "dhcp"
		}
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			s, nodePath := newSimOnNode(t, dhcp, LinuxSimOptions{})
			dns := []netip.Addr{netip.MustParseAddr("192.168.50.53")}
			g.Expect(s.SetAdapterDNS(testAdapter, dns)).To(Succeed())
			addr := testHostIP
			if dhcp {
				addr += " dynamic"
			}
			before := inspectLink(t, nodePath, testAdapter)
			g.Expect(before).To(Equal(linkConfig{Exists: true, Kind: "veth", MAC: testAdapterMAC.String(),
				Addrs: []string{addr}, Routes: []string{"default via " + testHostGateway}}))

			// Creating the network makes the management vNIC, which takes the adapter's MAC, addresses (a lease
			// stays a lease), routes and DNS servers; the adapter keeps none.
			n, err := s.CreateTransparentNetwork(ctx, linuxNetworkSpec())
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(n.ManagementVNIC).To(Equal("vEth(Ethernet0)"))
			g.Expect(inspectLink(t, nodePath, n.ManagementVNIC)).To(Equal(linkConfig{Exists: true, Kind: "tuntap", MAC: testAdapterMAC.String(),
				Addrs: []string{addr}, Routes: []string{"default via " + testHostGateway}}))
			g.Expect(inspectLink(t, nodePath, testAdapter)).To(Equal(linkConfig{Exists: true, Kind: "veth", MAC: testAdapterMAC.String()}))
			g.Expect(s.ManagementVNICDNS(n.ID)).To(Equal(dns))
			g.Expect(s.AdapterDNS(testAdapter)).To(BeEmpty())
			got, err := s.GetNetworkByName(ctx, "winnet")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got.ManagementVNIC).To(Equal(n.ManagementVNIC))

			// The adapter is bound, and the vNIC is another network's virtual adapter: both fail with 0x57,
			// naming the network that holds them.
			_, err = s.CreateTransparentNetwork(ctx, NetworkSpec{Name: "other", AdapterName: testAdapter, Subnet: testSubnet, Gateway: testGateway})
			g.Expect(err).To(MatchError(ErrAdapterInUse))
			g.Expect(err.Error()).To(And(ContainSubstring("0x80070057"), ContainSubstring(`bound to network "winnet"`)))
			_, err = s.CreateTransparentNetwork(ctx, NetworkSpec{Name: "other", AdapterName: n.ManagementVNIC, Subnet: testSubnet, Gateway: testGateway})
			g.Expect(err).To(MatchError(ErrAdapterInUse))
			g.Expect(err.Error()).To(ContainSubstring(`is the management vNIC of network "winnet"`))

			// The extension: enabled only on an existing network, once the host IP is on the vNIC; it can be
			// disabled on a network that stays.
			g.Expect(s.EnableOVSExtension(ctx, "00000000-0000-0000-0000-000000000000")).To(MatchError(ErrNotFound))
			g.Expect(s.EnableOVSExtension(ctx, n.ID)).To(Succeed())
			g.Expect(s.OrderViolations()).To(BeEmpty())
			g.Expect(s.DisableOVSExtension(n.ID)).To(Succeed())
			on, err := s.OVSExtensionEnabled(ctx, n.ID)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(on).To(BeFalse())
			_, err = s.GetNetworkByName(ctx, "winnet")
			g.Expect(err).NotTo(HaveOccurred(), "disabling the extension keeps the network")

			// The agent renames the vNIC; HNS still knows it as the network's: it is still not an adapter to bind,
			// and deleting the network deletes it under its new name and gives the adapter everything back.
			h, err := hostnet.New(hostnet.Options{NetNSPath: nodePath})
			g.Expect(err).NotTo(HaveOccurred())
			vnic, err := h.LinkByName(ctx, n.ManagementVNIC)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(h.RenameLink(ctx, vnic.Index, "br-int")).To(Succeed())
			g.Expect(inspectLink(t, nodePath, "br-int").Routes).To(Equal([]string{"default via " + testHostGateway}), "a rename keeps the routes")
			_, err = s.CreateTransparentNetwork(ctx, NetworkSpec{Name: "other", AdapterName: "br-int", Subnet: testSubnet, Gateway: testGateway})
			g.Expect(err).To(MatchError(ErrAdapterInUse))

			g.Expect(s.DeleteNetwork(ctx, n.ID)).To(Succeed())
			g.Expect(inspectLink(t, nodePath, "br-int").Exists).To(BeFalse(), "the vNIC goes with the network")
			g.Expect(inspectLink(t, nodePath, testAdapter)).To(Equal(before), "static stays static, DHCP stays DHCP")
			g.Expect(s.AdapterDNS(testAdapter)).To(Equal(dns))
			cfg, err := h.ReadIPConfig(ctx, vnicIndexOf(t, h, testAdapter))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(cfg.DHCP).To(Equal(dhcp))
		})
	}
}

func vnicIndexOf(t *testing.T, h hostnet.Interface, name string) int {
	t.Helper()
	l, err := h.LinkByName(context.Background(), name)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return l.Index
}

// TestLinuxSimRebootGivesAdapterBack checks the reboot: networks, endpoints and the management vNIC are gone and
// the adapter has its configuration again.
func TestLinuxSimRebootGivesAdapterBack(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	s, nodePath := newSimOnNode(t, false, LinuxSimOptions{})
	before := inspectLink(t, nodePath, testAdapter)
	n, err := s.CreateTransparentNetwork(ctx, linuxNetworkSpec())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.EnableOVSExtension(ctx, n.ID)).To(Succeed())

	g.Expect(s.Reboot(ctx)).To(Succeed())
	_, err = s.GetNetworkByName(ctx, "winnet")
	g.Expect(err).To(MatchError(ErrNotFound))
	g.Expect(inspectLink(t, nodePath, n.ManagementVNIC).Exists).To(BeFalse())
	g.Expect(inspectLink(t, nodePath, testAdapter)).To(Equal(before))

	// After the reboot the network is created again on the adapter, as the agent does.
	_, err = s.CreateTransparentNetwork(ctx, linuxNetworkSpec())
	g.Expect(err).NotTo(HaveOccurred())
}

// TestLinuxSimRecordsExtensionBeforeHostIP checks that the simulator catches an agent that enables the OVS
// extension before the host IP is on the management vNIC.
func TestLinuxSimRecordsExtensionBeforeHostIP(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	s, nodePath := newSimOnNode(t, false, LinuxSimOptions{})
	n, err := s.CreateTransparentNetwork(ctx, linuxNetworkSpec())
	g.Expect(err).NotTo(HaveOccurred())
	h, err := hostnet.New(hostnet.Options{NetNSPath: nodePath})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(h.DeleteAddress(ctx, vnicIndexOf(t, h, n.ManagementVNIC), netip.MustParsePrefix(testHostIP))).To(Succeed())
	g.Expect(s.EnableOVSExtension(ctx, n.ID)).To(Succeed())
	g.Expect(s.OrderViolations()).To(ConsistOf(ContainSubstring("enabled before the host IP was on its management vNIC")))
}

// TestLinuxSimNetworkOnMissingAdapter: an adapter that does not exist is not found.
func TestLinuxSimNetworkOnMissingAdapter(t *testing.T) {
	g := NewWithT(t)
	_, nodePath := newNetNS(t, "whns-node")
	s, err := NewLinuxSim(LinuxSimOptions{HostNetNS: nodePath})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = s.Close() })
	_, err = s.CreateTransparentNetwork(context.Background(), NetworkSpec{Name: "winnet", AdapterName: "nope", Subnet: testSubnet, Gateway: testGateway})
	g.Expect(errors.Is(err, ErrNotFound)).To(BeTrue(), "%v", err)
}

// linuxNetworkSpec is testNetworkSpec on the adapter newNodeNS creates.
func linuxNetworkSpec() NetworkSpec {
	spec := testNetworkSpec()
	spec.AdapterName = testAdapter
	return spec
}

// TestLinuxSimHostIPArrivesLate: with HostIPDelay the adapter loses its configuration at once and the vNIC gets
// it only later, as on Windows.
func TestLinuxSimHostIPArrivesLate(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	s, nodePath := newSimOnNode(t, false, LinuxSimOptions{HostIPDelay: 300 * time.Millisecond})
	n, err := s.CreateTransparentNetwork(ctx, linuxNetworkSpec())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(inspectLink(t, nodePath, testAdapter).Addrs).To(BeEmpty())
	g.Expect(inspectLink(t, nodePath, n.ManagementVNIC).Addrs).To(BeEmpty(), "not yet")
	g.Eventually(func() []string { return inspectLink(t, nodePath, n.ManagementVNIC).Addrs }).Should(Equal([]string{testHostIP}))
}

// newSimOnNode returns a Linux-backed simulator on a new node namespace (see newNodeNS), closed at cleanup.
func newSimOnNode(t *testing.T, dhcp bool, opts LinuxSimOptions) (*Sim, string) {
	t.Helper()
	_, nodePath := newNodeNS(t, dhcp)
	opts.HostNetNS = nodePath
	s, err := NewLinuxSim(opts)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = s.Close() })
	return s, nodePath
}
