package nodenetwork

import (
	"net"
	"net/netip"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/ovs/ovsdb"
)

func baseSpec() networkv1alpha1.WindowsNodeNetworkSpec {
	return networkv1alpha1.WindowsNodeNetworkSpec{
		PodCIDRs:      []networkv1alpha1.CIDR{"10.244.1.0/24"},
		NodeIP:        "192.168.10.11",
		HNSNetwork:    networkv1alpha1.HNSNetworkSpec{Name: "winnet", Type: networkv1alpha1.HNSNetworkTypeTransparent},
		Bridge:        networkv1alpha1.BridgeSpec{Name: "br-int", DatapathType: networkv1alpha1.DatapathTypeSystem},
		Gateway:       networkv1alpha1.GatewaySpec{Name: "winnet-gw0"},
		Encapsulation: networkv1alpha1.EncapsulationSpec{Mode: networkv1alpha1.EncapsulationModeEncap, TunnelType: networkv1alpha1.TunnelTypeVXLAN, VNI: 1},
		SNAT:          networkv1alpha1.SNATSpec{Enabled: ptr.To(true)},
		ClusterCIDRs:  []networkv1alpha1.CIDR{"10.244.0.0/16"},
	}
}

func TestDesiredState(t *testing.T) {
	mac, _ := net.ParseMAC("00:15:5d:01:02:03")
	f := facts{uplinkName: "Ethernet 2", uplinkMAC: mac, uplinkMTU: 1500, nodePodCIDRs: []string{"10.244.1.0/24"}}
	cases := []struct {
		name    string
		mutate  func(*networkv1alpha1.WindowsNodeNetworkSpec)
		facts   func(*facts)
		check   func(g *WithT, d desired)
		wantErr string
	}{
		{name: "defaults", check: func(g *WithT, d desired) {
			g.Expect(d.gateway).To(Equal(netip.MustParsePrefix("10.244.1.1/24")))
			g.Expect(d.mtu).To(Equal(1450))
			g.Expect(d.hnsNetwork.AdapterName).To(Equal("Ethernet 2"))
			g.Expect(d.hnsNetwork.Subnet).To(Equal(netip.MustParsePrefix("10.244.1.0/24")))
			g.Expect(d.bridge.HWAddr).To(Equal(mac))
			g.Expect(d.bridge.ExternalIDs).To(HaveKeyWithValue(UplinkKey, "Ethernet 2"))
			g.Expect(d.uplink).To(Equal(ovsdb.PortSpec{Name: "Ethernet 2", Type: ovsdb.PortTypeSystem, OFPortRequest: UplinkOFPort}))
			g.Expect(d.tunnel.Type).To(Equal(ovsdb.PortTypeVXLAN))
			g.Expect(d.tunnel.Options).To(Equal(map[string]string{"remote_ip": "flow", "key": "flow", "local_ip": "192.168.10.11", "dst_port": "4789"}))
			g.Expect(d.snat).To(BeTrue())
			g.Expect(d.noSNAT).To(ConsistOf(netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("192.168.10.11/32")))
		}},
		{name: "geneve on a custom port with a jumbo uplink", mutate: func(s *networkv1alpha1.WindowsNodeNetworkSpec) {
			s.Encapsulation.TunnelType, s.Encapsulation.Port = networkv1alpha1.TunnelTypeGeneve, 7081
		}, facts: func(f *facts) { f.uplinkMTU = 9000 }, check: func(g *WithT, d desired) {
			g.Expect(d.tunnel.Type).To(Equal(ovsdb.PortTypeGeneve))
			g.Expect(d.tunnel.Options).To(HaveKeyWithValue("dst_port", "7081"))
			g.Expect(d.mtu).To(Equal(9000 - 58))
		}},
		{name: "NoEncap has no tunnel and no overhead", mutate: func(s *networkv1alpha1.WindowsNodeNetworkSpec) {
			s.Encapsulation.Mode = networkv1alpha1.EncapsulationModeNoEncap
		}, check: func(g *WithT, d desired) {
			g.Expect(d.tunnel).To(BeNil())
			g.Expect(d.mtu).To(Equal(1500))
		}},
		{name: "explicit MTU and gateway, SNAT off", mutate: func(s *networkv1alpha1.WindowsNodeNetworkSpec) {
			s.Encapsulation.MTU, s.Gateway.IP, s.SNAT.Enabled = 1400, "10.244.1.254", ptr.To(false)
		}, check: func(g *WithT, d desired) {
			g.Expect(d.mtu).To(Equal(1400))
			g.Expect(d.gateway).To(Equal(netip.MustParsePrefix("10.244.1.254/24")))
			g.Expect(d.snat).To(BeFalse())
		}},
		{name: "dual stack uses the IPv4 CIDR", mutate: func(s *networkv1alpha1.WindowsNodeNetworkSpec) {
			s.PodCIDRs = []networkv1alpha1.CIDR{"fd00:10:244:1::/64", "10.244.1.0/24"}
		}, check: func(g *WithT, d desired) {
			g.Expect(d.podCIDR).To(Equal(netip.MustParsePrefix("10.244.1.0/24")))
		}},
		{name: "Pod CIDR not the Node's", mutate: func(s *networkv1alpha1.WindowsNodeNetworkSpec) {
			s.PodCIDRs = []networkv1alpha1.CIDR{"10.244.9.0/24"}
		}, wantErr: "does not match the Node's Pod CIDRs [10.244.1.0/24]"},
		{name: "unknown Node skips the check", mutate: func(s *networkv1alpha1.WindowsNodeNetworkSpec) {
			s.PodCIDRs = []networkv1alpha1.CIDR{"10.244.9.0/24"}
		}, facts: func(f *facts) { f.nodePodCIDRs = nil }, check: func(g *WithT, d desired) {
			g.Expect(d.gateway.Addr()).To(Equal(netip.MustParseAddr("10.244.9.1")))
		}},
		{name: "no node IP", mutate: func(s *networkv1alpha1.WindowsNodeNetworkSpec) { s.NodeIP = "" }, wantErr: "spec.nodeIP is empty"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			spec, ff := baseSpec(), f
			if tc.mutate != nil {
				tc.mutate(&spec)
			}
			if tc.facts != nil {
				tc.facts(&ff)
			}
			d, err := desiredState(spec, ff)
			if tc.wantErr != "" {
				var inv *invalidSpecError
				g.Expect(err).To(BeAssignableToTypeOf(inv))
				g.Expect(err).To(MatchError(ContainSubstring(tc.wantErr)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			tc.check(g, d)
		})
	}
}
