package pipeline

import "github.com/winnet-io/winnet/internal/ovs/openflow"

// Incarnations: a connection never outlives its Pod's address.
//
// When a Pod goes, the conntrack entries of its connections stay (an established TCP entry for
// hours), and when its address is given to a new Pod, a packet of an old connection would match
// +est and skip the new Pod's policy, in both directions. Calico's Felix deletes the entries of a
// removed workload's address; OVS's Windows datapath cannot do that (a flush narrower than a whole
// zone wipes the zone's NAT table, RuleFlushPartial; a whole-zone flush of ConntrackZone takes
// every Pod's SNAT and Service NAT with it, RuleFlushNATZone). So nothing is flushed: each Pod
// attachment gets an incarnation number (the agent gives the next one for its address each time
// the address is attached again, controllers/podendpoint), loaded into a register as its packets
// enter (SrcIncarnationField) and as packets to it are switched (DstIncarnationField), and
// committed with the connection (ct_label[0..63], or ct_mark[16..31] for a NodePort connection
// from the uplink). Established and related packets skip the policy stages only through the
// incarnation tables, where a local Pod's packets go on only when their connection carries the
// Pod's own incarnation: an old connection's packets, from or to the Pod that took the address,
// are dropped there (IncarnationDrops, counted by the agent), and the Pod's policy decides its
// new connections as for any other. Replies of NodePort connections from the uplink, which leave
// from ConntrackStateTable without walking the policy stages, are checked there the same way.
//
// A Pod attached before incarnations (by a release without them) has incarnation 0: nothing is
// checked for it, and its connections carry 0, as they did.

// MaxIncarnation is the largest incarnation. A NodePort connection from the uplink keeps its
// endpoint's incarnation in ct_mark[16..31], where ConntrackZone's record of a UDP Service
// connection keeps the zone it is DNATed in: incarnations stay below the first such zone, so that
// one is never taken for the other.
const MaxIncarnation = ServiceUDPZoneFirst - 1

// IncarnationCTMarkShift is where a NodePort connection from the uplink keeps its endpoint's
// incarnation in ct_mark (IncarnationCTMarkMask).
const (
	IncarnationCTMarkShift        = ServiceZoneCTMarkShift
	IncarnationCTMarkMask  uint32 = ServiceZoneCTMarkMask
)

// priorityStaleReply drops, in ConntrackStateTable, the replies of NodePort connections from the
// uplink that a local Pod sends for another incarnation of its address: below the flows that send
// the replies out (priorityTop), above every other flow that could take them.
const priorityStaleReply = priorityTop - 1

// IncarnationDrop is one flow that drops packets of connections committed for another incarnation
// of their Pod's address, and the direction it counts them under.
type IncarnationDrop struct {
	Table    uint8
	Priority uint16
	// Category is the flow's cookie category.
	Category  uint8
	Direction PolicyDirection
}

// IncarnationDrops are the flows that drop packets of connections of an earlier incarnation of an
// address: the miss of each incarnation table, and the stale replies to clients from the uplink.
var IncarnationDrops = []IncarnationDrop{
	{Table: EgressIncarnationTable, Priority: priorityMiss, Category: CategoryForwarding, Direction: PolicyEgress},
	{Table: IngressIncarnationTable, Priority: priorityMiss, Category: CategoryForwarding, Direction: PolicyIngress},
	{Table: ConntrackStateTable, Priority: priorityStaleReply, Category: CategoryService, Direction: PolicyEgress},
}

// incarnationBaseFlows let through the incarnation tables what is not from (egress) or to
// (ingress) a local Pod with an incarnation, and drop the rest: the Pods' own flows
// (podIncarnationFlows) let through their connections of their own incarnation.
func incarnationBaseFlows() []openflow.Flow {
	return []openflow.Flow{
		flow(EgressIncarnationTable, priorityLow, match(regMatch(SrcIncarnationField, 0)), openflow.GotoTable(EgressMetricTable)),
		flow(EgressIncarnationTable, priorityMiss, nil, openflow.Drop()),
		flow(IngressIncarnationTable, priorityLow, match(regMatch(DstIncarnationField, 0)), openflow.GotoTable(IngressMetricTable)),
		flow(IngressIncarnationTable, priorityMiss, nil, openflow.Drop()),
	}
}

// podIncarnationFlows let the established and related packets of a local Pod's connections through
// the incarnation tables when the connection carries the Pod's incarnation: the label's side is
// the one the Pod is on (the original source, SrcIncarnationLabel, or destination,
// DstIncarnationLabel), which the packet's direction tells; a NodePort connection from the uplink,
// whose client is never a local Pod, keeps its endpoint's in ct_mark. The replies of such a
// connection that the Pod sends leave from ConntrackStateTable, checked there.
func (n Node) podIncarnationFlows(p Pod) []openflow.Flow {
	if p.Incarnation == 0 {
		return nil
	}
	inc := uint32(p.Incarnation)
	internal := openflow.CTMark(0, ServiceExternalCTMark)
	external := openflow.CTMark(ServiceExternalCTMark|inc<<IncarnationCTMarkShift, ServiceExternalCTMark|IncarnationCTMarkMask)
	original := openflow.CTState(openflow.CTTrk, openflow.CTRpl)
	reply := openflow.CTState(openflow.CTTrk|openflow.CTRpl, 0)
	from, to := openflow.InPort(p.OFPort), regMatch(TargetOFPortField, p.OFPort)
	egress, ingress := openflow.GotoTable(EgressMetricTable), openflow.GotoTable(IngressMetricTable)
	return []openflow.Flow{
		flow(EgressIncarnationTable, priorityNormal, match(openflow.IPv4(), from, original, internal, openflow.CTLabel32(SrcIncarnationLabel, inc)), egress),
		flow(EgressIncarnationTable, priorityNormal, match(openflow.IPv4(), from, reply, internal, openflow.CTLabel32(DstIncarnationLabel, inc)), egress),
		flow(EgressIncarnationTable, priorityNormal, match(openflow.IPv4(), from, reply, external), egress),
		flow(IngressIncarnationTable, priorityNormal, match(openflow.IPv4(), to, original, internal, openflow.CTLabel32(DstIncarnationLabel, inc)), ingress),
		flow(IngressIncarnationTable, priorityNormal, match(openflow.IPv4(), to, original, external), ingress),
		flow(IngressIncarnationTable, priorityNormal, match(openflow.IPv4(), to, reply, internal, openflow.CTLabel32(SrcIncarnationLabel, inc)), ingress),
		flow(ConntrackStateTable, priorityTop, match(openflow.IPv4(), from, openflow.CTState(openflow.CTRpl|openflow.CTTrk, openflow.CTNew), external),
			n.externalReplyActions()...),
	}
}

// commitIncarnations are the actions of a commit (in ct(exec(...))) that keep the incarnations of
// the connection's local Pods in ct_label.
func commitIncarnations() []openflow.Action {
	return []openflow.Action{
		openflow.MoveBits(openflow.FieldReg(SrcIncarnationField.Reg), 0, openflow.FieldCTLabel, SrcIncarnationLabel, 32),
		openflow.MoveBits(openflow.FieldReg(DstIncarnationField.Reg), 0, openflow.FieldCTLabel, DstIncarnationLabel, 32),
	}
}

// commitExternalIncarnation keeps the incarnation of a NodePort connection's local endpoint in
// ct_mark (its ct_label holds the client's MACs).
func commitExternalIncarnation() openflow.Action {
	return openflow.MoveBits(openflow.FieldReg(DstIncarnationField.Reg), 0, openflow.FieldCTMark, IncarnationCTMarkShift, 16)
}

// commitNew are the actions of the commit of a connection (in ct(exec(...))) that keep the ids of
// the rules that admitted it and the incarnations of its local Pods in ct_label.
func commitNew() []openflow.Action {
	return append(commitRules(), commitIncarnations()...)
}

// commitNewExternal is commitNew for a NodePort connection from the uplink: its ingress rule's id
// in ct_label (whose other bits keep the client's MACs) and its endpoint's incarnation in ct_mark.
func commitNewExternal() []openflow.Action {
	return []openflow.Action{commitRule(PolicyIngress), commitExternalIncarnation()}
}
