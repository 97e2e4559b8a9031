package pipeline

import "github.com/winnet-io/winnet/internal/ovs/openflow"

// Per-rule counters of NetworkPolicy and ClusterNetworkPolicy, read from flow statistics (no
// packet-in, no extra conntrack pass):
//
//   - the flow that decides for a rule that admits (a NetworkPolicy rule's conj_id flow, or its
//     per-Pod flow when it admits everything; a ClusterNetworkPolicy Accept rule's) loads the
//     rule's id into EgressRuleField or IngressRuleField; ConntrackCommitTable commits the new
//     connection with both ids in ct_label (EgressRuleLabel, IngressRuleLabel) of the zone its
//     packets are tracked in at the metric tables (ConntrackZone, or a UDP Service port's own;
//     a connection also SNATed in ServiceSNATZone is committed there first: admit);
//   - each such rule has two flows in its direction's metric table, both going where the table's
//     miss goes: CounterNew matches the new connection's first packet (its id in the register,
//     none in ct_label yet): one connection; CounterEstablished matches every later packet of the
//     connection (its id in ct_label), in both directions where the connection passes the table;
//   - a Deny or Pass rule of ClusterNetworkPolicy and an isolated Pod's default drop count from
//     their own deciding flows: every packet they dropped or passed (only new connections reach
//     them), no extra flow; a default drop's Pod is its match (DefaultDropPort).
//
// So a rule costs two flows per direction it admits in, and a Pod whose connections a merged rule
// counts under another rule's id one more (PolicyRule.CountAs).

// CounterKind is what a policy counter flow counts.
type CounterKind uint8

// Counter kinds (PolicyCounterObject).
const (
	// CounterNew is the first packet of each new connection a rule admitted.
	CounterNew CounterKind = 0
	// CounterEstablished is every later packet of those connections.
	CounterEstablished CounterKind = 1
)

// DefaultDropPriority is the priority of an isolated Pod's default drop in EgressDefaultTable (the
// Pod's port is the flow's in_port) and IngressDefaultTable (its TargetOFPortField): its counters
// are what the Pod's namespace's default deny dropped.
const DefaultDropPriority = priorityNormal

// DefaultDropPort is the Pod port of a default drop flow of direction dir, given the port it
// matches (egress) and its exact register matches (ingress); false when it names none.
func DefaultDropPort(dir PolicyDirection, inPort uint32, regs map[int]uint32) (uint32, bool) {
	if dir == PolicyEgress {
		return inPort, inPort != 0
	}
	port, ok := regs[TargetOFPortField.Reg]
	return port, ok
}

// PolicyCounterObject is the cookie object of a counter flow: policyCounterBit, the kind in bits
// 34-37, the direction in bit 33 and the rule id below.
func PolicyCounterObject(kind CounterKind, dir PolicyDirection, id uint32) uint64 {
	return policyCounterBit | uint64(kind)<<34 | uint64(dir)<<33 | uint64(id)
}

// ParsePolicyCounterObject reads a counter flow's cookie; ok is false for any other cookie.
func ParsePolicyCounterObject(cookie uint64) (kind CounterKind, dir PolicyDirection, id uint32, ok bool) {
	object := cookie & openflow.ObjectMask
	if object&(1<<39) != 0 || object&policyCounterBit == 0 {
		return 0, 0, 0, false
	}
	return CounterKind(object >> 34 & 0xf), PolicyDirection(object >> 33 & 1), uint32(object), true
}

// PolicyCounterCookie is the cookie and mask of a flow-stats request for the counter flows of a
// table (and nothing else of it).
func PolicyCounterCookie() (cookie, mask uint64) {
	return openflow.MakeCookie(0, CategoryPolicy, policyCounterBit), openflow.CategoryMask | 1<<39 | policyCounterBit
}

// ClusterRuleCookie is the cookie and mask of a flow-stats request for every flow of the
// ClusterNetworkPolicy rules of a table (ClusterRuleObject): the rule is the flow's priority.
func ClusterRuleCookie() (cookie, mask uint64) {
	return openflow.MakeCookie(0, CategoryPolicy, 1<<39|63<<32), openflow.CategoryMask | 0xff<<32
}

// MetricTable is the metric table of a direction, where its admitting rules are counted.
func MetricTable(dir PolicyDirection) uint8 {
	if dir == PolicyEgress {
		return EgressMetricTable
	}
	return IngressMetricTable
}

// DefaultDropTable is the table of a direction's default drops.
func DefaultDropTable(dir PolicyDirection) uint8 {
	if dir == PolicyEgress {
		return EgressDefaultTable
	}
	return IngressDefaultTable
}

// ClusterTable is the table of a ClusterNetworkPolicy tier and direction.
func ClusterTable(tier ClusterTier, dir PolicyDirection) uint8 { return clusterTable(tier, dir) }

// ClusterRuleAt is the tier and direction of a ClusterNetworkPolicy table (ok false for another).
func ClusterRuleAt(table uint8) (tier ClusterTier, dir PolicyDirection, ok bool) {
	for _, t := range []ClusterTier{AdminTier, BaselineTier} {
		for _, d := range []PolicyDirection{PolicyIngress, PolicyEgress} {
			if clusterTable(t, d) == table {
				return t, d, true
			}
		}
	}
	return 0, 0, false
}

// ruleField is the register that carries the id of the rule that admitted a new connection.
func ruleField(dir PolicyDirection) RegField {
	if dir == PolicyEgress {
		return EgressRuleField
	}
	return IngressRuleField
}

// ruleLabel is the first bit of ct_label that keeps it.
func ruleLabel(dir PolicyDirection) int {
	if dir == PolicyEgress {
		return EgressRuleLabel
	}
	return IngressRuleLabel
}

// loadRule is the action of a deciding flow that admits for rule id.
func loadRule(dir PolicyDirection, id uint32) openflow.Action { return loadReg(ruleField(dir), id) }

// commitRules are the actions of a commit (in ct(exec(...))) that keep both rule ids in ct_label.
func commitRules() []openflow.Action {
	return []openflow.Action{commitRule(PolicyEgress), commitRule(PolicyIngress)}
}

// commitRule keeps one direction's rule id in ct_label.
func commitRule(dir PolicyDirection) openflow.Action {
	f := ruleField(dir)
	return openflow.MoveBits(openflow.FieldReg(f.Reg), f.Start, openflow.FieldCTLabel, ruleLabel(dir), f.End-f.Start+1)
}

// ruleCounterFlows are the counter flows of a rule that admits in dir with id (not 0).
func ruleCounterFlows(dir PolicyDirection, id uint32) []openflow.Flow {
	next := ConntrackCommitTable
	if dir == PolicyEgress {
		next = L3ForwardingTable
	}
	label := ruleLabel(dir)
	established := match(openflow.IPv4(), openflow.CTState(openflow.CTTrk, 0), openflow.CTLabel32(label, id))
	if dir == PolicyEgress {
		// A NodePort connection from the uplink keeps a MAC in these bits, and no egress rule.
		established = append(established, openflow.CTMark(0, ServiceExternalCTMark))
	}
	newFlow := flow(MetricTable(dir), priorityNormal,
		match(openflow.IPv4(), openflow.CTState(openflow.CTNew|openflow.CTTrk, 0), openflow.CTLabel32(label, 0), regMatch(ruleField(dir), id)),
		openflow.GotoTable(next))
	newFlow.Cookie = PolicyCounterObject(CounterNew, dir, id)
	estFlow := flow(MetricTable(dir), priorityNormal, established, openflow.GotoTable(next))
	estFlow.Cookie = PolicyCounterObject(CounterEstablished, dir, id)
	return []openflow.Flow{newFlow, estFlow}
}
