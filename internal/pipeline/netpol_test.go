package pipeline

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/internal/ovs/openflow"
)

// npPod1 and npPod2 are pod1 and pod2 of the OVS tests (which build only on Linux).
var (
	npPod1 = Pod{OFPort: 10, MAC: mustMAC("02:42:0a:f4:01:05"), IP: netip.MustParseAddr("10.244.1.5")}
	npPod2 = Pod{OFPort: 11, MAC: mustMAC("02:42:0a:f4:01:06"), IP: netip.MustParseAddr("10.244.1.6")}
)

func TestPortRange(t *testing.T) {
	for _, tc := range []struct {
		start, end uint16
		want       []PortBlock
	}{
		{80, 0, []PortBlock{{80, 0xffff}}},
		{80, 80, []PortBlock{{80, 0xffff}}},
		{80, 85, []PortBlock{{0x50, 0xfffc}, {0x54, 0xfffe}}},
		{32768, 65535, []PortBlock{{0x8000, 0x8000}}},
		{1, 3, []PortBlock{{1, 0xffff}, {2, 0xfffe}}},
		{65535, 65535, []PortBlock{{0xffff, 0xffff}}},
	} {
		g := NewWithT(t)
		g.Expect(PortRange(tc.start, tc.end)).To(Equal(tc.want), "%d-%d", tc.start, tc.end)
	}
	// Every port of every range is covered exactly once, and nothing outside it.
	g := NewWithT(t)
	for _, r := range [][2]uint16{{1, 65535}, {1000, 1999}, {7, 9}, {8080, 8090}} {
		count := map[uint16]int{}
		for _, b := range PortRange(r[0], r[1]) {
			for p := 0; p <= 0xffff; p++ {
				if uint16(p)&b.Mask == b.Value {
					count[uint16(p)]++
				}
			}
		}
		for p := 0; p <= 0xffff; p++ {
			want := 0
			if uint16(p) >= r[0] && uint16(p) <= r[1] {
				want = 1
			}
			g.Expect(count[uint16(p)]).To(Equal(want), "port %d in %d-%d", p, r[0], r[1])
		}
	}
}

// policyStrs renders flows without their cookies (peer flows carry their peer's object).
func policyStrs(flows []openflow.Flow) []string {
	var out []string
	for _, f := range flows {
		f.Cookie = 0
		out = append(out, f.String())
	}
	return out
}

// TestPolicyRuleIsAConjunction pins one egress and one ingress rule's flows: one flow per value of
// each dimension (the sum, not the product), one conj_id flow.
func TestPolicyRuleIsAConjunction(t *testing.T) {
	g := NewWithT(t)
	p := Policy{Rules: []PolicyRule{
		{ID: 5, Direction: PolicyEgress, Pods: []Pod{npPod1, npPod2}, Peers: []netip.Prefix{netip.MustParsePrefix("10.244.2.0/24"), netip.MustParsePrefix("10.0.0.7/32")},
			Ports: []PolicyPort{{Protocol: openflow.ProtoTCP, Port: 80, EndPort: 85}, {Protocol: openflow.ProtoUDP, Port: 53}}},
		{ID: 6, Direction: PolicyIngress, Pods: []Pod{npPod2}, AnyPeer: true},
		{ID: 7, Direction: PolicyIngress, Pods: []Pod{npPod1}, AnyPeer: true, Ports: []PolicyPort{{Protocol: openflow.ProtoUDP, Port: 53}}},
		{ID: 8, Direction: PolicyEgress, Pods: []Pod{npPod1}, Peers: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}},
	}}
	got, counters := splitCounters(conjunctionFlows(p.Rules))
	g.Expect(policyStrs(got)).To(ConsistOf(
		"table=50, priority=200,ip,in_port=10 actions=conjunction(5,1/3)",
		"table=50, priority=200,ip,in_port=11 actions=conjunction(5,1/3)",
		"table=50, priority=200,ip,nw_dst=10.244.2.0/24 actions=conjunction(5,2/3)",
		"table=50, priority=200,ip,nw_dst=10.0.0.7 actions=conjunction(5,2/3)",
		"table=50, priority=200,tcp,tp_dst=0x50/0xfffc actions=conjunction(5,3/3)",
		"table=50, priority=200,tcp,tp_dst=0x54/0xfffe actions=conjunction(5,3/3)",
		"table=50, priority=200,udp,tp_dst=53 actions=conjunction(5,3/3)",
		// The deciding flow loads the rule's id for its counters.
		"table=50, priority=190,conj_id=5,ip actions=set_field:0x5->reg8,goto_table:62",
		// Any peer on any port: no conjunction (OVS needs two clauses, and never completes one
		// from two clauses of one flow), the Pod is allowed directly.
		"table=90, priority=205,ip,reg1=0xb actions=set_field:0x6->reg9,goto_table:102",
		// Any peer: two clauses, the Pods and the ports.
		"table=90, priority=200,ip,reg1=0xa actions=conjunction(7,1/2)",
		"table=90, priority=200,udp,tp_dst=53 actions=conjunction(7,2/2)",
		"table=90, priority=190,conj_id=7,ip actions=set_field:0x7->reg9,goto_table:102",
		// 0.0.0.0/0 is any peer.
		"table=50, priority=205,ip,in_port=10 actions=set_field:0x8->reg8,goto_table:62",
	))
	// Two counter flows per rule in its direction's metric table: new connections (the id in the
	// register, none committed yet) and their later packets (the id committed in ct_label).
	g.Expect(policyStrs(counters)).To(ConsistOf(
		"table=62, priority=200,ct_state=+new+trk,ct_label=0/0xffffffff0000000000000000,ip,reg8=0x5 actions=goto_table:70",
		"table=62, priority=200,ct_state=+trk,ct_mark=0/0x80,ct_label=0x50000000000000000/0xffffffff0000000000000000,ip actions=goto_table:70",
		"table=102, priority=200,ct_state=+new+trk,ct_label=0/0xffffffff000000000000000000000000,ip,reg9=0x6 actions=goto_table:105",
		"table=102, priority=200,ct_state=+trk,ct_label=0x6000000000000000000000000/0xffffffff000000000000000000000000,ip actions=goto_table:105",
		"table=102, priority=200,ct_state=+new+trk,ct_label=0/0xffffffff000000000000000000000000,ip,reg9=0x7 actions=goto_table:105",
		"table=102, priority=200,ct_state=+trk,ct_label=0x7000000000000000000000000/0xffffffff000000000000000000000000,ip actions=goto_table:105",
		"table=62, priority=200,ct_state=+new+trk,ct_label=0/0xffffffff0000000000000000,ip,reg8=0x8 actions=goto_table:70",
		"table=62, priority=200,ct_state=+trk,ct_mark=0/0x80,ct_label=0x80000000000000000/0xffffffff0000000000000000,ip actions=goto_table:70",
	))
	for _, f := range counters {
		kind, dir, id, ok := ParsePolicyCounterObject(f.Cookie)
		g.Expect(ok).To(BeTrue(), "a counter's cookie: %s", f.String())
		g.Expect(f.String()).To(ContainSubstring(fmt.Sprintf("%#x", id)), "the cookie names the rule")
		g.Expect(MetricTable(dir)).To(Equal(f.Table))
		g.Expect(strings.Contains(f.String(), "+new") == (kind == CounterNew)).To(BeTrue(), "the cookie names the kind: %s", f.String())
	}
}

// TestMergedRuleCountsPerPod: a rule merged from the rules of several policies counts each Pod
// under the rule given for it (CountAs), with a conj_id flow of its own for that Pod; rules that
// admit a Pod everything share its flow, and the first of them (lowest id) counts it.
func TestMergedRuleCountsPerPod(t *testing.T) {
	g := NewWithT(t)
	peer := []netip.Prefix{netip.MustParsePrefix("10.244.2.9/32")}
	got, counters := splitCounters(conjunctionFlows([]PolicyRule{
		{ID: 3, Direction: PolicyIngress, Pods: []Pod{npPod1, npPod2}, Peers: peer, CountAs: map[uint32]uint32{npPod2.OFPort: 9}},
		{ID: 4, Direction: PolicyEgress, Pods: []Pod{npPod1}, AnyPeer: true},
		{ID: 5, Direction: PolicyEgress, Pods: []Pod{npPod1, npPod2}, AnyPeer: true},
	}))
	g.Expect(policyStrs(got)).To(ConsistOf(
		"table=90, priority=200,ip,nw_src=10.244.2.9 actions=conjunction(3,1/2)",
		"table=90, priority=200,ip,reg1=0xa actions=conjunction(3,2/2)",
		"table=90, priority=200,ip,reg1=0xb actions=conjunction(3,2/2)",
		"table=90, priority=190,conj_id=3,ip actions=set_field:0x3->reg9,goto_table:102",
		"table=90, priority=191,conj_id=3,ip,reg1=0xb actions=set_field:0x9->reg9,goto_table:102",
		"table=50, priority=205,ip,in_port=10 actions=set_field:0x4->reg8,goto_table:62",
		"table=50, priority=205,ip,in_port=11 actions=set_field:0x5->reg8,goto_table:62",
	))
	g.Expect(counters).To(HaveLen(8), "rules 3 and 9 in, 4 and 5 out: two flows each")
}

// splitCounters separates the counter flows (the metric tables) from the others.
func splitCounters(flows []openflow.Flow) (others, counters []openflow.Flow) {
	for _, f := range flows {
		if f.Table == EgressMetricTable || f.Table == IngressMetricTable {
			counters = append(counters, f)
		} else {
			others = append(others, f)
		}
	}
	return others, counters
}

// TestPolicyFlowsAreShared: rules that share a peer share its flow; a rule whose peers resolve to
// nothing has no flows at all (a dangling clause could never complete anyway).
func TestPolicyFlowsAreShared(t *testing.T) {
	g := NewWithT(t)
	peer := []netip.Prefix{netip.MustParsePrefix("10.244.2.9/32")}
	flows, _ := splitCounters(conjunctionFlows([]PolicyRule{
		{ID: 3, Direction: PolicyIngress, Pods: []Pod{npPod1}, Peers: peer},
		{ID: 2, Direction: PolicyIngress, Pods: []Pod{npPod2}, Peers: peer, Ports: []PolicyPort{{Protocol: openflow.ProtoTCP}}},
		{ID: 4, Direction: PolicyIngress, Pods: []Pod{npPod2}},
	}))
	got := policyStrs(flows)
	g.Expect(got).To(ContainElement("table=90, priority=200,ip,nw_src=10.244.2.9 actions=conjunction(2,1/3),conjunction(3,1/2)"))
	g.Expect(got).To(ContainElement("table=90, priority=200,tcp actions=conjunction(2,3/3)"))
	g.Expect(strings.Join(got, "\n")).NotTo(ContainSubstring("(4,"))
	g.Expect(got).To(HaveLen(6))
}

// TestPolicyIsolationAndExemptions pins the default-deny flows of isolated Pods and the flows that
// keep a Pod's own node and the Pod itself allowed.
func TestPolicyIsolationAndExemptions(t *testing.T) {
	g := NewWithT(t)
	got := policyStrs(testNode().PolicyFlows(Policy{IngressIsolated: []Pod{npPod1}, EgressIsolated: []Pod{npPod2}}))
	g.Expect(got).To(ConsistOf(
		"table=50, priority=210,ip,reg0=0x2/0xffff,nw_dst=10.244.1.1 actions=goto_table:62",
		"table=50, priority=210,ip,reg0=0x2/0xffff,nw_dst=192.168.10.11 actions=goto_table:62",
		"table=90, priority=210,ip,reg0=0x1/0xffff,nw_src=10.244.1.1 actions=goto_table:102",
		"table=90, priority=210,ip,reg0=0x1/0xffff,nw_src=192.168.10.11 actions=goto_table:102",
		"table=90, priority=210,ip,reg0=0x4/0xffff,nw_src=192.168.10.11 actions=goto_table:102",
		"table=50, priority=210,ip,in_port=11,nw_dst=10.244.1.6 actions=goto_table:62",
		"table=60, priority=200,ip,in_port=11 actions=drop",
		"table=90, priority=210,ip,reg1=0xa,nw_src=10.244.1.5 actions=goto_table:102",
		"table=100, priority=200,ip,reg1=0xa actions=drop",
	))
}

// testPolicy isolates npPod1 for ingress and npPod2 for egress, with rules of every kind of dimension:
// npPod1 admits TCP 80-85 and UDP 53 from the remote subnet 10.244.2.0/24 except nothing, and every
// port from npPod2; npPod2 may reach npPod1 on TCP 8080 and anything in 192.168.10.0/24 on any port.
func testPolicy() Policy {
	return Policy{
		IngressIsolated: []Pod{npPod1},
		EgressIsolated:  []Pod{npPod2},
		Rules: []PolicyRule{
			{ID: 1, Direction: PolicyIngress, Pods: []Pod{npPod1}, Peers: []netip.Prefix{netip.MustParsePrefix("10.244.2.0/24")},
				Ports: []PolicyPort{{Protocol: openflow.ProtoTCP, Port: 80, EndPort: 85}, {Protocol: openflow.ProtoUDP, Port: 53}}},
			{ID: 2, Direction: PolicyIngress, Pods: []Pod{npPod1}, Peers: []netip.Prefix{netip.MustParsePrefix("10.244.1.6/32")}},
			// Merged from two policies' rules: npPod2 is counted under the other rule's id, 9.
			{ID: 3, Direction: PolicyEgress, Pods: []Pod{npPod2}, Peers: []netip.Prefix{netip.MustParsePrefix("10.244.1.5/32")},
				Ports: []PolicyPort{{Protocol: openflow.ProtoTCP, Port: 8080}}, CountAs: map[uint32]uint32{npPod2.OFPort: 9}},
			{ID: 4, Direction: PolicyEgress, Pods: []Pod{npPod2}, Peers: []netip.Prefix{netip.MustParsePrefix("192.168.10.0/24")}},
			// ipBlocks with exceptions, through the peer class stage: npPod1 admits TCP 80 from
			// 10.244.3.0/24 except 10.244.3.7, npPod2 may reach 8.0.0.0/8 except 8.8.8.8 on TCP 443.
			{ID: 5, Direction: PolicyIngress, Pods: []Pod{npPod1}, Classes: []uint32{1}, Ports: []PolicyPort{{Protocol: openflow.ProtoTCP, Port: 80}}},
			{ID: 6, Direction: PolicyEgress, Pods: []Pod{npPod2}, Classes: []uint32{1}, Ports: []PolicyPort{{Protocol: openflow.ProtoTCP, Port: 443}}},
		},
		IngressClasses: []PeerClass{{Prefix: netip.MustParsePrefix("10.244.3.0/24"), ID: 1}, {Prefix: netip.MustParsePrefix("10.244.3.7/32"), ID: 2}},
		EgressClasses:  []PeerClass{{Prefix: netip.MustParsePrefix("8.0.0.0/8"), ID: 1}, {Prefix: netip.MustParsePrefix("8.8.8.8/32"), ID: 2}},
	}
}

// TestPodPolicyPendingFlows: a Pod whose policies are not committed yet refuses every IP packet
// sent to it, in the first ingress policy table (the Admin tier's), above its skips and exemptions.
func TestPodPolicyPendingFlows(t *testing.T) {
	g := NewWithT(t)
	g.Expect(strs(testNode().PodPolicyPendingFlows(npPod1))).To(Equal([]string{"table=82, priority=65000,ip,reg1=0xa actions=drop"}))
}
