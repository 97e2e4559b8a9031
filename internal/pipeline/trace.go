package pipeline

import (
	"net/netip"

	"github.com/winnet-io/winnet/internal/ovs/openflow"
)

// Packet traces (PacketTrace): the source node's agent injects one tagged packet as if the source
// Pod sent it (TracePacketOut: a packet-out whose in_port is the Pod's port, never CONTROLLER), and
// every node the packet crosses reports where the pipeline decided, with packet-ins (output to
// CONTROLLER, controller id 0) from trace flows.
//
// The tag is a DSCP value (1..63) that winnet-controller gives each running trace: the Windows
// datapath keeps and rewrites DSCP, and it survives encapsulation (the inner header is not
// touched). Trace flows match it together with the trace's protocol, source address and source
// port (TCP and UDP; ICMP echo requests), the part of the 5-tuple that no NAT before the last hop
// changes: real traffic that happens to carry the same DSCP is never taken for the trace.
//
// Only the packet the agent injects is traced. The source node's packet-out loads the trace's tag
// into traceTagField; on the other nodes the trace's mark flow loads it into a packet that arrives
// from the tunnel (or, routed, through the host from a peer's Pod address), and every other
// trace flow matches the tag in traceTagField. So a packet that a Pod sends itself with its
// trace's DSCP, source address and source port is real traffic on its own node: it is neither
// reported nor consumed there, and costs no packet-in (no replay of a trace by its source Pod).
//
// Each trace flow sits above every flow of its table (priorityTrace), or above the flow it
// shadows (the conj_id flow of a policy rule, the default drop of an isolated Pod), and either
//   - reports and goes on: it sends the packet to the agent and goes on where the pipeline's own
//     flows would send it; or
//   - reports and consumes it: a drop by policy, delivery to a local Pod, to the host or out to
//     an external address, and a packet that would leave what winnet controls (through the
//     tunnel to a node that is not on the trace's path, status.nodes: a flannel Linux node, a
//     node without a winnet agent; out of the uplink to anything but such a node's Pod CIDR).
//     The traced packet never reaches a Pod's application and never leaves the node towards a
//     host that does not consume it.
//
// A trace leaves no state behind: the traced packet is never committed to conntrack (it skips
// ConntrackCommitTable, the only table that commits, and the Service stage's groups, whose
// buckets commit the DNAT and learn session affinity: the trace's own flow at DNATTable DNATs it
// with set_field to the endpoint the agent picked), so no conntrack entry lets replies of its
// 5-tuple past the source Pod's ingress policy, and no learned flow pins a client to an endpoint.
//
// The cookie's object part (40 bits) says which trace (bits 32..37: the tag) and which
// observation point (bits 24..31: TracePoint) sent the packet, and the point's argument (bits
// 0..23: the conjunction id of a policy rule, the port of an isolated Pod): the agent reads the
// rest (the endpoint a DNAT chose, the output port, the tunnel destination) from the packet-in's
// frame and registers.
//
// Cost: each report is one packet-in; on Windows a packet-in is an upcall from the kernel datapath
// to ovs-vswitchd and a message to the agent, and the trace packet is never cached as a megaflow
// worth keeping. A trace sends at most a handful per node, and the agent rate-limits them.

// TracePoint is where a trace flow reports.
type TracePoint uint8

// The observation points of a trace.
const (
	// TraceServiceDNAT: a Service DNATed the packet (EndpointDNATTable); the frame carries the
	// endpoint.
	TraceServiceDNAT TracePoint = 1
	// TraceEgressRule and TraceIngressRule: a NetworkPolicy rule (conjunction id in the argument)
	// admitted the packet.
	TraceEgressRule  TracePoint = 2
	TraceIngressRule TracePoint = 3
	// TraceEgressDrop and TraceIngressDrop: the packet's Pod (port in the argument) is isolated
	// and no rule admitted it: dropped.
	TraceEgressDrop  TracePoint = 4
	TraceIngressDrop TracePoint = 5
	// TraceExternal: Pod-to-external traffic, SNATed to the node IP: consumed before the commit.
	TraceExternal TracePoint = 6
	// TraceTunnel: output to the tunnel towards a node of the trace's path (tun_dst in the
	// packet-in): goes on to the peer, uncommitted.
	TraceTunnel TracePoint = 7
	// TraceUplink: output to the uplink towards a Pod CIDR of a node of the trace's path (a routed
	// peer): goes on, uncommitted.
	TraceUplink TracePoint = 8
	// TraceHost: output to the gateway (the node's host): consumed.
	TraceHost TracePoint = 9
	// TraceDeliver: output to the port in reg1 (a local Pod), or nowhere when reg0[16] is 0:
	// consumed.
	TraceDeliver TracePoint = 10
	// TraceMark reports nothing: it loads the tag into traceTagField (ConntrackTable) of a packet
	// that arrived from the tunnel (argument FromTunnel) or, routed, from a peer's Pod address
	// through the host (FromGateway).
	TraceMark TracePoint = 11
	// TraceClusterAccept, TraceClusterDeny and TraceClusterPass: a ClusterNetworkPolicy rule
	// decided (TraceClusterArg in the argument: its tier, direction and priority). Accept and
	// Pass report and go where the rule sends the packet; Deny reports and drops it.
	TraceClusterAccept TracePoint = 12
	TraceClusterDeny   TracePoint = 13
	TraceClusterPass   TracePoint = 14
	// TraceTunnelLeaves: output to the tunnel towards an endpoint that is no node of the trace's
	// path (tun_dst in the packet-in): the packet would leave what winnet controls, so it is
	// reported (forwarded externally) and consumed.
	TraceTunnelLeaves TracePoint = 15
	// TraceUplinkLeaves: output to the uplink towards anything but a Pod CIDR of a node of the
	// trace's path: reported (forwarded externally) and consumed.
	TraceUplinkLeaves TracePoint = 16
	// TraceServiceDNATPick reports nothing: it DNATs the packet to the endpoint the agent picked
	// for the trace (DNATTable, set_field, no commit), which TraceServiceDNAT reports.
	TraceServiceDNATPick TracePoint = 17
	// TraceServiceNoEndpoint: the trace's destination is a Service port with no endpoint for this
	// node (none at all, or internalTrafficPolicy Local and none here): consumed (a real
	// connection would be refused or dropped).
	TraceServiceNoEndpoint TracePoint = 18
	// TraceEgress: Pod-to-external traffic of a Pod an Egress the node holds selects (the Egress's
	// id, EgressField, in the argument), SNATed to the egress IP: consumed before the commit. On the
	// holder, whether the Pod is local or its node relayed the packet.
	TraceEgress TracePoint = 19
	// TraceEgressRelay: a selected Pod's traffic to outside the cluster, carried through the tunnel to
	// the node that holds its Egress, a node of the trace's path (tun_dst in the packet-in): goes on
	// to the holder, uncommitted. A holder that is no node of the path takes TraceTunnelLeaves.
	TraceEgressRelay TracePoint = 20
)

// Cached datapath flows. A datapath caches what ovs-vswitchd decided for a packet as a flow that
// matches only the fields the decision read, and the packet's recirculations after each ct action
// (conntrack, the Service DNAT, the commit) look their cached flow up again, keyed by a recirculation
// id that ovs-vswitchd derives from the state frozen at the ct action: the table, the registers. A
// real connection from the source Pod to the same Service, opened before the trace's flows were
// installed, leaves cached flows that read neither DSCP nor the source port; until ovs-vswitchd
// revalidates them (at once after a flow table change, but seconds late on a loaded host) they carry
// the traced packet past every trace flow, without a report. So the traced packet carries its tag in
// traceTagField from its first table on (the packet-out loads it at the source; on the other nodes
// the trace's flow at ConntrackTable, before the first ct action): from then on its recirculations
// have states, hence recirculation ids, that no real packet has, and each misses the cache and is
// decided by the current flow tables. The Windows datapath caches exact-match flows only (the whole
// key, DSCP and ports included), so a traced packet's new 5-tuple misses there anyway; the field
// keeps both datapaths alike. What the field cannot cover is a cached flow that a node's first
// lookup of an arriving traced packet (recirculation id 0) hits: settling after the flows are
// installed (the agent's) covers that.
//
//	reg7[2..7] the trace's tag (0: not a traced packet, or not marked yet)
var traceTagField = RegField{Reg: 7, Start: 2, End: 7}

// traceReportedDNAT marks that the packet has reported the Service DNAT, so that its resubmit into
// EndpointDNATTable reaches the pipeline's own flow. (The forwarding reports go on to
// L2ForwardingOutTable, past the commit, and need no mark.)
//
//	reg7[0] the DNAT report; reg7[1] unused
var traceReportedDNAT = RegField{Reg: 7, Start: 0, End: 0}

// priorityTrace is above every flow of the pipeline's tables (the highest is 231).
const priorityTrace uint16 = 250

// Trace is one running trace as the pipeline matches it.
type Trace struct {
	// Tag is the DSCP value (1..63).
	Tag uint8
	// Protocol is openflow.ProtoTCP, ProtoUDP or ProtoICMP (echo request).
	Protocol uint8
	// Src and SrcPort are the source Pod's address and the trace's source port (TCP, UDP).
	Src     netip.Addr
	SrcPort uint16
	// Path are the other nodes of the trace's path (status.nodes) as this node reaches them. The
	// traced packet goes on through the tunnel only to their tunnel endpoints and out of the
	// uplink only to their Pod CIDRs; anything else leaves what winnet controls and is consumed.
	Path []TracePeer
	// Service, when the trace's destination is a Service port this node balances, is how the node
	// DNATs the traced packet (nil: no Service port here).
	Service *TraceService
}

// TracePeer is a node of a trace's path as this node reaches it: its tunnel endpoint (its node
// IP) and its Pod CIDRs (routed).
type TracePeer struct {
	NodeIP netip.Addr
	CIDRs  []netip.Prefix
}

// TraceService is the Service port a trace is sent to and the endpoint the agent picked for it,
// as the port's group would have (the group itself would commit the connection and learn session
// affinity).
type TraceService struct {
	// Dst is the Service address and port (status.destinationIP, spec.packet.dstPort).
	Dst netip.AddrPort
	// Endpoint is the endpoint picked; the zero value when the port has no endpoint for this
	// node: the traced packet is reported (TraceServiceNoEndpoint) and consumed.
	Endpoint netip.AddrPort
}

// TracePolicy is what the node's NetworkPolicy realises that a trace names: the conjunction ids of
// its rules and the ports of the Pods isolated in each direction; the node's ClusterNetworkPolicy
// rules (ClusterPolicy.TraceRules); and the ids (EgressField) of the Egresses the node holds.
type TracePolicy struct {
	EgressRules, IngressRules       []uint32
	EgressIsolated, IngressIsolated []uint32
	ClusterRules                    []TraceClusterRule
	Egresses                        []uint32
}

// TraceClusterRule is one ClusterNetworkPolicy rule with flows on the node, as its trace flows need
// it (ClusterPolicy.TraceRules).
type TraceClusterRule struct {
	Tier      ClusterTier
	Direction PolicyDirection
	Action    ClusterAction
	Priority  uint16
	// ConjIDs are the conjunction ids of its parts (ClusterConjID); none when the rule matches
	// every peer on every port (its flows are one per subject, without a conjunction).
	ConjIDs []uint32
	// FirstPods are, for a rule without a conjunction, the subjects (ports) for which it is the
	// first rule of its table: no rule above it has them as subjects, so it decides every new
	// connection of theirs that reaches the table. The trace flow of a subject for which a rule
	// above might decide first cannot sit between the two (the rules' priorities are consecutive):
	// such a subject is left out, and its trace reports nothing there.
	FirstPods []uint32
}

// TraceClusterArg is the argument of a ClusterNetworkPolicy trace point: the rule's tier,
// direction and priority (18 bits), from which ClusterRuleObject names it.
func TraceClusterArg(tier ClusterTier, dir PolicyDirection, priority uint16) uint32 {
	return uint32(tier&1)<<17 | uint32(dir&1)<<16 | uint32(priority)
}

// ParseTraceClusterArg is TraceClusterArg's inverse: the cookie object (ClusterRuleObject) of the
// rule.
func ParseTraceClusterArg(arg uint32) uint64 {
	return ClusterRuleObject(ClusterTier(arg>>17&1), PolicyDirection(arg>>16&1), uint16(arg))
}

// TraceCookieObject is the cookie object of a trace flow.
func TraceCookieObject(tag uint8, point TracePoint, arg uint32) uint64 {
	return uint64(tag&0x3f)<<32 | uint64(point)<<24 | uint64(arg&0xffffff)
}

// ParseTraceCookieObject is TraceCookieObject's inverse.
func ParseTraceCookieObject(object uint64) (tag uint8, point TracePoint, arg uint32) {
	return uint8(object>>32) & 0x3f, TracePoint(object >> 24), uint32(object & 0xffffff)
}

// traceMatch matches the trace's packet: IPv4, the DSCP, the protocol, the source and the source
// port (or an ICMP echo request).
func (t Trace) traceMatch(extra ...openflow.MatchField) []openflow.MatchField {
	m := []openflow.MatchField{openflow.IPv4(), openflow.IPProto(t.Protocol), openflow.IPDSCP(t.Tag), hostPrefix(t.Src, openflow.NwSrc)}
	switch t.Protocol {
	case openflow.ProtoTCP, openflow.ProtoUDP:
		m = append(m, openflow.TpSrc(t.Protocol, t.SrcPort))
	case openflow.ProtoICMP:
		m = append(m, openflow.ICMPType(8))
	}
	return append(m, extra...)
}

// tagged matches the packets that carry the trace's tag in traceTagField and have each of clear
// (bits of reg7) clear: one match field, since OpenFlow refuses a match that names reg7 twice.
func (t Trace) tagged(clear ...RegField) openflow.MatchField {
	value := uint32(t.Tag&0x3f) << traceTagField.Start
	mask := fieldMask(traceTagField)
	for _, f := range clear {
		mask |= fieldMask(f)
	}
	return openflow.RegMasked(traceTagField.Reg, value, mask)
}

func fieldMask(f RegField) uint32 {
	return uint32((uint64(1)<<(f.End-f.Start+1) - 1) << f.Start)
}

// TraceFlows are the flows of one running trace on the node (CategoryTrace; each carries its own
// cookie object, TraceCookieObject). The NetworkPolicy ones name the node's own rules and isolated
// Pods; the forwarding ones the nodes of the trace's path as this node reaches them.
func (n Node) TraceFlows(t Trace, p TracePolicy) []openflow.Flow {
	if t.Tag == 0 || !t.Src.Is4() {
		return nil
	}
	toAgent := openflow.Output(openflow.PortController)
	f := func(point TracePoint, arg uint32, table uint8, priority uint16, m []openflow.MatchField, actions ...openflow.Action) openflow.Flow {
		fl := flow(table, priority, m, actions...)
		fl.Cookie = TraceCookieObject(t.Tag, point, arg)
		return fl
	}
	tagged := t.tagged()
	var out []openflow.Flow
	// The mark: a traced packet that arrived from another node carries the tag in traceTagField
	// before its first ct action (see traceTagField). Only arrivals from another node: a packet
	// from a Pod's port is the Pod's own traffic, whatever it carries. Routed (NoEncap), a peer's
	// Pods' packets arrive on the uplink, which sends them to the host (ConntrackStateTable), and
	// the host routes them back in through the gateway: they are marked there. A packet with the
	// source address of one of this node's own Pods (on the source's node) is no peer's and is
	// never marked.
	unmarked := regMatch(traceTagField, 0)
	if n.TunnelOFPort != 0 {
		out = append(out, f(TraceMark, FromTunnel, ConntrackTable, priorityTrace, t.traceMatch(openflow.InPort(n.TunnelOFPort), unmarked),
			loadReg(traceTagField, uint32(t.Tag)), openflow.Resubmit(ConntrackTable)))
	}
	if n.GatewayOFPort != 0 && !(n.PodCIDR.IsValid() && n.PodCIDR.Contains(t.Src)) {
		out = append(out, f(TraceMark, FromGateway, ConntrackTable, priorityTrace, t.traceMatch(openflow.InPort(n.GatewayOFPort), unmarked),
			loadReg(traceTagField, uint32(t.Tag)), openflow.Resubmit(ConntrackTable)))
	}
	// Service DNAT without state: the trace's own flow, above the Service port's, DNATs to the
	// endpoint the agent picked with set_field (Windows rewrites IPv4 addresses and TCP/UDP
	// ports) and goes where the group's buckets go; a port without endpoint consumes it.
	if s := t.Service; s != nil && s.Dst.Addr().Is4() && (t.Protocol == openflow.ProtoTCP || t.Protocol == openflow.ProtoUDP) {
		m := t.traceMatch(tagged, openflow.NwDst(netip.PrefixFrom(s.Dst.Addr(), 32)), openflow.TpDst(t.Protocol, s.Dst.Port()))
		if s.Endpoint.Addr().Is4() {
			out = append(out, f(TraceServiceDNATPick, 0, DNATTable, priorityTrace, m,
				openflow.SetNwDst(s.Endpoint.Addr()), openflow.SetTpDst(t.Protocol, s.Endpoint.Port()), openflow.GotoTable(EndpointDNATTable)))
		} else {
			out = append(out, f(TraceServiceNoEndpoint, 0, DNATTable, priorityTrace, m, toAgent))
		}
	}
	// Service DNAT: the connections a Service DNATed arrive here; report and go on.
	out = append(out, f(TraceServiceDNAT, 0, EndpointDNATTable, priorityTrace, t.traceMatch(t.tagged(traceReportedDNAT)),
		loadReg(traceReportedDNAT, 1), toAgent, openflow.Resubmit(EndpointDNATTable)))
	// NetworkPolicy: the rule that admitted (above its conj_id flow, which the conjunction's
	// lookup finds like any other flow), the default drop of an isolated Pod.
	for _, id := range p.EgressRules {
		out = append(out, f(TraceEgressRule, id, EgressRuleTable, priorityTraceRule, t.traceMatch(tagged, openflow.ConjID(id)),
			toAgent, openflow.GotoTable(EgressMetricTable)))
	}
	for _, id := range p.IngressRules {
		out = append(out, f(TraceIngressRule, id, IngressRuleTable, priorityTraceRule, t.traceMatch(tagged, openflow.ConjID(id)),
			toAgent, openflow.GotoTable(IngressMetricTable)))
	}
	for _, port := range p.EgressIsolated {
		out = append(out, f(TraceEgressDrop, port, EgressDefaultTable, priorityNormal+1, t.traceMatch(tagged, openflow.InPort(port)), toAgent))
	}
	for _, port := range p.IngressIsolated {
		out = append(out, f(TraceIngressDrop, port, IngressDefaultTable, priorityNormal+1, t.traceMatch(tagged, regMatch(TargetOFPortField, port)), toAgent))
	}
	// ClusterNetworkPolicy: the rule that decided, above the band of the rules' priorities (below
	// the Admin tier's pending drops, established-connection skips and own-node exemptions, which
	// a traced packet meets as any packet does).
	out = append(out, n.traceClusterFlows(t, p.ClusterRules)...)
	// Forwarding, at ConntrackCommitTable, before the commit: out to an external address from an
	// Egress's IP (consumed before it is SNATed and committed) or through the tunnel to the holder of
	// the Pod's Egress, a node of the trace's path (report, and go on past the commit): priorityTrace+3;
	// through the tunnel or the uplink to a node of the trace's path (report, and go on past the
	// commit: priorityTrace+2); out to an external address (consumed before it is SNATed and
	// committed: priorityTrace+1); through the tunnel or the uplink anywhere else (consumed), to the
	// host (consumed: priorityTrace); to a local Pod or nowhere (consumed: priorityTrace-1).
	past := openflow.GotoTable(L2ForwardingOutTable)
	for _, id := range p.Egresses {
		out = append(out, f(TraceEgress, id, ConntrackCommitTable, priorityTrace+3, t.traceMatch(tagged, regMatch(EgressField, id)), toAgent))
	}
	if n.TunnelOFPort != 0 {
		for _, peer := range t.Path {
			if peer.NodeIP.Is4() {
				out = append(out, f(TraceEgressRelay, 0, ConntrackCommitTable, priorityTrace+3,
					t.traceMatch(tagged, regMatch(EgressRelayField, 1),
						regMatch(TargetOFPortField, n.TunnelOFPort), openflow.TunDst(peer.NodeIP)), toAgent, past))
			}
		}
	}
	out = append(out, f(TraceExternal, 0, ConntrackCommitTable, priorityTrace+1, t.traceMatch(tagged, regMatch(SNATRequiredField, 1)), toAgent))
	if n.TunnelOFPort != 0 {
		tunnel := regMatch(TargetOFPortField, n.TunnelOFPort)
		for _, peer := range t.Path {
			if peer.NodeIP.Is4() {
				out = append(out, f(TraceTunnel, 0, ConntrackCommitTable, priorityTrace+2, t.traceMatch(tagged, tunnel, openflow.TunDst(peer.NodeIP)), toAgent, past))
			}
		}
		out = append(out, f(TraceTunnelLeaves, 0, ConntrackCommitTable, priorityTrace, t.traceMatch(tagged, tunnel), toAgent))
	}
	if n.UplinkOFPort != 0 {
		uplink := regMatch(TargetOFPortField, n.UplinkOFPort)
		for _, peer := range t.Path {
			for _, cidr := range peer.CIDRs {
				if cidr.Addr().Is4() {
					out = append(out, f(TraceUplink, 0, ConntrackCommitTable, priorityTrace+2, t.traceMatch(tagged, uplink, openflow.NwDst(cidr)), toAgent, past))
				}
			}
		}
		out = append(out, f(TraceUplinkLeaves, 0, ConntrackCommitTable, priorityTrace, t.traceMatch(tagged, uplink), toAgent))
	}
	if n.GatewayOFPort != 0 {
		out = append(out, f(TraceHost, 0, ConntrackCommitTable, priorityTrace, t.traceMatch(tagged, regMatch(TargetOFPortField, n.GatewayOFPort)), toAgent))
	}
	out = append(out, f(TraceDeliver, 0, ConntrackCommitTable, priorityTrace-1, t.traceMatch(tagged), toAgent))
	return out
}

// priorityTraceCluster is the priority of the ClusterNetworkPolicy trace flows: above every rule of
// the tier's table (ClusterPriorityHighest), below priorityClusterExempt.
const priorityTraceCluster = ClusterPriorityHighest + 1

// traceClusterFlows are the trace flows of the node's ClusterNetworkPolicy rules. A rule's part
// with a conjunction is reported by a flow that matches its conj_id and the trace (the conj_id
// lookup follows the conjunction that decided, like the NetworkPolicy rules' trace flows); a rule
// without one by a flow per subject it is the first rule of (TraceClusterRule.FirstPods). Each
// reports (controller id 0, the rule in its cookie) and then does what the rule does, without the
// audit's packet-in and without loading the rule's counter id: the traced packet is no connection,
// neither logged nor counted.
func (n Node) traceClusterFlows(t Trace, rules []TraceClusterRule) []openflow.Flow {
	var out []openflow.Flow
	for _, r := range rules {
		table := clusterTable(r.Tier, r.Direction)
		point, next := TraceClusterDeny, []openflow.Action(nil)
		metric, networkPolicy := IngressMetricTable, IngressPeerClassTable
		if r.Direction == PolicyEgress {
			metric, networkPolicy = EgressMetricTable, EgressPeerClassTable
		}
		switch {
		case r.Action == ClusterAccept:
			point, next = TraceClusterAccept, []openflow.Action{openflow.GotoTable(metric)}
		case r.Action == ClusterPass && r.Tier == AdminTier:
			point, next = TraceClusterPass, []openflow.Action{openflow.GotoTable(networkPolicy)}
		case r.Action == ClusterPass:
			point, next = TraceClusterPass, []openflow.Action{openflow.GotoTable(metric)}
		}
		actions := append([]openflow.Action{openflow.Output(openflow.PortController)}, next...)
		cookie := TraceCookieObject(t.Tag, point, TraceClusterArg(r.Tier, r.Direction, r.Priority))
		add := func(m []openflow.MatchField) {
			f := flow(table, priorityTraceCluster, m, actions...)
			f.Cookie = cookie
			out = append(out, f)
		}
		tagged := t.tagged()
		for _, id := range r.ConjIDs {
			add(t.traceMatch(tagged, openflow.ConjID(id)))
		}
		for _, port := range r.FirstPods {
			if r.Direction == PolicyEgress {
				add(t.traceMatch(tagged, openflow.InPort(port)))
			} else {
				add(t.traceMatch(tagged, regMatch(TargetOFPortField, port)))
			}
		}
	}
	return out
}

// TracePacketOut is how the source node's agent injects a trace's packet: as if the source Pod
// sent it, in_port its port (never CONTROLLER: OVS's Windows datapath crashes the host on a
// packet-out from CONTROLLER before OVS 3.6), through the whole pipeline from the classifier, with
// the trace's tag in traceTagField (no datapath flow cached for real traffic carries it).
func TracePacketOut(podPort uint32, tag uint8) PacketOut {
	return PacketOut{InPort: podPort, Actions: []openflow.Action{loadReg(traceTagField, uint32(tag&0x3f)), openflow.Resubmit(ClassifierTable)}}
}
