package pipeline

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/winnet-io/winnet/internal/ovs/openflow"
)

// ServicePort is one port of one Service, for one IP family, as the pipeline realises it.
type ServicePort struct {
	// ClusterIP is the Service's virtual IP; the zero Addr when only the NodePort is served.
	ClusterIP netip.Addr
	// Protocol is openflow.ProtoTCP or openflow.ProtoUDP.
	Protocol uint8
	Port     uint16
	// NodePort is the port on NodeIPs; 0 for none.
	NodePort uint16
	// NodeIPs are the addresses of this node the NodePort is served on.
	NodeIPs []netip.Addr
	// ExternalIPs (spec.externalIPs) and LoadBalancerIPs (status.loadBalancer.ingress[].ip) are
	// served on Port like the ClusterIP, to clients from outside as well.
	ExternalIPs, LoadBalancerIPs []netip.Addr
	// SourceRanges, when not empty, are the only clients LoadBalancerIPs answer
	// (loadBalancerSourceRanges); connections from elsewhere are dropped, as kube-proxy does.
	SourceRanges []netip.Prefix
	// ClusterGroup is the select group for Pods and the host; ExternalGroup (used when the port
	// has a NodePort, external IPs or load balancer IPs) the one for clients that came in on the
	// uplink.
	ClusterGroup, ExternalGroup uint32
	// HostGroup, when not 0 and the port has a NodePort, is the select group for the host's own
	// connections to the NodePort, which the host NATed to NodePortVirtualIP (same port): balanced
	// over the cluster group's endpoints, SNATed to the gateway IP so that replies come back
	// through the switch, and sent back to the host on the gateway.
	HostGroup uint32
	// Endpoints are the endpoints new connections are balanced over. With none at all, new
	// connections are sent to the agent, which refuses them (RejectPacketOut); with none local
	// under a traffic policy Local, they are dropped (an empty group), as kube-proxy does.
	Endpoints []Endpoint
	// InternalLocal (internalTrafficPolicy Local) balances connections from Pods and the host over
	// local endpoints only; ExternalLocal (externalTrafficPolicy Local) those of clients from
	// outside, which then keep their source address. With no local endpoint they are dropped.
	InternalLocal, ExternalLocal bool
	// AffinityTimeout, when not 0, is the session affinity ClientIP timeout in seconds: a client's
	// new connections go to the endpoint its first one was balanced to, until the timeout after
	// that choice (the learned flow's hard_timeout; OpenFlow caps it at 65535 s).
	AffinityTimeout uint16
	// UDPZone, when not 0, is the conntrack zone a UDP port DNATs in, its own (from the budget
	// ServiceUDPZoneFirst..ServiceUDPZoneLast), so that the agent can flush it whole when one of the
	// port's endpoints goes (ZoneFlush); 0 DNATs in ConntrackZone, as TCP ports do.
	UDPZone uint16
}

// dnatZone is the conntrack zone the port's connections are DNATed in.
func (sp ServicePort) dnatZone() uint16 {
	if sp.Protocol == openflow.ProtoUDP && sp.UDPZone != 0 {
		return sp.UDPZone
	}
	return ConntrackZone
}

// zoneOwner names the port as the owner of its zone, for CheckWindows.
func (sp ServicePort) zoneOwner() string {
	if sp.dnatZone() == ConntrackZone {
		return ServicesNATOwner
	}
	return fmt.Sprintf("Service port %s:%d/UDP", sp.ClusterIP, sp.Port)
}

// ServicesNATOwner is the owner, for CheckWindows, of the Services' NAT in ConntrackZone (TCP ports
// and UDP ports without a zone of their own) and in ServiceSNATZone.
const ServicesNATOwner = "services"

// NATZones are the conntrack zones the port NATs in, by owner: its DNAT zone, and ServiceSNATZone.
func (sp ServicePort) NATZones() map[uint16][]string {
	return map[uint16][]string{sp.dnatZone(): {sp.zoneOwner()}, ServiceSNATZone: {ServicesNATOwner}}
}

// ZoneFlush is the conntrack flush of a UDP port with a zone of its own, which the agent sends when
// one of the port's endpoints goes, when the port goes, and when it gives the zone to the port:
// the whole zone, never one connection (on Windows a 5-tuple flush also wipes every NAT entry of
// its zone and keeps their connections, so that their replies are no longer un-NATed: only a
// whole-zone flush is clean, see CheckWindows). The port's clients simply start again: their next
// packet is a new connection, balanced over the endpoints there are. ok is false for a port
// without a zone of its own.
func (sp ServicePort) ZoneFlush() (_ ConntrackFlush, ok bool) {
	if sp.dnatZone() == ConntrackZone {
		return ConntrackFlush{}, false
	}
	return ConntrackFlush{Owner: sp.zoneOwner(), Zone: sp.UDPZone}, true
}

// hasHost tells whether the host's own connections to the port's NodePort are served (HostGroup).
func (sp ServicePort) hasHost() bool {
	return sp.NodePort != 0 && sp.HostGroup != 0
}

// hasExternal tells whether the port is reached from outside the cluster too.
func (sp ServicePort) hasExternal() bool {
	return sp.NodePort != 0 || len(sp.ExternalIPs) > 0 || len(sp.LoadBalancerIPs) > 0
}

// endpoints are the endpoints of the cluster group (external false) or of the external one.
func (sp ServicePort) endpoints(external bool) []Endpoint {
	local := sp.InternalLocal
	if external {
		local = sp.ExternalLocal
	}
	if !local {
		return sp.Endpoints
	}
	var out []Endpoint
	for _, ep := range sp.Endpoints {
		if ep.Local {
			out = append(out, ep)
		}
	}
	return out
}

// Endpoint is one endpoint of a Service port: the address and the (resolved) target port.
type Endpoint struct {
	Addr netip.AddrPort
	// Local is true for an endpoint on this node.
	Local bool
}

// bucketWeight is every endpoint's weight.
const bucketWeight = 100

// ServiceBaseFlows are the flows every Service relies on:
//   - UnSNAT: replies to the gateway IP are un-SNATed in ServiceSNATZone before ConntrackZone
//     un-DNATs them;
//   - Service connections get the global virtual MAC once DNATed (EndpointDNAT) and when
//     established, so that L3Forwarding delivers them to local Pods (and the gateway) as it does
//     routed packets; egress policy sees them DNATed, with the endpoint as destination;
//   - replies of NodePort connections from the uplink leave on the uplink with the MACs the
//     request came with, kept in ct_label (the host never sees them: it would drop a packet from
//     its own address);
//   - Service connections are committed already (by the DNAT); once they got through
//     NetworkPolicy they are marked PolicyAdmittedCTMark, with the ids of the rules that admitted
//     them in ct_label (committed again in the same zone after the DNAT, as Antrea's rule tables
//     do: admit), and the ones marked for it are then SNATed to the gateway IP in ServiceSNATZone,
//     in both directions' request side;
//   - replies of the host's connections to its own NodePorts go back to it on the gateway;
//   - ARP for ServiceNextHop, the next hop of the host's ClusterIP and NodePortVirtualIP routes,
//     is answered;
//   - hairpin connections (HairpinFlows) are output on the port they came in on.
func (n Node) ServiceBaseFlows() []openflow.Flow {
	var out []openflow.Flow
	gw := openflow.NwDst(netip.PrefixFrom(n.GatewayIP, 32))
	for _, proto := range trackedProtocols {
		out = append(out, flow(ConntrackTable, priorityHigh, match(openflow.IPv4(), openflow.IPProto(proto), openflow.CTState(0, openflow.CTTrk), gw),
			openflow.CT(openflow.CTAction{Table: ptr(ConntrackTable), Zone: ServiceSNATZone, NAT: true})))
	}
	// A reply un-SNATed from a hairpin connection (HairpinFlows) is output on the port it came in on.
	out = append(out,
		flow(ConntrackTable, priorityTop, match(openflow.IPv4(), openflow.CTState(openflow.CTTrk, 0), openflow.CTMark(HairpinCTMark, HairpinCTMark)),
			loadReg(HairpinField, 1), openflow.CT(openflow.CTAction{Table: ptr(ConntrackStateTable), Zone: ConntrackZone, NAT: true})),
		flow(L2ForwardingOutTable, priorityHigh, match(regMatch(HairpinField, 1)), openflow.Output(openflow.PortInPort)),
	)
	out = append(out,
		// (A local Pod with an incarnation sends them through a flow of its own, which checks the
		// connection's; the rest is a stale connection's, dropped: incarnation.go.)
		flow(ConntrackStateTable, priorityTop, match(openflow.IPv4(), openflow.CTState(openflow.CTRpl|openflow.CTTrk, openflow.CTNew), openflow.CTMark(ServiceExternalCTMark, ServiceExternalCTMark),
			regMatch(SrcIncarnationField, 0)),
			n.externalReplyActions()...),
		flow(ConntrackStateTable, priorityStaleReply, match(openflow.IPv4(), openflow.CTState(openflow.CTRpl|openflow.CTTrk, openflow.CTNew), openflow.CTMark(ServiceExternalCTMark, ServiceExternalCTMark)),
			openflow.Drop()),
		// Replies of the host's connections to its own NodePorts (hostGroup), un-NATed, go back to
		// the host on the gateway, where the host's own NAT turns them back into replies from its
		// address.
		flow(ConntrackStateTable, priorityTop, match(openflow.IPv4(), openflow.CTState(openflow.CTRpl|openflow.CTTrk, openflow.CTNew), openflow.CTMark(HostNodePortCTMark, HostNodePortCTMark)),
			openflow.SetEthSrc(GlobalVirtualMAC), openflow.SetEthDst(n.GatewayMAC), openflow.Output(n.GatewayOFPort)),
		flow(EndpointDNATTable, priorityMiss, nil, openflow.SetEthDst(GlobalVirtualMAC), openflow.GotoTable(AdminEgressRuleTable)),
		flow(ConntrackStateTable, priorityNormal, match(openflow.IPv4(), openflow.CTState(openflow.CTTrk, openflow.CTNew), openflow.CTMark(ServiceCTMark, ServiceCTMark)),
			openflow.SetEthDst(GlobalVirtualMAC), openflow.GotoTable(DNATTable)),
		// A new connection SNATed in ServiceSNATZone is admitted in ConntrackZone first (marked,
		// its rules' ids in ct_label: its packets pass the metric tables tracked there), then
		// SNATed; one from the uplink keeps its MACs where the egress id would go.
		flow(ConntrackCommitTable, priorityTop, match(openflow.IPv4(), openflow.CTState(openflow.CTNew|openflow.CTTrk, 0), regMatch(ServiceSNATField, 1),
			openflow.CTMark(0, ServiceExternalCTMark)),
			admit(ConntrackZone, false), openflow.CT(openflow.CTAction{Commit: true, Table: ptr(L2ForwardingOutTable), Zone: ServiceSNATZone, SNAT: n.GatewayIP})),
		flow(ConntrackCommitTable, priorityTop, match(openflow.IPv4(), openflow.CTState(openflow.CTNew|openflow.CTTrk, 0), regMatch(ServiceSNATField, 1),
			openflow.CTMark(ServiceExternalCTMark, ServiceExternalCTMark)),
			admit(ConntrackZone, true), openflow.CT(openflow.CTAction{Commit: true, Table: ptr(L2ForwardingOutTable), Zone: ServiceSNATZone, SNAT: n.GatewayIP})),
		flow(ConntrackCommitTable, priorityTop, match(openflow.IPv4(), openflow.CTState(openflow.CTTrk, openflow.CTNew|openflow.CTRpl), openflow.CTMark(ServiceSNATCTMark, ServiceSNATCTMark)),
			openflow.CT(openflow.CTAction{Table: ptr(L2ForwardingOutTable), Zone: ServiceSNATZone, NAT: true})),
		flow(ConntrackCommitTable, priorityHigh, match(openflow.IPv4(), openflow.CTState(openflow.CTTrk, openflow.CTRpl), openflow.CTMark(ServiceCTMark, ServiceCTMark|PolicyAdmittedCTMark)),
			openflow.CT(openflow.CTAction{Commit: true, Table: ptr(L2ForwardingOutTable), Zone: ConntrackZone, Exec: admitExec(false)})),
		// A NodePort connection from the uplink keeps MACs in ct_label where the egress rule's id
		// would go: its ingress rule's alone (it has no egress rule).
		flow(ConntrackCommitTable, priorityHigh+1, match(openflow.IPv4(), openflow.CTState(openflow.CTTrk, openflow.CTRpl),
			openflow.CTMark(ServiceCTMark|ServiceExternalCTMark, ServiceCTMark|ServiceExternalCTMark|PolicyAdmittedCTMark)),
			openflow.CT(openflow.CTAction{Commit: true, Table: ptr(L2ForwardingOutTable), Zone: ConntrackZone, Exec: admitExec(true)})),
		flow(ARPResponderTable, priorityNormal, match(openflow.ARP(), openflow.ARPTPA(ServiceNextHop), openflow.ARPOp(1)),
			openflow.Move(openflow.FieldEthSrc, openflow.FieldEthDst), openflow.SetEthSrc(GlobalVirtualMAC), openflow.SetARPOp(2),
			openflow.Move(openflow.FieldARPSha, openflow.FieldARPTha), openflow.SetARPSha(GlobalVirtualMAC),
			openflow.Move(openflow.FieldARPSpa, openflow.FieldARPTpa), openflow.SetARPSpa(ServiceNextHop),
			openflow.Output(openflow.PortInPort)),
	)
	return out
}

// ServiceFlows are the groups and flows of one Service port. New connections to the ClusterIP, or
// to another address of the port from a Pod or the host, go to ClusterGroup; new connections from
// the uplink to a NodePort, an external IP or a load balancer IP go to ExternalGroup, whose
// buckets also remember the client's MACs and, for endpoints on other nodes, have the connection
// SNATed (externalTrafficPolicy Cluster) so that replies come back through this node. Groups must
// be installed before the flows. Flows shared by Service ports (HairpinFlows) are not included.
func (n Node) ServiceFlows(sp ServicePort) ([]openflow.Group, []openflow.Flow) {
	if sp.Protocol != openflow.ProtoTCP && sp.Protocol != openflow.ProtoUDP {
		return nil, nil
	}
	groups := []openflow.Group{n.serviceGroup(sp, false)}
	if sp.hasExternal() {
		groups = append(groups, n.serviceGroup(sp, true))
	}
	if sp.hasHost() {
		groups = append(groups, n.hostGroup(sp))
	}
	var flows []openflow.Flow
	for _, t := range sp.targets() {
		if t.fromUplink {
			// Host traffic from the uplink goes to the host unless a Service address claims it.
			flows = append(flows, flow(ConntrackStateTable, priorityNormal, t.match, openflow.GotoTable(DNATTable)))
			continue
		}
		switch {
		case t.drop:
			flows = append(flows, flow(DNATTable, t.priority, t.match, openflow.Drop()))
		case len(sp.Endpoints) == 0:
			// No endpoint at all: the agent refuses the connection (RejectPacketOut).
			flows = append(flows, flow(DNATTable, t.priority, t.match, openflow.Output(openflow.PortController)))
		case sp.AffinityTimeout != 0 && !t.noAffinity:
			flows = append(flows,
				flow(DNATTable, t.priority, t.match, openflow.Resubmit(AffinityTable), openflow.GotoTable(AffinityDNATTable)),
				flow(AffinityDNATTable, t.priority, t.match, openflow.ToGroup(t.group)))
		default:
			flows = append(flows, flow(DNATTable, t.priority, t.match, openflow.ToGroup(t.group)))
		}
	}
	if sp.AffinityTimeout != 0 && len(sp.Endpoints) > 0 {
		flows = append(flows, n.affinityHitFlows(sp)...)
		flows = append(flows, sp.affinityLearnFlow())
	}
	if sp.dnatZone() != ConntrackZone {
		flows = append(flows, n.zoneFlows(sp)...)
	}
	return groups, flows
}

// zoneFlows are the flows of a UDP port that DNATs in a zone of its own (UDPZone, Z):
//   - Conntrack: the port's packets, to every address of the port, are tracked (and DNATed once
//     committed) in Z instead of ConntrackZone;
//   - ConntrackCommit: a new connection, once NetworkPolicy let it through, is recorded in
//     ConntrackZone as the endpoint sees it (after the DNAT, before any Service SNAT; no NAT) with
//     Z in ct_mark[16..31] (ServiceZoneCTMarkMask), in the flow that ends it as other Service
//     connections end (marked PolicyAdmittedCTMark in Z, then the record; for clients from
//     outside reaching another node's endpoint, the host's own NodePort connections and hairpin,
//     marked in Z, the record, then the SNAT in ServiceSNATZone). The commits are in one flow
//     because OVS clears the packet's conntrack fields after a ct() that does not recirculate: no
//     later flow could match them;
//   - ConntrackState: a reply, which comes from the endpoint (and the endpoint may serve several
//     UDP ports), is tracked in ConntrackZone first like every packet (after its un-SNAT, if
//     any); when the record there names Z, it goes through Z too, which un-DNATs it.
//
// So the port's connections live in Z (their NAT) and in ConntrackZone (a record without NAT):
// flushing Z re-balances them, and a stale record only sends a reply to Z, where it finds nothing.
// A packet takes at most 3 conntrack passes that recirculate, as on other Service paths (the
// Windows datapath nests 4).
func (n Node) zoneFlows(sp ServicePort) []openflow.Flow {
	z := sp.UDPZone
	udp := func(m ...openflow.MatchField) []openflow.MatchField {
		return append(match(openflow.IPv4(), openflow.IPProto(openflow.ProtoUDP)), m...)
	}
	var out []openflow.Flow
	for _, dst := range sp.addresses() {
		out = append(out, flow(ConntrackTable, priorityServiceZone,
			udp(openflow.CTState(0, openflow.CTTrk), openflow.NwDst(netip.PrefixFrom(dst.Addr(), 32)), openflow.TpDst(openflow.ProtoUDP, dst.Port())),
			openflow.CT(openflow.CTAction{Table: ptr(ConntrackStateTable), Zone: z, NAT: true})))
	}
	mark := uint32(z) << ServiceZoneCTMarkShift
	record := openflow.CT(openflow.CTAction{Commit: true, Zone: ConntrackZone, Exec: []openflow.Action{openflow.SetCTMark(mark, ServiceZoneCTMarkMask)}})
	// The admission keeps the ids of the rules that admitted the connection in Z's ct_label
	// (counters.go): the connection's packets are tracked in Z when they pass the metric tables.
	// So do the Service SNAT and hairpin flows, before their record and SNAT.
	admitOut := func(external bool) openflow.Action {
		return openflow.CT(openflow.CTAction{Commit: true, Table: ptr(L2ForwardingOutTable), Zone: z, Exec: admitExec(external)})
	}
	inZone := openflow.CTZone(z)
	notAdmitted := openflow.CTMark(ServiceCTMark, ServiceCTMark|PolicyAdmittedCTMark)
	out = append(out,
		flow(ConntrackStateTable, priorityServiceZone, udp(openflow.CTState(openflow.CTRpl|openflow.CTTrk, 0), openflow.CTZone(ConntrackZone), openflow.CTMark(mark, ServiceZoneCTMarkMask)),
			openflow.CT(openflow.CTAction{Table: ptr(ConntrackStateTable), Zone: z, NAT: true})),
		// The record comes after the admission here: a commit in Z after one in ConntrackZone would
		// be a new connection of Z (the packet's tuple is the DNATed one), not this one.
		flow(ConntrackCommitTable, priorityServiceZone, udp(openflow.CTState(openflow.CTNew|openflow.CTTrk, openflow.CTRpl), inZone, notAdmitted),
			openflow.CT(openflow.CTAction{Commit: true, Zone: z, Exec: admitExec(false)}),
			openflow.CT(openflow.CTAction{Commit: true, Table: ptr(L2ForwardingOutTable), Zone: ConntrackZone, Exec: []openflow.Action{openflow.SetCTMark(mark, ServiceZoneCTMarkMask)}})),
		flow(ConntrackCommitTable, priorityServiceZone, udp(openflow.CTState(openflow.CTTrk, openflow.CTNew|openflow.CTRpl), inZone, notAdmitted),
			admitOut(false)),
	)
	// Service SNAT and hairpin, as ServiceBaseFlows and HairpinFlows do them: admitted in Z, then
	// the record, then the SNAT.
	for _, external := range []bool{false, true} {
		kind := openflow.CTMark(0, ServiceExternalCTMark)
		if external {
			kind = openflow.CTMark(ServiceExternalCTMark, ServiceExternalCTMark)
		}
		out = append(out, flow(ConntrackCommitTable, priorityServiceZoneSNAT, udp(openflow.CTState(openflow.CTNew|openflow.CTTrk, 0), inZone, regMatch(ServiceSNATField, 1), kind),
			admit(z, external), record, openflow.CT(openflow.CTAction{Commit: true, Table: ptr(L2ForwardingOutTable), Zone: ServiceSNATZone, SNAT: n.GatewayIP})))
	}
	if sp.hasExternal() {
		external := openflow.CTMark(ServiceCTMark|ServiceExternalCTMark, ServiceCTMark|ServiceExternalCTMark|PolicyAdmittedCTMark)
		out = append(out,
			flow(ConntrackCommitTable, priorityServiceZone+1, udp(openflow.CTState(openflow.CTNew|openflow.CTTrk, openflow.CTRpl), inZone, external),
				openflow.CT(openflow.CTAction{Commit: true, Zone: z, Exec: admitExec(true)}),
				openflow.CT(openflow.CTAction{Commit: true, Table: ptr(L2ForwardingOutTable), Zone: ConntrackZone, Exec: []openflow.Action{openflow.SetCTMark(mark, ServiceZoneCTMarkMask)}})),
			flow(ConntrackCommitTable, priorityServiceZone+1, udp(openflow.CTState(openflow.CTTrk, openflow.CTNew|openflow.CTRpl), inZone, external),
				admitOut(true)))
	}
	for _, ep := range sp.Endpoints {
		ip := ep.Addr.Addr()
		if !ep.Local || !ip.Is4() {
			continue
		}
		self := []openflow.MatchField{openflow.NwSrc(netip.PrefixFrom(ip, 32)), openflow.NwDst(netip.PrefixFrom(ip, 32)), openflow.CTMark(ServiceCTMark, ServiceCTMark)}
		out = append(out, flow(ConntrackCommitTable, priorityServiceZoneHairpin, udp(append([]openflow.MatchField{openflow.CTState(openflow.CTNew|openflow.CTTrk, 0), inZone}, self...)...),
			loadReg(HairpinField, 1), admit(z, false), record,
			openflow.CT(openflow.CTAction{Commit: true, Table: ptr(L2ForwardingOutTable), Zone: ServiceSNATZone, SNAT: n.GatewayIP,
				Exec: []openflow.Action{openflow.SetCTMark(HairpinCTMark, HairpinCTMark)}})))
	}
	return out
}

// addresses are the destinations the port is served on: the ClusterIP, the NodePort on every node
// address (and on NodePortVirtualIP for the host's own connections), the external and load
// balancer IPs (IPv4).
func (sp ServicePort) addresses() []netip.AddrPort {
	var out []netip.AddrPort
	add := func(ip netip.Addr, port uint16) {
		if ip.Is4() {
			out = append(out, netip.AddrPortFrom(ip, port))
		}
	}
	add(sp.ClusterIP, sp.Port)
	if sp.NodePort != 0 {
		for _, ip := range sp.NodeIPs {
			add(ip, sp.NodePort)
		}
	}
	if sp.hasHost() {
		add(NodePortVirtualIP, sp.NodePort)
	}
	for _, ip := range slices.Concat(sp.ExternalIPs, sp.LoadBalancerIPs) {
		add(ip, sp.Port)
	}
	return out
}

// affinityLearnFlow learns the endpoint a bucket of the port chose (in the affinity registers) for
// the client, the address it reached and the port, for AffinityTimeout seconds from now. Learning
// again for a client that has a learned flow only changes its actions, not its timeout, so the
// learned flows carry the port and the timeout in their cookie and go with the learning flow
// (delete_learned) when the port goes or its timeout changes.
func (sp ServicePort) affinityLearnFlow() openflow.Flow {
	dst := openflow.FieldTCPDst
	if sp.Protocol == openflow.ProtoUDP {
		dst = openflow.FieldUDPDst
	}
	var loads []openflow.LearnLoad
	for _, f := range []RegField{AffinityEndpointIPField, AffinityEndpointField, AffinityTimeoutField} {
		loads = append(loads, openflow.LearnLoad{Src: openflow.FieldReg(f.Reg), Dst: openflow.FieldReg(f.Reg)})
	}
	return flow(AffinityLearnTable, priorityNormal, match(openflow.IPv4(), openflow.IPProto(sp.Protocol), regMatch(AffinityPortField, sp.ClusterGroup)),
		openflow.Learn(openflow.LearnSpec{
			Table: AffinityTable, Priority: priorityNormal, HardTimeout: sp.AffinityTimeout,
			Cookie:        openflow.MakeCookie(0, CategoryAffinityLearned, uint64(sp.ClusterGroup)<<16|uint64(sp.AffinityTimeout)),
			DeleteLearned: true,
			EthType:       openflow.EthTypeIPv4, IPProto: sp.Protocol,
			Match: []openflow.Field{openflow.FieldIPSrc, openflow.FieldIPDst, dst},
			Loads: loads,
		}))
}

// RejectPacketOut is how the agent injects its refusal of a connection to a Service port without
// endpoints (a TCP RST or an ICMP port unreachable it built from the packet-in): from LOCAL, never
// from CONTROLLER (a packet-out from CONTROLLER crashes Windows hosts before OVS 3.6), output straight
// on the port the client's packet came in on, so that it never enters conntrack; the IN_PORT output
// when that port is LOCAL itself.
func RejectPacketOut(clientPort uint32) PacketOut {
	out := openflow.Output(clientPort)
	if clientPort == openflow.PortLocal {
		out = openflow.Output(openflow.PortInPort)
	}
	return PacketOut{InPort: openflow.PortLocal, Actions: []openflow.Action{out}}
}

// target is one way a Service port is reached: new connections matching match go to group, or
// are dropped; fromUplink targets are the ConntrackState flows that let connections from the
// uplink reach DNATTable at all.
type target struct {
	priority   uint16
	match      []openflow.MatchField
	group      uint32
	drop       bool
	fromUplink bool
	// noAffinity: new connections go to group even when the port has session affinity.
	noAffinity bool
}

// targets lists how the port is reached: its ClusterIP, its NodePort on every node address, its
// external IPs and its load balancer IPs (restricted to SourceRanges).
func (sp ServicePort) targets() []target {
	proto := openflow.IPProto(sp.Protocol)
	isNew := openflow.CTState(openflow.CTNew|openflow.CTTrk, 0)
	uplink := regMatch(PktSourceField, FromUplink)
	base := func(ip netip.Addr, port uint16, extra ...openflow.MatchField) []openflow.MatchField {
		return append(match(openflow.IPv4(), proto, isNew, openflow.NwDst(netip.PrefixFrom(ip, 32)), openflow.TpDst(sp.Protocol, port)), extra...)
	}
	var out []target
	if sp.ClusterIP.Is4() {
		out = append(out, target{priority: priorityNormal, match: base(sp.ClusterIP, sp.Port), group: sp.ClusterGroup})
	}
	// external adds the flows of an address reached from outside and from inside alike.
	external := func(ip netip.Addr, port uint16, ranges []netip.Prefix) {
		if !ip.Is4() {
			return
		}
		out = append(out, target{priority: priorityNormal, match: base(ip, port, uplink), fromUplink: true})
		if len(ranges) == 0 {
			out = append(out,
				target{priority: priorityHigh, match: base(ip, port, uplink), group: sp.ExternalGroup},
				target{priority: priorityNormal, match: base(ip, port), group: sp.ClusterGroup})
			return
		}
		for _, r := range ranges {
			if !r.Addr().Is4() {
				continue
			}
			src := openflow.NwSrc(r)
			out = append(out,
				target{priority: priorityTop, match: base(ip, port, uplink, src), group: sp.ExternalGroup},
				target{priority: priorityHigh, match: base(ip, port, src), group: sp.ClusterGroup})
		}
		out = append(out, target{priority: priorityNormal, match: base(ip, port), drop: true})
	}
	if sp.NodePort != 0 {
		for _, ip := range sp.NodeIPs {
			external(ip, sp.NodePort, nil)
		}
	}
	if sp.hasHost() {
		// The host's own connections, NATed by the host to NodePortVirtualIP, come from the gateway.
		// They skip session affinity: its hits DNAT as the cluster group does, without the SNAT.
		out = append(out, target{priority: priorityNormal, match: base(NodePortVirtualIP, sp.NodePort, regMatch(PktSourceField, FromGateway)),
			group: sp.HostGroup, noAffinity: true})
	}
	for _, ip := range sp.ExternalIPs {
		external(ip, sp.Port, nil)
	}
	for _, ip := range sp.LoadBalancerIPs {
		external(ip, sp.Port, sp.SourceRanges)
	}
	return out
}

// affinityValue is what a learned affinity flow loads into AffinityEndpointField for an endpoint:
// its port, and the Service port's cluster group, so that only this Service port's flows use it.
func affinityValue(sp ServicePort, ep Endpoint) uint32 {
	return sp.ClusterGroup<<16 | uint32(ep.Addr.Port())
}

// affinityHitFlows DNAT a new connection whose client AffinityTable remembered to the endpoint it
// remembered, as the bucket of that endpoint would (without learning again: the choice expires
// hard_timeout after it was made). An endpoint that is gone has no flow, nor has a choice learned
// under another timeout (session affinity changed), so those clients are balanced again and the
// new choice is learned, replacing the old one.
func (n Node) affinityHitFlows(sp ServicePort) []openflow.Flow {
	var out []openflow.Flow
	kinds := []bool{false}
	if sp.hasExternal() {
		kinds = append(kinds, true)
	}
	for _, external := range kinds {
		prio := priorityAffinityHit
		if external {
			prio = priorityAffinityHitExternal
		}
		for _, ep := range sp.endpoints(external) {
			if !ep.Addr.Addr().Is4() {
				continue
			}
			m := match(openflow.IPv4(), openflow.IPProto(sp.Protocol),
				regMatch(AffinityEndpointIPField, ipValue(ep.Addr.Addr())), regMatch(AffinityEndpointField, affinityValue(sp, ep)),
				regMatch(AffinityTimeoutField, uint32(sp.AffinityTimeout)))
			if external {
				m = append(m, regMatch(PktSourceField, FromUplink))
			}
			out = append(out, flow(AffinityDNATTable, prio, m, n.endpointActions(sp, ep, external, false)...))
		}
	}
	return out
}

// HairpinFlows let a Pod reach itself through a Service (one set per local endpoint address,
// shared by every Service port): its connection, DNATed back to its own address, is admitted in
// ConntrackZone (admit: its packets are counted there) and SNATed to the gateway IP in
// ServiceSNATZone (marked HairpinCTMark there) so that the Pod's answer goes to OVS rather than to
// itself, and both directions are output on the port they came in on, which OVS does only when
// told to (output:in_port). Replies are recognised by the mark of the un-SNAT pass
// (ServiceBaseFlows).
func (n Node) HairpinFlows(ip netip.Addr) []openflow.Flow {
	if !ip.Is4() {
		return nil
	}
	self := match(openflow.NwSrc(netip.PrefixFrom(ip, 32)), openflow.NwDst(netip.PrefixFrom(ip, 32)), openflow.CTMark(ServiceCTMark, ServiceCTMark))
	return []openflow.Flow{
		flow(ConntrackCommitTable, priorityHairpin, append(match(openflow.IPv4(), openflow.CTState(openflow.CTNew|openflow.CTTrk, 0)), self...),
			loadReg(HairpinField, 1), admit(ConntrackZone, false),
			openflow.CT(openflow.CTAction{Commit: true, Table: ptr(L2ForwardingOutTable), Zone: ServiceSNATZone, SNAT: n.GatewayIP,
				Exec: []openflow.Action{openflow.SetCTMark(HairpinCTMark, HairpinCTMark)}})),
		flow(ConntrackCommitTable, priorityHairpin, append(match(openflow.IPv4(), openflow.CTState(openflow.CTTrk, openflow.CTNew|openflow.CTRpl)), self...),
			loadReg(HairpinField, 1), openflow.CT(openflow.CTAction{Table: ptr(L2ForwardingOutTable), Zone: ServiceSNATZone, NAT: true})),
	}
}

// serviceGroup is the select group of a Service port, cluster or external: one bucket per
// endpoint, each committing the connection DNATed to its endpoint and going on to EndpointDNAT.
// The MACs the packet came with are still its own there, for ct_label.
func (n Node) serviceGroup(sp ServicePort, external bool) openflow.Group {
	g := openflow.Group{ID: sp.ClusterGroup}
	if external {
		g.ID = sp.ExternalGroup
	}
	for _, ep := range sp.endpoints(external) {
		if !ep.Addr.Addr().Is4() {
			continue
		}
		g.Buckets = append(g.Buckets, openflow.Bucket{Weight: bucketWeight, Actions: n.endpointActions(sp, ep, external, sp.AffinityTimeout != 0)})
	}
	return g
}

// hostGroup is the select group of the host's own connections to the port's NodePort (HostGroup):
// the cluster group's endpoints, each bucket committing the connection DNATed to its endpoint with
// HostNodePortCTMark and the Service SNAT to the gateway IP (ServiceSNATField, as NodePort
// connections from the uplink to other nodes' endpoints have it), whichever node the endpoint is
// on: the host's source is one of the node's addresses, to which neither a Pod's reply nor a
// remote node would route back through this switch, while the gateway IP is routed to it
// everywhere. The replies, un-SNATed and un-DNATed, go back out on the gateway (ServiceBaseFlows).
func (n Node) hostGroup(sp ServicePort) openflow.Group {
	g := openflow.Group{ID: sp.HostGroup}
	for _, ep := range sp.endpoints(false) {
		if !ep.Addr.Addr().Is4() {
			continue
		}
		g.Buckets = append(g.Buckets, openflow.Bucket{Weight: bucketWeight, Actions: []openflow.Action{
			serviceSNATLoad,
			openflow.CT(openflow.CTAction{Commit: true, Table: endpointDNATTable, Zone: sp.dnatZone(), DNAT: ep.Addr, Exec: hostNodePortExec}),
		}})
	}
	return g
}

// endpointActions DNAT a new connection to ep: committed in ConntrackZone with the Service marks
// (and, for clients from outside, their MACs in ct_label and Service SNAT when the endpoint is on
// another node), after learning the choice for session affinity when learn is set (the endpoint
// in the affinity registers, learned by AffinityLearnTable).
func (n Node) endpointActions(sp ServicePort, ep Endpoint, external, learn bool) []openflow.Action {
	var actions []openflow.Action
	if learn {
		actions = append(actions,
			loadReg(AffinityEndpointIPField, ipValue(ep.Addr.Addr())),
			loadReg(AffinityEndpointField, affinityValue(sp, ep)),
			loadReg(AffinityTimeoutField, uint32(sp.AffinityTimeout)),
			openflow.Resubmit(AffinityLearnTable))
	}
	exec := clusterExec
	switch {
	case external && !ep.Local:
		exec = externalSNATExec
		actions = append(actions, serviceSNATLoad)
	case external:
		exec = externalExec
	}
	return append(actions, openflow.CT(openflow.CTAction{Commit: true, Table: endpointDNATTable, Zone: sp.dnatZone(), DNAT: ep.Addr, Exec: exec}))
}

// The actions inside a Service bucket's commit: the Service marks and, for a client from outside,
// its MACs in ct_label. They are the same for every bucket of a kind, so they are made once and
// shared: a node with 10,000 Services of 5 endpoints holds 50,000 buckets or more (bench-scale,
// issue 64). Nothing changes an action once made, and each is a full slice (serviceExec), so that
// no append can write into it.
var (
	// clusterExec: a client of the node's or the cluster's.
	clusterExec = serviceExec(ServiceCTMark, false)
	// externalExec: a client from outside, to an endpoint on this node.
	externalExec = serviceExec(ServiceCTMark|ServiceExternalCTMark, true)
	// externalSNATExec: a client from outside, SNATed to an endpoint on another node.
	externalSNATExec = serviceExec(ServiceCTMark|ServiceExternalCTMark|ServiceSNATCTMark, true)
	// hostNodePortExec: the host's own connection to a NodePort (hostGroup).
	hostNodePortExec = serviceExec(ServiceCTMark|ServiceSNATCTMark|HostNodePortCTMark, false)
)

// serviceExec sets mark in ct_mark and, with macs, keeps the packet's MACs in ct_label; the slice
// is full (len == cap).
func serviceExec(mark uint32, macs bool) []openflow.Action {
	exec := []openflow.Action{openflow.SetCTMark(mark, mark)}
	if macs {
		exec = append(exec, openflow.MoveBits(openflow.FieldEthSrc, 0, openflow.FieldCTLabel, 0, 48),
			openflow.MoveBits(openflow.FieldEthDst, 0, openflow.FieldCTLabel, 48, 48))
	}
	return exec[:len(exec):len(exec)]
}

// endpointDNATTable is the recirculation table of the endpoints' commits, one pointer for all.
var endpointDNATTable = ptr(EndpointDNATTable)

// serviceSNATLoad marks a connection for the Service SNAT (ServiceSNATField), made once.
var serviceSNATLoad = loadReg(ServiceSNATField, 1)

// externalReplyActions send a reply of a NodePort connection from the uplink back out of it, with
// the MACs its request came with (ct_label).
func (n Node) externalReplyActions() []openflow.Action {
	label := openflow.FieldCTLabel
	return []openflow.Action{openflow.MoveBits(label, 0, openflow.FieldEthDst, 0, 48), openflow.MoveBits(label, 48, openflow.FieldEthSrc, 0, 48),
		openflow.Output(n.UplinkOFPort)}
}

// admitExec are the actions, inside the commit of a Service connection that NetworkPolicy let
// through, that mark it PolicyAdmittedCTMark and keep the ids of the rules that admitted it in
// ct_label (counters.go). A connection from the uplink (ServiceExternalCTMark) keeps MACs where the
// egress id would go: its ingress rule's alone (it has no egress rule).
func admitExec(external bool) []openflow.Action {
	mark := openflow.SetCTMark(PolicyAdmittedCTMark, PolicyAdmittedCTMark)
	if external {
		return append([]openflow.Action{mark}, commitNewExternal()...)
	}
	return append([]openflow.Action{mark}, commitNew()...)
}

// admit commits a new Service connection, in the zone it is DNATed in, as admitExec marks it,
// without recirculating: the flows that SNAT a connection in ServiceSNATZone (Service SNAT,
// hairpin) admit it this way first, since its packets pass the metric tables tracked in the DNAT
// zone, whose ct_label must name its rules for its later packets to be counted.
func admit(zone uint16, external bool) openflow.Action {
	return openflow.CT(openflow.CTAction{Commit: true, Zone: zone, Exec: admitExec(external)})
}

func ipValue(ip netip.Addr) uint32 {
	b := ip.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}
