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
	for _, f := range n.EgressFlows(egresses) {
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
	))
	g.Expect(flowStrings(testNode(), testEgresses())).To(HaveLen(len(got)+4), "4 flows per Egress, 1 per selected Pod")
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
