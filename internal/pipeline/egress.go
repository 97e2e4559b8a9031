package pipeline

import (
	"net/netip"
	"slices"

	"github.com/winnet-io/winnet/internal/ovs/openflow"
)

// Egress is an egress IP the node holds, and the local Pods whose connections to destinations
// outside the cluster leave from it.
type Egress struct {
	// ID identifies the Egress in EgressField; unique among the node's Egresses, never 0.
	ID uint32
	// IP is the egress IP, on the bridge interface.
	IP netip.Addr
	// Pods are the IPv4 addresses of the selected local Pods.
	Pods []netip.Addr
}

// EgressFlows SNAT the new connections of each Egress's Pods to destinations outside the cluster to
// the egress IP, as snatFlows SNAT the other Pods' to the node IP, and before them:
//
//   - L3Forwarding: one flow per selected Pod (its source address, from a local Pod port) loads the
//     Egress's id into EgressField and sends the packet to the gateway's MAC; the destinations never
//     SNATed (NoSNAT, at prioritySkip) win over it;
//   - ConntrackCommit: one flow per Egress commits the new connection with nat(src=egress IP) and
//     SNATCTMark, so that its replies from the uplink are un-NATed and steered to the Pod exactly
//     as the node's SNAT replies are (ConntrackStateTable);
//   - L2ForwardingOut: one flow per Egress outputs on the gateway, whence the host forwards the
//     packet out of the bridge interface, which holds the egress IP.
//
// Traffic from the uplink to an egress IP that is not a reply to such a connection is dropped: in
// ConntrackStateTable for TCP, UDP and ICMP (replies are un-NATed to the Pod's address before),
// in ClassifierTable for other IP protocols; ARP for it still reaches the host, which answers. No
// host service is reachable on the egress IP.
//
// When the node's SNAT is off (snatFlows absent), the NoSNAT destinations are skipped here too.
// Cost: 4 flows per Egress and 1 per selected local Pod (plus len(NoSNAT) once with SNAT off).
func (n Node) EgressFlows(egresses []Egress) []openflow.Flow {
	var out []openflow.Flow
	for _, e := range egresses {
		if e.ID == 0 || !e.IP.Is4() {
			continue
		}
		id := regMatch(EgressField, e.ID)
		egressIP := openflow.NwDst(netip.PrefixFrom(e.IP, 32))
		out = append(out,
			flow(ConntrackCommitTable, priorityHigh, match(openflow.IPv4(), openflow.CTState(openflow.CTNew|openflow.CTTrk, 0), id),
				openflow.CT(openflow.CTAction{Commit: true, Table: ptr(L2ForwardingOutTable), Zone: ConntrackZone, SNAT: e.IP,
					Exec: append([]openflow.Action{openflow.SetCTMark(SNATCTMark, 0xffffffff)}, commitNew()...)})),
			flow(L2ForwardingOutTable, priorityHigh, match(openflow.IPv4(), id), openflow.Output(n.GatewayOFPort)),
			flow(ConntrackStateTable, priorityLow+1, match(openflow.IPv4(), regMatch(PktSourceField, FromUplink), egressIP), openflow.Drop()),
			flow(ClassifierTable, priorityLow+1, match(openflow.InPort(n.UplinkOFPort), openflow.IPv4(), egressIP), openflow.Drop()),
		)
		pods := slices.Clone(e.Pods)
		slices.SortFunc(pods, netip.Addr.Compare)
		for _, p := range slices.Compact(pods) {
			if !p.Is4() {
				continue
			}
			out = append(out, flow(L3ForwardingTable, priorityEgressSNAT,
				match(openflow.IPv4(), regMatch(PktSourceField, FromLocalPod), openflow.NwSrc(netip.PrefixFrom(p, 32))),
				loadReg(EgressField, e.ID), openflow.SetEthDst(n.GatewayMAC), openflow.GotoTable(L2ForwardingCalcTable)))
		}
	}
	if len(out) > 0 && !n.SNAT {
		for _, p := range n.NoSNAT {
			if p.Addr().Is4() {
				out = append(out, flow(L3ForwardingTable, prioritySkip, match(openflow.IPv4(), regMatch(PktSourceField, FromLocalPod), openflow.NwDst(p)),
					openflow.SetEthDst(n.GatewayMAC), openflow.GotoTable(L2ForwardingCalcTable)))
			}
		}
	}
	return out
}
