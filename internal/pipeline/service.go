package pipeline

import (
	"net/netip"

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
	// ClusterGroup is the select group for Pods and the host; ExternalGroup (used when NodePort is
	// set) the one for clients that came in on the uplink.
	ClusterGroup, ExternalGroup uint32
	// Endpoints are the endpoints new connections are balanced over; none drops them.
	Endpoints []Endpoint
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
//   - Service connections are committed already (by the DNAT), the ones marked for it are SNATed
//     to the gateway IP in ServiceSNATZone, in both directions' request side; the others are
//     marked PolicyAdmittedCTMark once they got through NetworkPolicy (committed again in the
//     same zone after the DNAT, as Antrea's rule tables do);
//   - ARP for ServiceNextHop, the next hop of the host's ClusterIP routes, is answered.
func (n Node) ServiceBaseFlows() []openflow.Flow {
	var out []openflow.Flow
	gw := openflow.NwDst(netip.PrefixFrom(n.GatewayIP, 32))
	for _, proto := range trackedProtocols {
		out = append(out, flow(ConntrackTable, priorityHigh, match(openflow.IPv4(), openflow.IPProto(proto), openflow.CTState(0, openflow.CTTrk), gw),
			openflow.CT(openflow.CTAction{Table: ptr(ConntrackTable), Zone: ServiceSNATZone, NAT: true})))
	}
	label := openflow.FieldCTLabel
	out = append(out,
		flow(ConntrackStateTable, priorityTop, match(openflow.IPv4(), openflow.CTState(openflow.CTRpl|openflow.CTTrk, openflow.CTNew), openflow.CTMark(ServiceExternalCTMark, ServiceExternalCTMark)),
			openflow.MoveBits(label, 0, openflow.FieldEthDst, 0, 48), openflow.MoveBits(label, 48, openflow.FieldEthSrc, 0, 48),
			openflow.Output(n.UplinkOFPort)),
		flow(EndpointDNATTable, priorityMiss, nil, openflow.SetEthDst(GlobalVirtualMAC), openflow.GotoTable(EgressRuleTable)),
		flow(ConntrackStateTable, priorityNormal, match(openflow.IPv4(), openflow.CTState(openflow.CTTrk, openflow.CTNew), openflow.CTMark(ServiceCTMark, ServiceCTMark)),
			openflow.SetEthDst(GlobalVirtualMAC), openflow.GotoTable(DNATTable)),
		flow(ConntrackCommitTable, priorityTop, match(openflow.IPv4(), openflow.CTState(openflow.CTNew|openflow.CTTrk, 0), regMatch(ServiceSNATField, 1)),
			openflow.CT(openflow.CTAction{Commit: true, Table: ptr(L2ForwardingOutTable), Zone: ServiceSNATZone, SNAT: n.GatewayIP})),
		flow(ConntrackCommitTable, priorityTop, match(openflow.IPv4(), openflow.CTState(openflow.CTTrk, openflow.CTNew|openflow.CTRpl), openflow.CTMark(ServiceSNATCTMark, ServiceSNATCTMark)),
			openflow.CT(openflow.CTAction{Table: ptr(L2ForwardingOutTable), Zone: ServiceSNATZone, NAT: true})),
		flow(ConntrackCommitTable, priorityHigh, match(openflow.IPv4(), openflow.CTState(openflow.CTTrk, openflow.CTRpl), openflow.CTMark(ServiceCTMark, ServiceCTMark|PolicyAdmittedCTMark)),
			openflow.CT(openflow.CTAction{Commit: true, Table: ptr(L2ForwardingOutTable), Zone: ConntrackZone,
				Exec: []openflow.Action{openflow.SetCTMark(PolicyAdmittedCTMark, PolicyAdmittedCTMark)}})),
		flow(ARPResponderTable, priorityNormal, match(openflow.ARP(), openflow.ARPTPA(ServiceNextHop), openflow.ARPOp(1)),
			openflow.Move(openflow.FieldEthSrc, openflow.FieldEthDst), openflow.SetEthSrc(GlobalVirtualMAC), openflow.SetARPOp(2),
			openflow.Move(openflow.FieldARPSha, openflow.FieldARPTha), openflow.SetARPSha(GlobalVirtualMAC),
			openflow.Move(openflow.FieldARPSpa, openflow.FieldARPTpa), openflow.SetARPSpa(ServiceNextHop),
			openflow.Output(openflow.PortInPort)),
	)
	return out
}

// ServiceFlows are the groups and flows of one Service port. New connections to the ClusterIP, or
// to a NodePort from a Pod or the host, go to ClusterGroup; new connections to a NodePort from the
// uplink go to ExternalGroup, whose buckets also remember the client's MACs and, for endpoints on
// other nodes, have the connection SNATed (externalTrafficPolicy Cluster) so that replies come
// back through this node. Groups must be installed before the flows.
func (n Node) ServiceFlows(sp ServicePort) ([]openflow.Group, []openflow.Flow) {
	if sp.Protocol != openflow.ProtoTCP && sp.Protocol != openflow.ProtoUDP {
		return nil, nil
	}
	proto := openflow.IPProto(sp.Protocol)
	isNew := openflow.CTState(openflow.CTNew|openflow.CTTrk, 0)
	groups := []openflow.Group{n.serviceGroup(sp.ClusterGroup, sp.Endpoints, false)}
	var flows []openflow.Flow
	if sp.ClusterIP.Is4() {
		flows = append(flows, flow(DNATTable, priorityNormal,
			match(openflow.IPv4(), proto, isNew, openflow.NwDst(netip.PrefixFrom(sp.ClusterIP, 32)), openflow.TpDst(sp.Protocol, sp.Port)),
			openflow.ToGroup(sp.ClusterGroup)))
	}
	if sp.NodePort != 0 {
		groups = append(groups, n.serviceGroup(sp.ExternalGroup, sp.Endpoints, true))
		fromUplink := regMatch(PktSourceField, FromUplink)
		for _, ip := range sp.NodeIPs {
			if !ip.Is4() {
				continue
			}
			dst := openflow.NwDst(netip.PrefixFrom(ip, 32))
			port := openflow.TpDst(sp.Protocol, sp.NodePort)
			flows = append(flows,
				flow(ConntrackStateTable, priorityNormal, match(openflow.IPv4(), proto, isNew, fromUplink, dst, port), openflow.GotoTable(DNATTable)),
				flow(DNATTable, priorityHigh, match(openflow.IPv4(), proto, isNew, fromUplink, dst, port),
					openflow.ToGroup(sp.ExternalGroup)),
				flow(DNATTable, priorityNormal, match(openflow.IPv4(), proto, isNew, dst, port),
					openflow.ToGroup(sp.ClusterGroup)),
			)
		}
	}
	return groups, flows
}

// serviceGroup is the select group of a Service port: one bucket per endpoint, each committing
// the connection DNATed to its endpoint and going on to EndpointDNAT. The MACs the packet came
// with are still its own there, for ct_label.
func (n Node) serviceGroup(id uint32, endpoints []Endpoint, external bool) openflow.Group {
	g := openflow.Group{ID: id}
	for _, ep := range endpoints {
		if !ep.Addr.Addr().Is4() {
			continue
		}
		mark := ServiceCTMark
		var actions []openflow.Action
		exec := []openflow.Action{}
		if external {
			mark |= ServiceExternalCTMark
			if !ep.Local {
				mark |= ServiceSNATCTMark
				actions = append(actions, loadReg(ServiceSNATField, 1))
			}
			exec = append(exec, openflow.MoveBits(openflow.FieldEthSrc, 0, openflow.FieldCTLabel, 0, 48),
				openflow.MoveBits(openflow.FieldEthDst, 0, openflow.FieldCTLabel, 48, 48))
		}
		exec = append([]openflow.Action{openflow.SetCTMark(mark, mark)}, exec...)
		actions = append(actions, openflow.CT(openflow.CTAction{Commit: true, Table: ptr(EndpointDNATTable), Zone: ConntrackZone, DNAT: ep.Addr, Exec: exec}))
		g.Buckets = append(g.Buckets, openflow.Bucket{Weight: bucketWeight, Actions: actions})
	}
	return g
}
