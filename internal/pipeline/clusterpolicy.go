package pipeline

import (
	"net/netip"
	"slices"

	"github.com/winnet-io/winnet/internal/ovs/openflow"
)

// ClusterTier is the tier of a ClusterNetworkPolicy: Admin before NetworkPolicy, Baseline after.
type ClusterTier int

// ClusterNetworkPolicy's tiers.
const (
	AdminTier ClusterTier = iota
	BaselineTier
)

// ClusterAction is what a ClusterNetworkPolicy rule does with the new connections it matches.
type ClusterAction int

// ClusterNetworkPolicy's actions. Pass hands the decision to the next tier: from Admin to
// NetworkPolicy, from Baseline to the default (allowed).
const (
	ClusterAccept ClusterAction = iota
	ClusterDeny
	ClusterPass
)

// ClusterRule is one rule of a ClusterNetworkPolicy as the pipeline realises it: a conjunction of its
// subjects (the local Pods), its peers and its ports, at an OVS priority of its own in its tier's
// table of its direction, whose conj_id flow applies its action.
type ClusterRule struct {
	Tier      ClusterTier
	Direction PolicyDirection
	Action    ClusterAction
	// Priority is the rule's OVS priority in its table, in ClusterPriorityLowest..
	// ClusterPriorityHighest and unique in the table: the higher, the earlier the rule decides.
	Priority uint16
	// Sub tells apart the parts of one API rule (0..MaxClusterSubRules-1), which share its
	// priority and action: a rule with named ports is one part per set of ports its names resolve
	// to (on the subjects for ingress, on the peers for egress).
	Sub uint16
	// Pods are the rule's local subjects: the sources of an egress rule, the targets of an
	// ingress rule.
	Pods []Pod
	// AnyPeer matches every peer; otherwise Peers are the peers' addresses (IPv4 only: other
	// prefixes match nothing here and are left out).
	AnyPeer bool
	Peers   []netip.Prefix
	// Ports are the destination ports matched; none matches every port of every protocol.
	Ports []PolicyPort
	// Audit sends the first packet of each new connection the rule decides to the agent (its
	// decision flows' AuditAction before their own), named by the flows' cookie
	// (ClusterRuleObject). The parts of one rule share it.
	Audit bool
}

// ClusterPolicy is every ClusterNetworkPolicy rule with subjects on the node.
type ClusterPolicy struct {
	Rules []ClusterRule
}

// MaxClusterSubRules bounds the parts of one API rule (ClusterRule.Sub).
const MaxClusterSubRules = 1 << 13

// ClusterConjID is the conjunction id of part sub of the rule at priority in the table of tier and
// direction. Conjunctions are matched within one table, so the priority (unique in its table) and
// the part (bits 18-30) are enough; the tier and direction in bits 16-17 and bit 31 set keep the ids
// apart from NetworkPolicy's in traces.
func ClusterConjID(tier ClusterTier, dir PolicyDirection, priority, sub uint16) uint32 {
	return 1<<31 | uint32(sub)<<18 | uint32(tier)<<17 | uint32(dir)<<16 | uint32(priority)
}

// ClusterRuleObject is the cookie object of every flow of the rule at priority in the table of tier
// and direction (all its parts): bit 39 set and 63 in bits 32-37, which no peer clause flow has
// (PolicyPeerObject's prefix length is at most 32), so that a rule's flows can be synced on their own
// (openflow.Bridge.SyncObjects) when its peers change.
func ClusterRuleObject(tier ClusterTier, dir PolicyDirection, priority uint16) uint64 {
	return 1<<39 | 63<<32 | uint64(tier)<<17 | uint64(dir)<<16 | uint64(priority)
}

// ClusterRuleObjectOfConjID is the cookie object (ClusterRuleObject) of the rule whose part has
// conjunction id id (ClusterConjID), and false for an id that is not a ClusterNetworkPolicy's (bit
// 31 clear: a NetworkPolicy rule's).
func ClusterRuleObjectOfConjID(id uint32) (uint64, bool) {
	if id&(1<<31) == 0 {
		return 0, false
	}
	return ClusterRuleObject(ClusterTier(id>>17&1), PolicyDirection(id>>16&1), uint16(id)), true
}

// clusterTable is the table of a tier and direction.
func clusterTable(tier ClusterTier, dir PolicyDirection) uint8 {
	switch {
	case tier == AdminTier && dir == PolicyEgress:
		return AdminEgressRuleTable
	case tier == AdminTier:
		return AdminIngressRuleTable
	case dir == PolicyEgress:
		return BaselineEgressRuleTable
	default:
		return BaselineIngressRuleTable
	}
}

// clusterActions are the actions of a rule's decision: Accept skips the later tiers (the
// direction's metric table), Deny drops, Pass goes to NetworkPolicy from the Admin tier and, from
// the Baseline tier, to the default, which allows.
func clusterActions(r ClusterRule) []openflow.Action {
	metric, networkPolicy := IngressMetricTable, IngressPeerClassTable
	if r.Direction == PolicyEgress {
		metric, networkPolicy = EgressMetricTable, EgressPeerClassTable
	}
	switch {
	case r.Action == ClusterDeny:
		return decision(r.Audit, openflow.Drop())
	case r.Action == ClusterPass && r.Tier == AdminTier:
		return decision(r.Audit, openflow.GotoTable(networkPolicy))
	case r.Action == ClusterPass:
		return decision(r.Audit, openflow.GotoTable(metric))
	default:
		// Accept: the rule's id for its counters (counters.go).
		return decision(r.Audit, loadRule(r.Direction, ClusterRuleID(r.Tier, r.Direction, r.Priority)), openflow.GotoTable(metric))
	}
}

// ClusterRuleID is the id under which the rule at priority in the table of tier and direction is
// counted (all its parts): ClusterConjID of its part 0.
func ClusterRuleID(tier ClusterTier, dir PolicyDirection, priority uint16) uint32 {
	return ClusterConjID(tier, dir, priority, 0)
}

// ClusterPolicyFlows are the flows of the node's ClusterNetworkPolicy rules (CategoryPolicy, with
// NetworkPolicy's). Each rule's flows are at its own priority: its subjects' ports, its peers and
// its port blocks are the clauses of one conjunction (a dimension that matches everything is no
// clause, as in conjunctionFlows), and the conj_id flow applies the action; a rule with only
// subjects (any peer, any port) is one flow per subject with the action. Flows are not shared
// between rules (OVS needs a conjunction's clauses at one priority), so a rule costs its subjects +
// its peers + its port blocks + 1 flows. Rules without subjects, or whose peers are none of this
// family, have no flows. The parts of one rule (Sub) share its priority: a clause flow they have in
// common is one flow with the conjunction action of each.
func (n Node) ClusterPolicyFlows(p ClusterPolicy) []openflow.Flow {
	var out []openflow.Flow
	at := map[string]int{}
	counted := map[uint32]bool{}
	for _, r := range p.Rules {
		flows := clusterRuleFlows(r)
		// An Accept rule with flows is counted in its direction's metric table (counters.go).
		if id := ClusterRuleID(r.Tier, r.Direction, r.Priority); len(flows) > 0 && r.Action == ClusterAccept && !counted[id] {
			counted[id] = true
			flows = append(flows, ruleCounterFlows(r.Direction, id)...)
		}
		for _, f := range flows {
			k := openflow.Flow{Table: f.Table, Priority: f.Priority, Match: f.Match}
			key := k.String()
			i, ok := at[key]
			if !ok {
				at[key] = len(out)
				out = append(out, f)
				continue
			}
			for _, a := range f.Actions {
				if !slices.ContainsFunc(out[i].Actions, func(b openflow.Action) bool { return actionText(b) == actionText(a) }) {
					out[i].Actions = append(out[i].Actions, a)
				}
			}
		}
	}
	return out
}

// TraceRules are the rules with flows on the node as packet traces name them (TracePolicy): each
// rule (all its parts) once, with the conjunction ids of its parts, or, for a rule without a
// conjunction, the subjects it is the first rule of in its table.
func (p ClusterPolicy) TraceRules() []TraceClusterRule {
	type key struct {
		table    uint8
		priority uint16
	}
	// first holds, by table and subject port, the highest priority of a rule with flows that has
	// the subject.
	first := map[uint8]map[uint32]uint16{}
	for _, r := range p.Rules {
		if _, ok := r.realised(); !ok {
			continue
		}
		table := clusterTable(r.Tier, r.Direction)
		if first[table] == nil {
			first[table] = map[uint32]uint16{}
		}
		for _, pod := range r.Pods {
			if pr, ok := first[table][pod.OFPort]; !ok || r.Priority > pr {
				first[table][pod.OFPort] = r.Priority
			}
		}
	}
	var out []TraceClusterRule
	at := map[key]int{}
	for _, r := range p.Rules {
		c, ok := r.realised()
		if !ok {
			continue
		}
		table := clusterTable(r.Tier, r.Direction)
		k := key{table, r.Priority}
		i, seen := at[k]
		if !seen {
			i = len(out)
			at[k] = i
			out = append(out, TraceClusterRule{Tier: r.Tier, Direction: r.Direction, Action: r.Action, Priority: r.Priority})
		}
		tr := &out[i]
		if c.n != 0 {
			if id := ClusterConjID(r.Tier, r.Direction, r.Priority, r.Sub); !slices.Contains(tr.ConjIDs, id) {
				tr.ConjIDs = append(tr.ConjIDs, id)
			}
			continue
		}
		for _, pod := range r.Pods {
			if first[table][pod.OFPort] == r.Priority && !slices.Contains(tr.FirstPods, pod.OFPort) {
				tr.FirstPods = append(tr.FirstPods, pod.OFPort)
			}
		}
	}
	return out
}

// realised is the rule's clauses (clauses' n 0: no conjunction, one flow per subject), and false
// when the rule has no flows: no subjects, or no peer of this family.
func (r ClusterRule) realised() (ruleClauses, bool) {
	peers := r.ipv4Peers()
	if len(r.Pods) == 0 || (!r.AnyPeer && len(peers) == 0) {
		return ruleClauses{}, false
	}
	return PolicyRule{Direction: r.Direction, AnyPeer: r.AnyPeer, Peers: peers, Ports: r.Ports}.clauses(), true
}

// ipv4Peers are the rule's IPv4 peers, masked.
func (r ClusterRule) ipv4Peers() []netip.Prefix {
	var peers []netip.Prefix
	for _, p := range r.Peers {
		if p.Addr().Is4() {
			peers = append(peers, p.Masked())
		}
	}
	return peers
}

func clusterRuleFlows(r ClusterRule) []openflow.Flow {
	peers := r.ipv4Peers()
	if len(r.Pods) == 0 || (!r.AnyPeer && len(peers) == 0) {
		return nil
	}
	table := clusterTable(r.Tier, r.Direction)
	actions := clusterActions(r)
	podMatch := func(pod Pod) []openflow.MatchField {
		if r.Direction == PolicyEgress {
			return match(openflow.IPv4(), openflow.InPort(pod.OFPort))
		}
		return match(openflow.IPv4(), regMatch(TargetOFPortField, pod.OFPort))
	}
	c := PolicyRule{Direction: r.Direction, AnyPeer: r.AnyPeer, Peers: peers, Ports: r.Ports}.clauses()
	var out []openflow.Flow
	if c.n == 0 {
		for _, pod := range r.Pods {
			out = append(out, flow(table, r.Priority, podMatch(pod), actions...))
		}
		return withCookie(dedup(out), ClusterRuleObject(r.Tier, r.Direction, r.Priority))
	}
	id := ClusterConjID(r.Tier, r.Direction, r.Priority, r.Sub)
	for _, pod := range r.Pods {
		out = append(out, flow(table, r.Priority, podMatch(pod), openflow.Conjunction(id, c.pods, c.n)))
	}
	if c.peers != 0 {
		nw := openflow.NwSrc
		if r.Direction == PolicyEgress {
			nw = openflow.NwDst
		}
		for _, p := range peers {
			out = append(out, flow(table, r.Priority, match(openflow.IPv4(), nw(p)), openflow.Conjunction(id, c.peers, c.n)))
		}
	}
	for _, pp := range r.Ports {
		base := match(openflow.IPv4(), openflow.IPProto(pp.Protocol))
		if pp.Port == 0 {
			out = append(out, flow(table, r.Priority, base, openflow.Conjunction(id, c.ports, c.n)))
			continue
		}
		for _, b := range PortRange(pp.Port, pp.EndPort) {
			m := append(match(openflow.IPv4(), openflow.IPProto(pp.Protocol)), openflow.TpDstMasked(pp.Protocol, b.Value, b.Mask))
			out = append(out, flow(table, r.Priority, m, openflow.Conjunction(id, c.ports, c.n)))
		}
	}
	out = append(out, flow(table, r.Priority, match(openflow.ConjID(id), openflow.IPv4()), actions...))
	return withCookie(dedup(out), ClusterRuleObject(r.Tier, r.Direction, r.Priority))
}

func withCookie(flows []openflow.Flow, object uint64) []openflow.Flow {
	for i := range flows {
		flows[i].Cookie = object
	}
	return flows
}

func actionText(a openflow.Action) string {
	f := openflow.Flow{Actions: []openflow.Action{a}}
	return f.String()
}
