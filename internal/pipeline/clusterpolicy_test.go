package pipeline

import (
	"net/netip"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/internal/ovs/openflow"
)

// testClusterPolicy has a rule of each tier, action and direction: an Admin Deny of TCP 80-81 from
// npPod1 to a /24, an Admin Pass of every port to 10.244.2.7 from npPod2, an Admin Accept to
// npPod1 from anywhere on UDP 53, a Baseline Deny of everything to npPod2, and an IPv6 network
// that matches nothing (no flows).
func testClusterPolicy() ClusterPolicy {
	return ClusterPolicy{Rules: []ClusterRule{
		{Tier: AdminTier, Direction: PolicyEgress, Action: ClusterDeny, Priority: 60000, Pods: []Pod{npPod1},
			Peers: []netip.Prefix{netip.MustParsePrefix("10.244.3.0/24")}, Ports: []PolicyPort{{Protocol: openflow.ProtoTCP, Port: 80, EndPort: 81}}},
		{Tier: AdminTier, Direction: PolicyEgress, Action: ClusterPass, Priority: 59999, Pods: []Pod{npPod2},
			Peers: []netip.Prefix{netip.MustParsePrefix("10.244.2.7/32")}},
		{Tier: AdminTier, Direction: PolicyIngress, Action: ClusterAccept, Priority: 60000, Pods: []Pod{npPod1},
			Peers: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}, Ports: []PolicyPort{{Protocol: openflow.ProtoUDP, Port: 53}}},
		{Tier: BaselineTier, Direction: PolicyIngress, Action: ClusterDeny, Priority: 60000, Pods: []Pod{npPod2}, AnyPeer: true},
		{Tier: BaselineTier, Direction: PolicyEgress, Action: ClusterAccept, Priority: 60000, Pods: []Pod{npPod2},
			Peers: []netip.Prefix{netip.MustParsePrefix("::/0")}},
	}}
}

func TestClusterPolicyFlows(t *testing.T) {
	g := NewWithT(t)
	flows, counters := splitCounters(testNode().ClusterPolicyFlows(testClusterPolicy()))
	// An Accept rule is counted in its direction's metric table, under ClusterRuleID; Deny and
	// Pass rules by their own flows.
	g.Expect(strs(counters)).To(ConsistOf(
		"cookie=0x408000ea60, table=102, priority=200,ct_state=+new+trk,ct_label=0/0xffffffff000000000000000000000000,ip,reg9=0x8000ea60 actions=goto_table:105",
		"cookie=0x448000ea60, table=102, priority=200,ct_state=+trk,ct_label=0x8000ea60000000000000000000000000/0xffffffff000000000000000000000000,ip actions=goto_table:105",
	))
	for _, f := range flows {
		tier, dir := AdminTier, PolicyEgress
		switch f.Table {
		case AdminIngressRuleTable:
			dir = PolicyIngress
		case BaselineIngressRuleTable:
			tier, dir = BaselineTier, PolicyIngress
		}
		g.Expect(f.Cookie).To(Equal(ClusterRuleObject(tier, dir, f.Priority)), "the rule's object: %s", f.String())
	}
	g.Expect(strs(withCookie(flows, 0))).To(Equal([]string{
		"table=46, priority=60000,ip,in_port=10 actions=conjunction(2147609184,1/3)",
		"table=46, priority=60000,ip,nw_dst=10.244.3.0/24 actions=conjunction(2147609184,2/3)",
		"table=46, priority=60000,tcp,tp_dst=0x50/0xfffe actions=conjunction(2147609184,3/3)",
		"table=46, priority=60000,conj_id=2147609184,ip actions=drop",
		"table=46, priority=59999,ip,in_port=11 actions=conjunction(2147609183,1/2)",
		"table=46, priority=59999,ip,nw_dst=10.244.2.7 actions=conjunction(2147609183,2/2)",
		"table=46, priority=59999,conj_id=2147609183,ip actions=goto_table:48",
		"table=82, priority=60000,ip,reg1=0xa actions=conjunction(2147543648,1/2)",
		"table=82, priority=60000,udp,tp_dst=53 actions=conjunction(2147543648,2/2)",
		"table=82, priority=60000,conj_id=2147543648,ip actions=set_field:0x8000ea60->reg9,goto_table:102",
		"table=101, priority=60000,ip,reg1=0xb actions=drop",
	}))
}

// TestClusterPolicyFlowsParts: the parts of one rule (named ports resolved to different ports on
// different subjects) share its priority; the clause flow they have in common is one flow with
// the conjunction of each.
func TestClusterPolicyFlowsParts(t *testing.T) {
	g := NewWithT(t)
	peer := []netip.Prefix{netip.MustParsePrefix("10.244.2.7/32")}
	p := ClusterPolicy{Rules: []ClusterRule{
		{Tier: AdminTier, Direction: PolicyIngress, Action: ClusterDeny, Priority: 50000, Sub: 0, Pods: []Pod{npPod1}, Peers: peer,
			Ports: []PolicyPort{{Protocol: openflow.ProtoTCP, Port: 8080}}},
		{Tier: AdminTier, Direction: PolicyIngress, Action: ClusterDeny, Priority: 50000, Sub: 1, Pods: []Pod{npPod2}, Peers: peer,
			Ports: []PolicyPort{{Protocol: openflow.ProtoTCP, Port: 9090}}},
	}}
	g.Expect(strs(withCookie(testNode().ClusterPolicyFlows(p), 0))).To(Equal([]string{
		"table=82, priority=50000,ip,reg1=0xa actions=conjunction(2147533648,2/3)",
		"table=82, priority=50000,ip,nw_src=10.244.2.7 actions=conjunction(2147533648,1/3),conjunction(2147795792,1/3)",
		"table=82, priority=50000,tcp,tp_dst=8080 actions=conjunction(2147533648,3/3)",
		"table=82, priority=50000,conj_id=2147533648,ip actions=drop",
		"table=82, priority=50000,ip,reg1=0xb actions=conjunction(2147795792,2/3)",
		"table=82, priority=50000,tcp,tp_dst=9090 actions=conjunction(2147795792,3/3)",
		"table=82, priority=50000,conj_id=2147795792,ip actions=drop",
	}))
}

// failClosedClusterPolicy has the rules the agent compiles of ClusterNetworkPolicy rules it cannot
// realise as written (controllers/networkpolicy ComputeCluster): Deny and Pass rules beyond the
// band, a drop of every peer and port of their subjects at ClusterPriorityBeyondBand in each table;
// a Deny whose protocol entry winnet does not know, every port of its peers; a Deny whose peer it
// cannot resolve, every peer on its ports.
func failClosedClusterPolicy() ClusterPolicy {
	var rules []ClusterRule
	for _, tier := range []ClusterTier{AdminTier, BaselineTier} {
		for _, dir := range []PolicyDirection{PolicyIngress, PolicyEgress} {
			rules = append(rules, ClusterRule{Tier: tier, Direction: dir, Action: ClusterDeny, Priority: ClusterPriorityBeyondBand, Pods: []Pod{npPod1, npPod2}, AnyPeer: true},
				ClusterRule{Tier: tier, Direction: dir, Action: ClusterDeny, Priority: ClusterPriorityHighest, Pods: []Pod{npPod1},
					Peers: []netip.Prefix{netip.MustParsePrefix("10.244.3.0/24")}},
				ClusterRule{Tier: tier, Direction: dir, Action: ClusterDeny, Priority: ClusterPriorityHighest - 1, Pods: []Pod{npPod2}, AnyPeer: true,
					Ports: []PolicyPort{{Protocol: openflow.ProtoTCP, Port: 22}}, Audit: true})
		}
	}
	return ClusterPolicy{Rules: rules}
}

// TestClusterPolicyFlowsFailClosed: the rules beyond the band are one drop per subject below the
// band and above the table's miss, their rule's object the priority they share.
func TestClusterPolicyFlowsFailClosed(t *testing.T) {
	g := NewWithT(t)
	var beyond []string
	for _, f := range testNode().ClusterPolicyFlows(failClosedClusterPolicy()) {
		if f.Priority == ClusterPriorityBeyondBand && f.Table == AdminEgressRuleTable {
			beyond = append(beyond, f.String())
		}
	}
	g.Expect(beyond).To(Equal([]string{
		"cookie=0xbf000103e7, table=46, priority=999,ip,in_port=10 actions=drop",
		"cookie=0xbf000103e7, table=46, priority=999,ip,in_port=11 actions=drop",
	}))
	g.Expect(ClusterPriorityBeyondBand).To(BeNumerically("<", ClusterPriorityLowest))
	g.Expect(ClusterPriorityBeyondBand).To(BeNumerically(">", priorityMiss))
}
