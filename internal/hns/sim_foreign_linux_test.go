package hns

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
)

// TestSimForeignStateFile: another stack's network, its policies, remote and source-VIP endpoints and
// load balancers outlive the process in the state file, as HNS state outlives its clients.
func TestSimForeignStateFile(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "hns-sim.json")
	s := newSim(SimOptions{}, nil, file)
	n, err := s.CreateNetwork(ctx, ForeignNetworkSpec{Type: Overlay, Name: "vxlan0", AdapterName: "Ethernet", Subnet: testSubnet, Gateway: testGateway, HostRoute: true})
	g.Expect(err).NotTo(HaveOccurred())
	rs := RemoteSubnetPolicy{DestinationPrefix: netip.MustParsePrefix("10.244.2.0/24"), ProviderAddress: netip.MustParseAddr("192.168.101.12"), DRMAC: "0e:2a:0a:f4:02:00", IsolationID: 4096}
	g.Expect(s.AddRemoteSubnetPolicy(n.ID, rs)).To(Succeed())
	remote, err := s.CreateRemoteEndpoint(ctx, n.ID, netip.MustParseAddr("10.244.2.7"), net.HardwareAddr{0x0e, 0x2a, 0x0a, 0xf4, 0x02, 0x07})
	g.Expect(err).NotTo(HaveOccurred())
	lb, err := s.CreateLoadBalancer(ctx, LoadBalancer{FrontendVIPs: []string{"10.96.0.10"}, SourceVIP: "10.244.1.3", Endpoints: []string{remote.ID}})
	g.Expect(err).NotTo(HaveOccurred())

	st, err := readSimState(file)
	g.Expect(err).NotTo(HaveOccurred())
	again := newSim(SimOptions{}, nil, "")
	g.Expect(again.m.restore(st)).To(Succeed())
	nets, err := again.ListNetworks(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(nets).To(HaveLen(1))
	g.Expect(nets[0].Type).To(Equal(Overlay))
	g.Expect(nets[0].RemoteSubnets).To(Equal([]RemoteSubnetPolicy{rs}))
	g.Expect(nets[0].HostRoute).To(BeTrue())
	eps, err := again.ListEndpoints(ctx, n.ID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(eps).To(HaveLen(1))
	g.Expect(eps[0].Remote).To(BeTrue())
	lbs, err := again.ListLoadBalancers(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(lbs).To(Equal([]LoadBalancer{*lb}))
	// The preflight's reader sees the network as HNS would report it.
	b, err := os.ReadFile(file)
	g.Expect(err).NotTo(HaveOccurred())
	sn, err := ReadSimNetworks(b)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sn).To(HaveLen(1))
	g.Expect(sn[0].Name).To(Equal("vxlan0"))
}

// TestLinuxSimForeignNetwork: on a simulated node, flannel's Overlay network is HNS state only: it holds
// the adapter (winnet's network is refused and the adapter keeps its address), its attached Pod endpoint
// survives a restart of the simulator (it has no veth pair to lose), and once it is deleted winnet's
// network takes the adapter.
func TestLinuxSimForeignNetwork(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "hns-sim.json")
	s, nodePath := newSimOnNode(t, false, LinuxSimOptions{StateFile: file})
	before := inspectLink(t, nodePath, testAdapter)
	n, err := s.CreateNetwork(ctx, ForeignNetworkSpec{Type: Overlay, Name: "vxlan0", AdapterName: testAdapter, Subnet: testSubnet, Gateway: testGateway, HostRoute: true})
	g.Expect(err).NotTo(HaveOccurred())
	pod, err := s.CreateEndpoint(ctx, EndpointSpec{Name: "3f1c0a9e77d2_vxlan0", NetworkID: n.ID, IP: netip.MustParseAddr("10.244.1.5")})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.AttachEndpoint(ctx, pod.ID, "5C0A7E0B-1111-2222-3333-444455556666")).To(Succeed())
	_, err = s.CreateTransparentNetwork(ctx, linuxNetworkSpec())
	g.Expect(errors.Is(err, ErrAdapterInUse)).To(BeTrue(), "%v", err)
	g.Expect(inspectLink(t, nodePath, testAdapter)).To(Equal(before))
	g.Expect(s.Close()).To(Succeed())

	again := simsOnStateFile(t, nodePath, file)()
	eps, err := again.ListEndpoints(ctx, n.ID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(eps).To(HaveLen(1))
	g.Expect(eps[0].NamespaceID).To(Equal("5C0A7E0B-1111-2222-3333-444455556666"))
	g.Expect(again.DeleteNetwork(ctx, n.ID)).To(Succeed())
	w, err := again.CreateTransparentNetwork(ctx, linuxNetworkSpec())
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() []string { return inspectLink(t, nodePath, w.ManagementVNIC).Addrs }).Should(Equal([]string{testHostIP}))
}
