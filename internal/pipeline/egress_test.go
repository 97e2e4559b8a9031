package pipeline

import (
	"net/netip"
	"testing"

	. "github.com/onsi/gomega"
)

func testEgresses() []Egress {
	return []Egress{
		{ID: 1, IP: netip.MustParseAddr("192.168.10.200"), Pods: []netip.Addr{netip.MustParseAddr("10.244.1.5"), netip.MustParseAddr("10.244.1.7")}},
		{ID: 2, IP: netip.MustParseAddr("192.168.10.201")},
	}
}

func flowStrings(n Node, egresses []Egress) []string {
	var out []string
	for _, f := range n.EgressFlows(egresses, nil) {
		out = append(out, f.String())
	}
	return out
}

// TestEgressFlows pins the flows of an Egress: its Pods marked in L3Forwarding below the NoSNAT
// skips, the commit with nat(src=egress IP) and the SNAT mark above the node's SNAT, out on the
// gateway, and the drops of other traffic from the uplink to the egress IP.
func TestEgressFlows(t *testing.T) {
	g := NewWithT(t)
	got := flowStrings(testNode(), testEgresses()[:1])
	g.Expect(got).To(ConsistOf(
		"table=105, priority=210,ct_state=+new+trk,ip,reg12=0x1 actions=ct(commit,table=110,zone=65520,nat(src=192.168.10.200),exec(set_field:0x40->ct_mark,move:NXM_NX_REG8[]->NXM_NX_CT_LABEL[64..95],move:NXM_NX_REG9[]->NXM_NX_CT_LABEL[96..127],move:NXM_NX_REG10[]->NXM_NX_CT_LABEL[0..31],move:NXM_NX_REG11[]->NXM_NX_CT_LABEL[32..63]))",
		"table=110, priority=210,ip,reg12=0x1 actions=output:2",
		"table=31, priority=191,ip,reg0=0x3/0xffff,nw_dst=192.168.10.200 actions=drop",
		"priority=191,ip,in_port=3,nw_dst=192.168.10.200 actions=drop",
		"table=70, priority=150,ip,reg0=0x2/0xffff,nw_src=10.244.1.5 actions=set_field:0x1->reg12,set_field:02:42:0a:f4:01:01->eth_dst,goto_table:80",
		"table=70, priority=150,ip,reg0=0x2/0xffff,nw_src=10.244.1.7 actions=set_field:0x1->reg12,set_field:02:42:0a:f4:01:01->eth_dst,goto_table:80",
		// The later packets of its connections, SNATed by conntrack already, leave the same way
		// (the output flow counts every byte), above the node's SNAT.
		"table=70, priority=150,ct_state=-new-rpl+trk,ct_mark=0x40,ip,reg0=0x2/0xffff,nw_src=192.168.10.200 actions=set_field:0x1->reg12,set_field:02:42:0a:f4:01:01->eth_dst,goto_table:80",
	))
	g.Expect(priorityEgressSNAT).To(BeNumerically(">", prioritySNAT))
	g.Expect(flowStrings(testNode(), testEgresses())).To(HaveLen(len(got)+5), "5 flows per Egress, 1 per selected Pod")
}

// TestEgressFlowsWithSNATOff: without the node's SNAT, the Egress's flows skip the cluster's
// destinations themselves.
func TestEgressFlowsWithSNATOff(t *testing.T) {
	g := NewWithT(t)
	n := testNode()
	n.SNAT = false
	g.Expect(flowStrings(n, testEgresses())).To(ContainElements(
		"table=70, priority=180,ip,reg0=0x2/0xffff,nw_dst=10.244.0.0/16 actions=set_field:02:42:0a:f4:01:01->eth_dst,goto_table:80",
		"table=70, priority=180,ip,reg0=0x2/0xffff,nw_dst=10.96.0.0/12 actions=set_field:02:42:0a:f4:01:01->eth_dst,goto_table:80",
	))
	g.Expect(flowStrings(n, nil)).To(BeEmpty())
}

// TestEgressOwnsItsCategoryAndRegister: no other feature syncs the Egresses' category (a Sync of a
// category removes every flow of it that is not in its desired set) or writes their register.
func TestEgressOwnsItsCategoryAndRegister(t *testing.T) {
	g := NewWithT(t)
	others := []uint8{CategoryClassifier, CategoryConntrack, CategoryForwarding, CategorySNAT, CategoryPod, CategoryRoute, CategoryService,
		CategoryPolicy, CategoryAffinityLearned, CategoryTunnelSeen, CategoryTrace}
	g.Expect(others).NotTo(ContainElement(CategoryEgress))
	for _, f := range []RegField{PktSourceField, TargetOFPortField, AffinityEndpointIPField, AffinityEndpointField, AffinityTimeoutField, EgressPeerClassField,
		IngressPeerClassField, EgressRuleField, IngressRuleField, SrcIncarnationField, DstIncarnationField, traceTagField, traceReportedDNAT} {
		g.Expect(f.Reg).NotTo(Equal(EgressField.Reg), "register %d", f.Reg)
	}
}

// testHolder is the route to the node holding an Egress whose Pods run here, and to the node of a
// remote selected Pod when this node holds the Egress.
func testHolder() RemoteRoute {
	return RemoteRoute{CIDR: netip.MustParsePrefix("10.244.2.0/24"), Tunnel: true, NodeIP: netip.MustParseAddr("192.168.10.12"), VNI: 1, DstMAC: GlobalVirtualMAC}
}

func testRelays() []EgressRelay {
	return []EgressRelay{{Holder: testHolder(), Pods: []netip.Addr{netip.MustParseAddr("10.244.1.5")}}}
}

func testRemoteEgress() Egress {
	return Egress{ID: 1, IP: netip.MustParseAddr("192.168.10.200"), RemotePods: []RemotePod{{IP: netip.MustParseAddr("10.244.2.9"), Node: testHolder()}}}
}

// TestEgressRelayFlows pins what a node sends to an Egress's holder: a selected Pod's new
// connections to outside the cluster (+new) and the later packets of the connections committed with
// EgressRelayCTMark go through the tunnel to the holder, below the NoSNAT skips; the holder's
// replies are marked at admission and let through only as replies of such connections.
func TestEgressRelayFlows(t *testing.T) {
	g := NewWithT(t)
	var got []string
	for _, f := range testNode().EgressFlows(nil, testRelays()) {
		got = append(got, f.String())
	}
	tunnel := "dec_ttl,set_field:0e:5e:00:00:00:0b->eth_src,set_field:aa:bb:cc:dd:ee:ff->eth_dst,set_field:192.168.10.12->tun_dst,set_field:0x1->tun_id,set_field:0x1->reg1,set_field:0x10000/0x10000->reg0,"
	g.Expect(got).To(ConsistOf(
		"table=70, priority=150,ct_state=+new+trk,ip,reg0=0x2/0xffff,nw_src=10.244.1.5 actions="+tunnel+"set_field:0x100000/0x100000->reg0,goto_table:105",
		"table=70, priority=150,ct_state=-new+trk,ct_mark=0x800/0x800,ip,reg0=0x2/0xffff,nw_src=10.244.1.5 actions="+tunnel+"goto_table:105",
		"table=1, priority=197,ip,tun_id=0x1,tun_src=192.168.10.12,nw_dst=10.244.1.5 actions=set_field:0x200000/0x200000->reg0,goto_table:2",
		"table=105, priority=210,ct_state=+new+trk,ip,reg0=0x100000/0x100000 actions=ct(commit,table=110,zone=65520,exec(set_field:0x800/0x800->ct_mark,move:NXM_NX_REG8[]->NXM_NX_CT_LABEL[64..95],move:NXM_NX_REG9[]->NXM_NX_CT_LABEL[96..127],move:NXM_NX_REG10[]->NXM_NX_CT_LABEL[0..31],move:NXM_NX_REG11[]->NXM_NX_CT_LABEL[32..63]))",
		"table=31, priority=222,ct_state=-new+est+rpl+trk,ct_mark=0x800/0x800,ip,reg0=0x200000/0x200000 actions=set_field:0/0x200000->reg0,resubmit(,31)",
		"table=31, priority=221,ip,reg0=0x200000/0x200000 actions=drop",
	))
	// The admission of replies is above the drop of a peer's foreign inner sources, below its own.
	g.Expect(priorityTunnelEgressReply).To(BeNumerically(">", priorityTunnelNotOwned))
	g.Expect(priorityTunnelEgressReply).To(BeNumerically("<", priorityTunnelAdmit))
	// Hybrid mode: the route to the holder is unencapsulated, the relay still tunnels (the holder's
	// replies are admitted from its tunnel endpoint only).
	routed := testRelays()
	routed[0].Holder.Tunnel, routed[0].Holder.NextHopMAC, routed[0].Holder.UplinkMAC = false, mustMAC("02:00:00:00:00:12"), mustMAC("02:00:00:00:00:11")
	var hybrid []string
	for _, f := range testNode().EgressFlows(nil, routed) {
		hybrid = append(hybrid, f.String())
	}
	g.Expect(hybrid).To(ConsistOf(got))
	// Without a tunnel (NoEncap) nothing is relayed.
	n := testNode()
	n.TunnelOFPort = 0
	g.Expect(n.EgressFlows(nil, testRelays())).To(BeEmpty())
}

// TestEgressHolderRemotePodFlows pins what the holder adds for a selected Pod of another node: its
// relayed packets (from the tunnel, its source address) are SNATed as a local Pod's, the cluster's
// destinations from the tunnel are skipped, its later packets (SNATed by conntrack already) go out
// as well, and the un-SNATed replies from the uplink go back
// through the tunnel to its node above the route.
func TestEgressHolderRemotePodFlows(t *testing.T) {
	g := NewWithT(t)
	got := flowStrings(testNode(), []Egress{testRemoteEgress()})
	g.Expect(got).To(ContainElements(
		"table=70, priority=150,ip,reg0=0/0xffff,nw_src=10.244.2.9 actions=set_field:0x1->reg12,set_field:02:42:0a:f4:01:01->eth_dst,goto_table:80",
		"table=70, priority=210,ct_state=-new+est+rpl+trk,ct_mark=0x40,ip,reg0=0x3/0xffff,nw_dst=10.244.2.9 actions=dec_ttl,set_field:0e:5e:00:00:00:0b->eth_src,set_field:aa:bb:cc:dd:ee:ff->eth_dst,set_field:192.168.10.12->tun_dst,set_field:0x1->tun_id,set_field:0x1->reg1,set_field:0x10000/0x10000->reg0,goto_table:105",
		"table=70, priority=150,ct_state=-new-rpl+trk,ct_mark=0x40,ip,reg0=0/0xffff,nw_src=192.168.10.200 actions=set_field:0x1->reg12,set_field:02:42:0a:f4:01:01->eth_dst,goto_table:80",
		"table=70, priority=180,ip,reg0=0/0xffff,nw_dst=10.244.0.0/16 actions=goto_table:80",
		"table=70, priority=180,ip,reg0=0/0xffff,nw_dst=10.96.0.0/12 actions=goto_table:80",
	))
	g.Expect(got).To(HaveLen(6 + 2 + len(testNode().NoSNAT)))
	g.Expect(priorityEgressReturn).To(BeNumerically(">", priorityNormal), "above the route to the Pod's node")
}

// TestEgressFlowCost counts the flows docs/egress.md states: on the holder 5 per Egress (6 with
// remote Pods), 1 per selected local Pod, 2 per selected remote Pod and len(NoSNAT) once with
// remote Pods; on a node
// relaying to a holder 3 per selected local Pod and 3 once.
func TestEgressFlowCost(t *testing.T) {
	g := NewWithT(t)
	n := testNode()
	ip := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	remote := func(s string) RemotePod { return RemotePod{IP: ip(s), Node: testHolder()} }
	held := []Egress{
		{ID: 1, IP: ip("192.168.10.200"), Pods: []netip.Addr{ip("10.244.1.5"), ip("10.244.1.6")}, RemotePods: []RemotePod{remote("10.244.2.5"), remote("10.244.2.6"), remote("10.244.2.7")}},
		{ID: 2, IP: ip("192.168.10.201"), RemotePods: []RemotePod{remote("10.244.2.8")}},
	}
	g.Expect(n.EgressFlows(held, nil)).To(HaveLen(2*6 + 2*1 + 4*2 + len(n.NoSNAT)))
	relays := []EgressRelay{
		{Holder: testHolder(), Pods: []netip.Addr{ip("10.244.1.7"), ip("10.244.1.8"), ip("10.244.1.8")}},
		{Holder: testHolder(), Pods: []netip.Addr{ip("10.244.1.9")}},
	}
	g.Expect(n.EgressFlows(nil, relays)).To(HaveLen(3*3 + 3))
	t.Logf("holder: %d flows for 2 Egresses, 2 local and 4 remote Pods; relaying node: %d flows for 3 Pods",
		len(n.EgressFlows(held, nil)), len(n.EgressFlows(nil, relays)))
}
