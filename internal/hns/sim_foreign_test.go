package hns

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"

	. "github.com/onsi/gomega"
)

// TestSimForeignNetworks: flannel's Overlay network holds its adapter, so winnet's Transparent network
// on it fails as HNS fails (0x57); its policies, remote endpoints and kube-proxy's load balancers are
// listed; deleting the network deletes its endpoints (not the load balancers, which are HNS objects of
// their own); once it is gone winnet's network is created on the adapter.
func TestSimForeignNetworks(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	s := NewSim(SimOptions{})
	inv, ok := AsInventory(s)
	g.Expect(ok).To(BeTrue())

	overlay, err := s.CreateNetwork(ctx, ForeignNetworkSpec{Type: Overlay, Name: "vxlan0", AdapterName: "Ethernet", Subnet: testSubnet, Gateway: testGateway, HostRoute: true})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(overlay.ManagementVNIC).To(Equal("vEthernet (Ethernet)"))
	_, err = s.CreateNetwork(ctx, ForeignNetworkSpec{Type: L2Bridge, Name: "cbr0", AdapterName: "Ethernet", Subnet: testSubnet, Gateway: testGateway})
	g.Expect(errors.Is(err, ErrAdapterInUse)).To(BeTrue(), "%v", err)
	_, err = s.CreateTransparentNetwork(ctx, NetworkSpec{Name: "winnet", AdapterName: "Ethernet", Subnet: testSubnet, Gateway: testGateway})
	g.Expect(errors.Is(err, ErrAdapterInUse)).To(BeTrue(), "%v", err)
	g.Expect(err.Error()).To(ContainSubstring(`network "vxlan0"`))

	rs := RemoteSubnetPolicy{DestinationPrefix: netip.MustParsePrefix("10.244.2.0/24"), ProviderAddress: netip.MustParseAddr("192.168.101.12"), DRMAC: "0e:2a:0a:f4:02:00", IsolationID: 4096}
	g.Expect(s.AddRemoteSubnetPolicy(overlay.ID, rs)).To(Succeed())
	rs.ProviderAddress = netip.MustParseAddr("192.168.101.13") // flannel replaces the policy of a prefix
	g.Expect(s.AddRemoteSubnetPolicy(overlay.ID, rs)).To(Succeed())
	remote, err := s.CreateRemoteEndpoint(ctx, overlay.ID, netip.MustParseAddr("10.244.2.7"), net.HardwareAddr{0x0e, 0x2a, 0x0a, 0xf4, 0x02, 0x07})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(remote.Remote).To(BeTrue())
	vip, err := s.CreateSourceVIPEndpoint(ctx, overlay.ID, netip.MustParseAddr("10.244.1.3"), net.HardwareAddr{0x00, 0x15, 0x5d, 0x01, 0x02, 0x03})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(vip.Name).To(BeEmpty())
	lb, err := s.CreateLoadBalancer(ctx, LoadBalancer{FrontendVIPs: []string{"10.96.0.10"}, SourceVIP: "10.244.1.3", Endpoints: []string{remote.ID, vip.ID}})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = s.CreateLoadBalancer(ctx, LoadBalancer{Endpoints: []string{"3B1A0C2E-0000-0000-0000-000000000000"}})
	g.Expect(errors.Is(err, ErrNotFound)).To(BeTrue())

	nets, err := inv.ListNetworks(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(nets).To(HaveLen(1))
	g.Expect(nets[0].Type).To(Equal(Overlay))
	g.Expect(nets[0].HostRoute).To(BeTrue())
	g.Expect(nets[0].RemoteSubnets).To(Equal([]RemoteSubnetPolicy{rs}))
	lbs, err := inv.ListLoadBalancers(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(lbs).To(Equal([]LoadBalancer{*lb}))

	g.Expect(inv.DeleteNetwork(ctx, overlay.ID)).To(Succeed())
	eps, err := inv.ListEndpoints(ctx, overlay.ID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(eps).To(BeEmpty())
	g.Expect(inv.DeleteLoadBalancer(ctx, lb.ID)).To(Succeed())
	g.Expect(inv.DeleteLoadBalancer(ctx, lb.ID)).To(Succeed(), "deleting an absent load balancer is a no-op")
	lbs, err = inv.ListLoadBalancers(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(lbs).To(BeEmpty())
	_, err = s.CreateTransparentNetwork(ctx, NetworkSpec{Name: "winnet", AdapterName: "Ethernet", Subnet: testSubnet, Gateway: testGateway})
	g.Expect(err).NotTo(HaveOccurred())
}
