package pipeline

import (
	"net"
	"net/netip"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

func testNode() Node {
	mac, _ := net.ParseMAC("02:42:0a:f4:01:01")
	return Node{
		NodeIP:        netip.MustParseAddr("192.168.10.11"),
		PodCIDR:       netip.MustParsePrefix("10.244.1.0/24"),
		GatewayIP:     netip.MustParseAddr("10.244.1.1"),
		GatewayMAC:    mac,
		GatewayOFPort: 2,
		UplinkOFPort:  3,
		TunnelOFPort:  1,
		TunnelUDPPort: 4789,
		VNI:           1,
		VTEPMAC:       mustMAC("0e:5e:00:00:00:0b"),
		SNAT:          true,
		NoSNAT:        []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("10.96.0.0/12")},
	}
}

func featureFlows(n Node, feature uint8) []string {
	var out []string
	for _, f := range n.Features()[feature] {
		out = append(out, f.String())
	}
	return out
}

// TestSNATFlows pins the SNAT flows to the seed design's: reg0[17] set in L3Forwarding, commit with
// nat(src=NodeIP) and ct_mark 0x40 in zone 65520, out on the gateway, and exclusions skip it.
func TestSNATFlows(t *testing.T) {
	g := NewWithT(t)
	got := featureFlows(testNode(), CategorySNAT)
	g.Expect(got).To(ConsistOf(
		"table=70, priority=10,ip,reg0=0x2/0xffff actions=set_field:0x20000/0x20000->reg0,set_field:02:42:0a:f4:01:01->eth_dst,goto_table:80",
		"table=105, priority=200,ct_state=+new+trk,ip,reg0=0x20000/0x20000 actions=ct(commit,table=110,zone=65520,nat(src=192.168.10.11),exec(set_field:0x40->ct_mark,move:NXM_NX_REG8[]->NXM_NX_CT_LABEL[64..95],move:NXM_NX_REG9[]->NXM_NX_CT_LABEL[96..127],move:NXM_NX_REG10[]->NXM_NX_CT_LABEL[0..31],move:NXM_NX_REG11[]->NXM_NX_CT_LABEL[32..63]))",
		"table=110, priority=200,ip,reg0=0x20000/0x20000 actions=output:2",
		"table=70, priority=180,ip,reg0=0x2/0xffff,nw_dst=10.244.0.0/16 actions=set_field:02:42:0a:f4:01:01->eth_dst,goto_table:80",
		"table=70, priority=180,ip,reg0=0x2/0xffff,nw_dst=10.96.0.0/12 actions=set_field:02:42:0a:f4:01:01->eth_dst,goto_table:80",
	))
}

func TestSNATOffHasNoSNATFlows(t *testing.T) {
	g := NewWithT(t)
	n := testNode()
	n.SNAT = false
	g.Expect(n.Features()).To(HaveKeyWithValue(CategorySNAT, BeEmpty()), "an empty SNAT category makes Sync remove the flows")
	for _, f := range n.BaseFlows() {
		g.Expect(f.String()).NotTo(ContainSubstring("nat(src="))
	}
}

// TestUnNATReplies pins the flows that bring replies to SNATed connections back: TCP, UDP and ICMP
// from the uplink go through conntrack with nat, and a reply with the SNAT mark gets the global
// virtual MAC.
func TestUnNATReplies(t *testing.T) {
	g := NewWithT(t)
	n := testNode()
	g.Expect(featureFlows(n, CategoryClassifier)).To(ContainElements(
		"priority=200,tcp,in_port=3 actions=set_field:0x3/0xffff->reg0,goto_table:30",
		"priority=200,udp,in_port=3 actions=set_field:0x3/0xffff->reg0,goto_table:30",
		"priority=200,icmp,in_port=3 actions=set_field:0x3/0xffff->reg0,goto_table:30"))
	g.Expect(featureFlows(n, CategoryConntrack)).To(ContainElements(
		"table=30, priority=200,tcp actions=ct(table=31,zone=65520,nat)",
		"table=30, priority=200,udp actions=ct(table=31,zone=65520,nat)",
		"table=30, priority=200,icmp actions=ct(table=31,zone=65520,nat)",
		"table=31, priority=210,ct_state=-new+trk,ct_mark=0x40,ip,reg0=0x3/0xffff actions=set_field:aa:bb:cc:dd:ee:ff->eth_dst,goto_table:40",
	))
}

// TestHostTrafficWindowsCannotTrack pins the classifier flows that keep host traffic out of
// conntrack: ICMP errors for the node go to the host, and IP protocols other than TCP, UDP and ICMP
// reach the host through the uplink's catch-all, not through ct().
func TestHostTrafficWindowsCannotTrack(t *testing.T) {
	g := NewWithT(t)
	got := featureFlows(testNode(), CategoryClassifier)
	g.Expect(got).To(ContainElements(
		"priority=210,icmp,in_port=3,nw_dst=192.168.10.11,icmp_type=3 actions=LOCAL",
		"priority=210,icmp,in_port=3,nw_dst=192.168.10.11,icmp_type=11 actions=LOCAL",
		"priority=190,in_port=3 actions=LOCAL",
	))
	g.Expect(got).NotTo(ContainElement(ContainSubstring(",ip,in_port=3 ")), "no flow sends all IP from the uplink to conntrack")
}

func TestNoEncapHasNoTunnelClassifier(t *testing.T) {
	g := NewWithT(t)
	n := testNode()
	g.Expect(strings.Join(featureFlows(n, CategoryClassifier), "\n")).To(ContainSubstring("in_port=1 "))
	n.TunnelOFPort = 0
	g.Expect(strings.Join(featureFlows(n, CategoryClassifier), "\n")).NotTo(ContainSubstring("in_port=1 "))
}

// TestTunnelAdmissionFlows pins the tunnel admission flows: the classifier sends the tunnel port to
// TunnelAdmission, whose miss drops; a route admits its peer's address with its VNI and inner sources
// it owns, drops the rest of the peer's traffic by reason, and learns where its inner sources come
// from otherwise; admitted traffic is classified as before.
func TestTunnelAdmissionFlows(t *testing.T) {
	g := NewWithT(t)
	n := testNode()
	g.Expect(featureFlows(n, CategoryClassifier)).To(ContainElements(
		"priority=200,in_port=1 actions=goto_table:1",
		"table=1, priority=0 actions=drop",
		"table=2, priority=220,ip,nw_dst=10.244.1.1 actions=set_field:aa:bb:cc:dd:ee:ff->eth_dst,set_field:0/0xffff->reg0,goto_table:30",
		"table=2, priority=210,ip,dl_dst=0e:5e:00:00:00:0b actions=set_field:aa:bb:cc:dd:ee:ff->eth_dst,dec_ttl,set_field:0/0xffff->reg0,goto_table:30",
		"table=2, priority=200,ip actions=dec_ttl,set_field:0/0xffff->reg0,goto_table:30",
		"table=2, priority=0 actions=drop",
	))
	g.Expect(featureFlows(n, CategoryClassifier)).NotTo(ContainElement(ContainSubstring("table=1, priority=220")), "admission is on")
	remote := RemoteRoute{
		CIDR: netip.MustParsePrefix("10.244.2.0/24"), Tunnel: true, NodeIP: netip.MustParseAddr("192.168.10.12"),
		VNI: 4096, DstMAC: GlobalVirtualMAC, GatewayIP: netip.MustParseAddr("10.244.2.1"), Peer: 0x2,
	}
	var route []string
	for _, f := range n.RouteFlows(remote) {
		if f.Table == TunnelAdmissionTable {
			route = append(route, f.String())
		}
	}
	g.Expect(route).To(ConsistOf(
		"table=1, priority=200,ip,tun_id=0x1000,tun_src=192.168.10.12,nw_src=10.244.2.0/24 actions=goto_table:2",
		"table=1, priority=200,ip,tun_id=0x1000,tun_src=192.168.10.12,nw_src=192.168.10.12 actions=goto_table:2",
		"table=1, priority=195,tun_id=0x1000,tun_src=192.168.10.12 actions=drop",
		"table=1, priority=190,tun_src=192.168.10.12 actions=drop",
		"table=1, priority=180,ip,nw_src=10.244.2.0/24 actions=learn(table=3,hard_timeout=60,priority=200,delete_learned,cookie=0xa0000000002,NXM_NX_TUN_IPV4_SRC[])",
		"table=1, priority=180,ip,nw_src=192.168.10.12 actions=learn(table=3,hard_timeout=60,priority=200,delete_learned,cookie=0xa0000000002,NXM_NX_TUN_IPV4_SRC[])",
	))
	g.Expect(featureFlows(n, CategoryClassifier)).To(ContainElement("table=10, priority=210,udp,reg0=0x2/0xffff,nw_dst=192.168.10.11,tp_dst=4789 actions=drop"),
		"the node's Pods may not send to its tunnel port")
	g.Expect(n.RouteFlows(remote)).To(ContainElement(HaveField("String()", "table=10, priority=210,udp,reg0=0x2/0xffff,nw_dst=192.168.10.12,tp_dst=4789 actions=drop")),
		"nor to a peer's")
	n.AdmitAnyTunnelSource = true
	g.Expect(featureFlows(n, CategoryClassifier)).To(ContainElement("table=1, priority=220,ip actions=goto_table:2"))
	n.TunnelOFPort = 0
	g.Expect(n.RouteFlows(remote)).NotTo(ContainElement(HaveField("Table", TunnelAdmissionTable)), "no tunnel, nothing to admit")
}
