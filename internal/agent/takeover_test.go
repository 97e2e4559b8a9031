package agent

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/internal/cni"
	"github.com/winnet-io/winnet/internal/hns"
)

// flannelNode is a simulated Windows node seeded with what flannel's win-overlay backend and
// kube-proxy's winkernel mode leave (see internal/hns/sim_foreign.go for the sources), beside things
// of nobody's: containerd's NAT network with an endpoint and a load balancer of its own, and winnet's
// conflist.
type flannelNode struct {
	sim                  *hns.Sim
	overlay, nat         *hns.NetworkInfo
	podEP, vipEP, remote *hns.Endpoint
	natEP                *hns.Endpoint
	kpLB, natLB          *hns.LoadBalancer
	confDir, subnetFile  string
	vipFile              string
}

var (
	flSubnet  = netip.MustParsePrefix("10.244.1.0/24")
	flGateway = netip.MustParseAddr("10.244.1.1")
	hostMAC   = net.HardwareAddr{0x00, 0x15, 0x5d, 0x65, 0x00, 0x11}
)

func seedFlannelNode(t *testing.T) *flannelNode {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	n := &flannelNode{sim: hns.NewSim(hns.SimOptions{})}
	var err error
	// flannel's vxlan backend (sig-windows-tools' Backend.Name "vxlan0").
	n.overlay, err = n.sim.CreateNetwork(ctx, hns.ForeignNetworkSpec{Type: hns.Overlay, Name: "vxlan0", AdapterName: "Ethernet", Subnet: flSubnet, Gateway: flGateway, HostRoute: true})
	g.Expect(err).NotTo(HaveOccurred())
	for _, rs := range []hns.RemoteSubnetPolicy{
		{DestinationPrefix: netip.MustParsePrefix("10.244.2.0/24"), ProviderAddress: netip.MustParseAddr("192.168.101.12"), DRMAC: "0e:2a:0a:f4:02:00", IsolationID: 4096},
		{DestinationPrefix: netip.MustParsePrefix("10.244.9.0/24"), ProviderAddress: netip.MustParseAddr("192.168.101.21"), DRMAC: "5a:11:22:33:44:55", IsolationID: 4096},
	} {
		g.Expect(n.sim.AddRemoteSubnetPolicy(n.overlay.ID, rs)).To(Succeed())
	}
	// A Pod's endpoint whose DEL never came (win-overlay names it <sandbox>_<network>).
	n.podEP, err = n.sim.CreateEndpoint(ctx, hns.EndpointSpec{Name: "3f1c0a9e77d2_vxlan0", NetworkID: n.overlay.ID, IP: netip.MustParseAddr("10.244.1.5")})
	g.Expect(err).NotTo(HaveOccurred())
	// kube-proxy's source VIP endpoint, a remote endpoint for a backend on another node, and a load balancer.
	n.vipEP, err = n.sim.CreateSourceVIPEndpoint(ctx, n.overlay.ID, netip.MustParseAddr("10.244.1.3"), hostMAC)
	g.Expect(err).NotTo(HaveOccurred())
	n.remote, err = n.sim.CreateRemoteEndpoint(ctx, n.overlay.ID, netip.MustParseAddr("10.244.2.7"), net.HardwareAddr{0x0e, 0x2a, 0x0a, 0xf4, 0x02, 0x07})
	g.Expect(err).NotTo(HaveOccurred())
	n.kpLB, err = n.sim.CreateLoadBalancer(ctx, hns.LoadBalancer{FrontendVIPs: []string{"10.96.0.10"}, SourceVIP: "10.244.1.3", Endpoints: []string{n.remote.ID, n.podEP.ID}})
	g.Expect(err).NotTo(HaveOccurred())
	// Nobody's: containerd's NAT network, its endpoint, a load balancer to it.
	n.nat, err = n.sim.CreateNetwork(ctx, hns.ForeignNetworkSpec{Type: hns.NAT, Name: "nat", Subnet: netip.MustParsePrefix("172.30.0.0/16"), Gateway: netip.MustParseAddr("172.30.0.1")})
	g.Expect(err).NotTo(HaveOccurred())
	n.natEP, err = n.sim.CreateEndpoint(ctx, hns.EndpointSpec{Name: "build-container", NetworkID: n.nat.ID, IP: netip.MustParseAddr("172.30.0.9")})
	g.Expect(err).NotTo(HaveOccurred())
	n.natLB, err = n.sim.CreateLoadBalancer(ctx, hns.LoadBalancer{FrontendVIPs: []string{"172.30.0.100"}, Endpoints: []string{n.natEP.ID}})
	g.Expect(err).NotTo(HaveOccurred())

	dir := t.TempDir()
	n.confDir = filepath.Join(dir, "net.d")
	g.Expect(os.MkdirAll(n.confDir, 0o755)).To(Succeed())
	// sig-windows-tools' flannel configuration: the flannel plugin delegating to win-overlay.
	writeFile(t, filepath.Join(n.confDir, "10-flannel.conf"), `{"name":"vxlan0","cniVersion":"0.3.0","type":"flannel","capabilities":{"portMappings":true,"dns":true},"delegate":{"type":"win-overlay","policies":[]}}`)
	writeFile(t, filepath.Join(n.confDir, cni.ConfListName), `{"cniVersion":"1.0.0","name":"winnet","plugins":[{"type":"winnet-cni"}]}`)
	n.subnetFile = filepath.Join(dir, "run", "flannel", "subnet.env")
	writeFile(t, n.subnetFile, "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n")
	n.vipFile = filepath.Join(dir, "sourcevip", "sourceVip.json")
	writeFile(t, n.vipFile, `{"cniVersion":"0.2.0","ip4":{"ip":"10.244.1.3/24","gateway":"10.244.1.1"},"dns":{}}`)
	return n
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	NewWithT(t).Expect(os.MkdirAll(filepath.Dir(path), 0o755)).To(Succeed())
	NewWithT(t).Expect(os.WriteFile(path, []byte(content), 0o644)).To(Succeed())
}

func (n *flannelNode) opts(from ...string) TakeoverOptions {
	return TakeoverOptions{From: from, CNIConfDir: n.confDir, FlannelSubnetFile: n.subnetFile, SourceVIPFile: n.vipFile}
}

// state is everything on the node the takeover may touch, to compare before and after.
type nodeState struct {
	Networks      []hns.NetworkInfo
	Endpoints     map[string][]hns.Endpoint
	LoadBalancers []hns.LoadBalancer
	Files         []string
}

func (n *flannelNode) state(t *testing.T) nodeState {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	s := nodeState{Endpoints: map[string][]hns.Endpoint{}}
	var err error
	s.Networks, err = n.sim.ListNetworks(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	for _, net := range s.Networks {
		s.Endpoints[net.Name], err = n.sim.ListEndpoints(ctx, net.ID)
		g.Expect(err).NotTo(HaveOccurred())
	}
	s.LoadBalancers, err = n.sim.ListLoadBalancers(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	for _, f := range []string{filepath.Join(n.confDir, "10-flannel.conf"), filepath.Join(n.confDir, cni.ConfListName), n.subnetFile, n.vipFile} {
		if _, err := os.Stat(f); err == nil {
			s.Files = append(s.Files, filepath.Base(f))
		}
	}
	entries, _ := os.ReadDir(n.confDir)
	for _, e := range entries {
		if !slices.Contains(s.Files, e.Name()) {
			s.Files = append(s.Files, e.Name())
		}
	}
	return s
}

// TestTakeoverFlannelAndKubeProxy: --dry-run lists exactly flannel's and kube-proxy's leftovers and changes
// nothing; the takeover removes exactly them (never containerd's NAT network, its endpoint or its load
// balancer, nor winnet's conflist), after which winnet's Transparent network can take the adapter that
// flannel's Overlay network held; a second run has nothing to remove.
func TestTakeoverFlannelAndKubeProxy(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	n := seedFlannelNode(t)
	before := n.state(t)
	winnet := hns.NetworkSpec{Name: DefaultHNSNetwork, AdapterName: "Ethernet", Subnet: flSubnet, Gateway: flGateway}
	_, err := n.sim.CreateTransparentNetwork(ctx, winnet)
	g.Expect(errors.Is(err, hns.ErrAdapterInUse)).To(BeTrue(), "flannel's network holds the adapter: %v", err)

	var out bytes.Buffer
	opts := n.opts(StackFlannel, StackKubeProxy)
	opts.DryRun, opts.Out = true, &out
	lines, err := Takeover(ctx, n.sim, opts)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n.state(t)).To(Equal(before), "a dry run changes nothing")
	want := []string{
		"would remove: kube-proxy's source VIP file " + n.vipFile + " (10.244.1.3)",
		"would remove: HNS load balancer " + n.kpLB.ID + " (frontends 10.96.0.10, source VIP 10.244.1.3, 2 endpoints) (kube-proxy)",
		"would remove: flannel's HNS endpoint 3f1c0a9e77d2_vxlan0 " + n.podEP.ID + " (10.244.1.5) on network \"vxlan0\"",
		"would remove: kube-proxy's HNS endpoint (unnamed) " + n.vipEP.ID + " (10.244.1.3) on network \"vxlan0\"",
		"would remove: kube-proxy's HNS endpoint (unnamed) " + n.remote.ID + " (10.244.2.7) on network \"vxlan0\"",
		"would remove: flannel's HNS network \"vxlan0\" (Overlay, 10.244.1.0/24, adapter \"Ethernet\") with its RemoteSubnetRoute policies " +
			"10.244.2.0/24 via 192.168.101.12 (VNI 4096, DR MAC 0e:2a:0a:f4:02:00), 10.244.9.0/24 via 192.168.101.21 (VNI 4096, DR MAC 5a:11:22:33:44:55) and its HostRoute policy",
		"would remove: flannel's CNI configuration " + filepath.Join(n.confDir, "10-flannel.conf") + " (plugins flannel,win-overlay)",
		"would remove: flanneld's subnet file " + n.subnetFile + " (FLANNEL_SUBNET=10.244.1.1/24)",
	}
	g.Expect(lines).To(Equal(want))
	g.Expect(out.String()).To(ContainSubstring(`leaving: network "nat" (NAT): not flannel's or kube-proxy's`))
	g.Expect(out.String()).To(ContainSubstring("leaving: HNS load balancer " + n.natLB.ID))

	out.Reset()
	opts.DryRun = false
	lines, err = Takeover(ctx, n.sim, opts)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(lines).To(HaveLen(len(want)))
	after := n.state(t)
	g.Expect(after.Networks).To(HaveLen(1))
	g.Expect(after.Networks[0].Name).To(Equal("nat"))
	g.Expect(after.Endpoints["nat"]).To(Equal(before.Endpoints["nat"]))
	g.Expect(after.LoadBalancers).To(Equal([]hns.LoadBalancer{*n.natLB}))
	g.Expect(after.Files).To(Equal([]string{cni.ConfListName}))

	_, err = n.sim.CreateTransparentNetwork(ctx, winnet)
	g.Expect(err).NotTo(HaveOccurred(), "the adapter is free for winnet's network")

	out.Reset()
	lines, err = Takeover(ctx, n.sim, opts)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(lines).To(BeEmpty())
	g.Expect(out.String()).To(ContainSubstring("nothing to remove: flannel and kube-proxy left nothing on this node"))
	g.Expect(out.String()).To(ContainSubstring(`leaving: network "winnet" (Transparent)`))
}

// TestTakeoverKubeProxyOnly: --from kube-proxy removes kube-proxy's load balancer, its source-VIP and
// remote endpoints and its source VIP file, and leaves flannel's network, its Pod endpoint and files.
func TestTakeoverKubeProxyOnly(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	n := seedFlannelNode(t)
	before := n.state(t)
	var out bytes.Buffer
	opts := n.opts(StackKubeProxy)
	opts.Out = &out
	lines, err := Takeover(ctx, n.sim, opts)
	g.Expect(err).NotTo(HaveOccurred(), out.String())
	g.Expect(lines).To(Equal([]string{
		"removed: kube-proxy's source VIP file " + n.vipFile + " (10.244.1.3)",
		"removed: HNS load balancer " + n.kpLB.ID + " (frontends 10.96.0.10, source VIP 10.244.1.3, 2 endpoints) (kube-proxy)",
		"removed: kube-proxy's HNS endpoint (unnamed) " + n.vipEP.ID + " (10.244.1.3) on network \"vxlan0\"",
		"removed: kube-proxy's HNS endpoint (unnamed) " + n.remote.ID + " (10.244.2.7) on network \"vxlan0\"",
	}))
	g.Expect(out.String()).To(ContainSubstring("leaving: HNS endpoint 3f1c0a9e77d2_vxlan0 " + n.podEP.ID + " (10.244.1.5) on network \"vxlan0\": not kube-proxy's, and its network stays"))
	after := n.state(t)
	g.Expect(after.Networks).To(Equal(before.Networks))
	g.Expect(after.Endpoints["vxlan0"]).To(Equal([]hns.Endpoint{*n.podEP}))
	g.Expect(after.LoadBalancers).To(Equal([]hns.LoadBalancer{*n.natLB}))
	g.Expect(after.Files).To(ConsistOf("10-flannel.conf", cni.ConfListName, "subnet.env"))
}

// TestTakeoverHostGW: flannel's host-gw backend leaves an L2Bridge network "cbr0" and its host endpoint
// "cbr0_ep", attached to the host compartment: both go (the host endpoint is not a Pod).
func TestTakeoverHostGW(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	sim := hns.NewSim(hns.SimOptions{})
	cbr0, err := sim.CreateNetwork(ctx, hns.ForeignNetworkSpec{Type: hns.L2Bridge, Name: "cbr0", AdapterName: "Ethernet", Subnet: flSubnet, Gateway: flGateway})
	g.Expect(err).NotTo(HaveOccurred())
	ep, err := sim.CreateEndpoint(ctx, hns.EndpointSpec{Name: "cbr0_ep", NetworkID: cbr0.ID, IP: netip.MustParseAddr("10.244.1.2")})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sim.AttachEndpoint(ctx, ep.ID, "00000000-0000-0000-0000-000000000001")).To(Succeed()) // HostAttach(1)
	dir := t.TempDir()
	lines, err := Takeover(ctx, sim, TakeoverOptions{From: []string{StackFlannel}, CNIConfDir: dir, FlannelSubnetFile: filepath.Join(dir, "none")})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(lines).To(Equal([]string{
		"removed: flannel's HNS endpoint cbr0_ep " + ep.ID + " (10.244.1.2) on network \"cbr0\"",
		"removed: flannel's HNS network \"cbr0\" (L2Bridge, 10.244.1.0/24, adapter \"Ethernet\")",
	}))
	nets, err := sim.ListNetworks(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(nets).To(BeEmpty())
}

// TestTakeoverRefuses: each thing the takeover does not recognise, and a Pod still attached, makes it
// refuse with the reason and change nothing, dry run or not.
func TestTakeoverRefuses(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		from []string
		add  func(t *testing.T, n *flannelNode)
		want string
	}{{
		name: "a Pod still attached",
		from: []string{StackFlannel, StackKubeProxy},
		add: func(t *testing.T, n *flannelNode) {
			g := NewWithT(t)
			ep, err := n.sim.CreateEndpoint(ctx, hns.EndpointSpec{Name: "9a8b7c6d5e4f_vxlan0", NetworkID: n.overlay.ID, IP: netip.MustParseAddr("10.244.1.6")})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(n.sim.AttachEndpoint(ctx, ep.ID, "5C0A7E0B-1111-2222-3333-444455556666")).To(Succeed())
		},
		want: "is attached to namespace 5C0A7E0B-1111-2222-3333-444455556666: a Pod still uses it; cordon and drain the node",
	}, {
		name: "an endpoint of nobody's on flannel's network",
		from: []string{StackFlannel, StackKubeProxy},
		add: func(t *testing.T, n *flannelNode) {
			_, err := n.sim.CreateEndpoint(ctx, hns.EndpointSpec{Name: "my-vm-nic", NetworkID: n.overlay.ID, IP: netip.MustParseAddr("10.244.1.50")})
			NewWithT(t).Expect(err).NotTo(HaveOccurred())
		},
		want: `HNS endpoint my-vm-nic`,
	}, {
		name: "kube-proxy's leftovers without --from kube-proxy",
		from: []string{StackFlannel},
		want: "is kube-proxy's, add --from kube-proxy",
	}, {
		name: "a load balancer reaching other networks too",
		from: []string{StackFlannel, StackKubeProxy},
		add: func(t *testing.T, n *flannelNode) {
			_, err := n.sim.CreateLoadBalancer(ctx, hns.LoadBalancer{FrontendVIPs: []string{"10.96.0.20"}, Endpoints: []string{n.podEP.ID, n.natEP.ID}})
			NewWithT(t).Expect(err).NotTo(HaveOccurred())
		},
		want: "balances to endpoints of other networks too: not recognised as kube-proxy's",
	}, {
		name: "another plugin's CNI configuration",
		from: []string{StackFlannel, StackKubeProxy},
		add: func(t *testing.T, n *flannelNode) {
			writeFile(t, filepath.Join(n.confDir, "05-calico.conflist"), `{"name":"Calico","plugins":[{"type":"calico"}]}`)
		},
		want: "05-calico.conflist is another plugin's (calico)",
	}, {
		name: "a CNI configuration mixing flannel's plugins and others",
		from: []string{StackFlannel, StackKubeProxy},
		add: func(t *testing.T, n *flannelNode) {
			writeFile(t, filepath.Join(n.confDir, "10-flannel.conf"), `{"name":"vxlan0","type":"flannel","delegate":{"type":"win-overlay"},"plugins":[{"type":"bandwidth"}]}`)
		},
		want: "has flannel's plugins and others (flannel,win-overlay,bandwidth): not recognised",
	}, {
		name: "a subnet file flanneld did not write",
		from: []string{StackFlannel, StackKubeProxy},
		add: func(t *testing.T, n *flannelNode) {
			writeFile(t, n.subnetFile, "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nPATH=C:\\Windows\n")
		},
		want: `has a line "PATH=C:\\Windows" that flanneld does not write`,
	}, {
		name: "a network with flannel's name but not its type",
		from: []string{StackFlannel, StackKubeProxy},
		add: func(t *testing.T, n *flannelNode) {
			_, err := n.sim.CreateNetwork(ctx, hns.ForeignNetworkSpec{Type: hns.NAT, Name: "cbr0", Subnet: netip.MustParsePrefix("172.31.0.0/16"), Gateway: netip.MustParseAddr("172.31.0.1")})
			NewWithT(t).Expect(err).NotTo(HaveOccurred())
		},
		want: `network "cbr0" (NAT) has a name flannel uses, but flannel makes Overlay (vxlan) or L2Bridge (host-gw) networks`,
	}, {
		name: "a source VIP file that is not a host-local result",
		from: []string{StackFlannel, StackKubeProxy},
		add: func(t *testing.T, n *flannelNode) {
			writeFile(t, n.vipFile, `{"ip4":{}}`)
		},
		want: "has no ip4.ip prefix: not recognised as kube-proxy's source VIP file",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			n := seedFlannelNode(t)
			if tc.add != nil {
				tc.add(t, n)
			}
			before := n.state(t)
			for _, dry := range []bool{true, false} {
				var out bytes.Buffer
				opts := n.opts(tc.from...)
				opts.DryRun, opts.Out = dry, &out
				lines, err := Takeover(ctx, n.sim, opts)
				g.Expect(errors.Is(err, ErrTakeoverRefused)).To(BeTrue(), "dry run %v: %v\n%s", dry, err, out.String())
				g.Expect(err.Error()).To(ContainSubstring(tc.want))
				g.Expect(out.String()).To(ContainSubstring("refusing: "))
				g.Expect(lines).To(BeEmpty())
				g.Expect(n.state(t)).To(Equal(before), "dry run %v: a refused takeover changes nothing", dry)
			}
		})
	}
}

// TestParseTakeoverStacks: --from takes flannel, kube-proxy or both; anything else is refused.
func TestParseTakeoverStacks(t *testing.T) {
	g := NewWithT(t)
	got, err := ParseTakeoverStacks("flannel,kube-proxy,flannel")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal([]string{StackFlannel, StackKubeProxy}))
	_, err = ParseTakeoverStacks("calico")
	g.Expect(err).To(MatchError(ContainSubstring(`--from "calico": want flannel or kube-proxy`)))
	_, err = Takeover(context.Background(), hns.NewSim(hns.SimOptions{}), TakeoverOptions{})
	g.Expect(err).To(MatchError(ContainSubstring("no stack to take over from")))
}
