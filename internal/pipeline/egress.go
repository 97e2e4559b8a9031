package pipeline

import (
	"net/netip"
	"slices"

	"github.com/winnet-io/winnet/internal/ovs/openflow"
)

// Egress is an egress IP the node holds, and the Pods whose connections to destinations outside the
// cluster leave from it.
type Egress struct {
	// ID identifies the Egress in EgressField; unique among the node's Egresses, never 0.
	ID uint32
	// IP is the egress IP, on the bridge interface.
	IP netip.Addr
	// Pods are the IPv4 addresses of the selected local Pods.
	Pods []netip.Addr
	// RemotePods are the selected Pods on other nodes, whose nodes relay their connections here
	// through the tunnel (EgressRelay).
	RemotePods []RemotePod
}

// RemotePod is a selected Pod on another node, and the realised route to its node (whose NodeIP,
// VNI and DstMAC carry the Pod's replies back through the tunnel).
type RemotePod struct {
	IP   netip.Addr
	Node RemoteRoute
}

// EgressRelay is an Egress another node holds, as a node with selected Pods relays to it.
type EgressRelay struct {
	// Holder is the realised route to the holding node: its tunnel endpoint (NodeIP), VNI and DstMAC.
	Holder RemoteRoute
	// Pods are the IPv4 addresses of the selected local Pods.
	Pods []netip.Addr
}

// EgressFlows are the flows of the Egresses the node holds (EgressHolderFlows) and of those other
// nodes hold whose Pods run here (EgressRelayFlows), one CategoryEgress set. When the node's SNAT is
// off (snatFlows absent), the destinations never SNATed (NoSNAT) are skipped here instead, once.
func (n Node) EgressFlows(held []Egress, relays []EgressRelay) []openflow.Flow {
	out := slices.Concat(n.EgressHolderFlows(held), n.EgressRelayFlows(relays))
	if len(out) > 0 && !n.SNAT {
		out = append(out, n.noSNATSkips(FromLocalPod)...)
	}
	return out
}

// noSNATSkips send the packets from source (a PktSourceField value) to the destinations never
// SNATed on unchanged, above the Egresses' flows.
func (n Node) noSNATSkips(source uint32) []openflow.Flow {
	var out []openflow.Flow
	for _, p := range n.NoSNAT {
		if !p.Addr().Is4() {
			continue
		}
		actions := []openflow.Action{openflow.GotoTable(L2ForwardingCalcTable)}
		if source == FromLocalPod {
			// As snatFlows' skips: to the host, a Pod's packet needs the gateway's MAC.
			actions = append([]openflow.Action{openflow.SetEthDst(n.GatewayMAC)}, actions...)
		}
		out = append(out, flow(L3ForwardingTable, prioritySkip, match(openflow.IPv4(), regMatch(PktSourceField, source), openflow.NwDst(p)), actions...))
	}
	return out
}

// EgressHolderFlows SNAT the new connections of each held Egress's Pods to destinations outside the
// cluster to the egress IP, as snatFlows SNAT the other Pods' to the node IP, and before them:
//
//   - L3Forwarding: one flow per selected Pod (its source address, from a local Pod port, or from
//     the tunnel for a remote Pod, whose node relayed it: EgressRelayFlows) loads the Egress's id
//     into EgressField and sends the packet to the gateway's MAC; the destinations never SNATed
//     (NoSNAT, at prioritySkip) win over it;
//   - ConntrackCommit: one flow per Egress commits the new connection with nat(src=egress IP) and
//     SNATCTMark, so that its replies from the uplink are un-NATed and steered to the Pod exactly
//     as the node's SNAT replies are (ConntrackStateTable);
//   - L2ForwardingOut: one flow per Egress outputs on the gateway, whence the host forwards the
//     packet out of the bridge interface, which holds the egress IP;
//   - L3Forwarding also sends the later packets of the Egress's connections (SNATed by conntrack
//     already: from the egress IP, once per Egress and source) the same way (egressEstablishedFlow),
//     so that the output flow counts all the Egress's bytes;
//   - for a remote Pod, L3Forwarding also sends the un-NATed replies from the uplink to it back
//     through the tunnel to its node (priorityEgressReturn, above its route, which in Hybrid mode
//     may be unencapsulated: the Pod's node admits the replies from the holder's tunnel endpoint
//     only), and the cluster's destinations from the tunnel are skipped once (a peer relays only
//     destinations outside the cluster, so the holder never SNATs another).
//
// Traffic from the uplink to an egress IP that is not a reply to such a connection is dropped: in
// ConntrackStateTable for TCP, UDP and ICMP (replies are un-NATed to the Pod's address before),
// in ClassifierTable for other IP protocols; ARP for it still reaches the host, which answers. No
// host service is reachable on it.
//
// Cost: 5 flows per Egress (6 with remote Pods), 1 per selected local Pod, 2 per selected remote
// Pod, and len(NoSNAT) once when any remote Pod is selected.
func (n Node) EgressHolderFlows(egresses []Egress) []openflow.Flow {
	var out []openflow.Flow
	remote := false
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
		for _, p := range uniqueIPv4(e.Pods) {
			out = append(out, n.egressSNATFlow(e.ID, p, FromLocalPod))
		}
		out = append(out, n.egressEstablishedFlow(e, FromLocalPod))
		relayed := false
		for _, r := range uniqueRemotePods(e.RemotePods) {
			if n.TunnelOFPort == 0 || !r.Node.NodeIP.Is4() {
				continue
			}
			remote, relayed = true, true
			pod := netip.PrefixFrom(r.IP, 32)
			out = append(out, n.egressSNATFlow(e.ID, r.IP, FromTunnel),
				flow(L3ForwardingTable, priorityEgressReturn,
					match(openflow.IPv4(), regMatch(PktSourceField, FromUplink), openflow.CTState(openflow.CTTrk|openflow.CTEst|openflow.CTRpl, openflow.CTNew),
						openflow.CTMark(SNATCTMark, 0xffffffff), openflow.NwDst(pod)),
					append(n.tunnelTo(r.Node), openflow.GotoTable(ConntrackCommitTable))...))
		}
		if relayed {
			out = append(out, n.egressEstablishedFlow(e, FromTunnel))
		}
	}
	if remote {
		out = append(out, n.noSNATSkips(FromTunnel)...)
	}
	return out
}

// egressEstablishedFlow sends the later packets of the Egress's connections from source (a local Pod's,
// or a relayed one's from the tunnel) out as their first packets went, with the Egress's id in
// EgressField: they leave ConntrackTable SNATed already (its ct(nat) applies the connection's NAT), so
// their source is the egress IP, and the conntrack mark says the connection was SNATed. (Without it a
// local Pod's would take the node SNAT's flow, which matches every source from a Pod port, and leave
// the same way, uncounted; a relayed one's would have no way out.) The Egress's output flow counts
// every packet its Pods send: the Egress's bytes (metrics.go).
func (n Node) egressEstablishedFlow(e Egress, source uint32) openflow.Flow {
	return flow(L3ForwardingTable, priorityEgressSNAT,
		match(openflow.IPv4(), regMatch(PktSourceField, source), openflow.CTState(openflow.CTTrk, openflow.CTNew|openflow.CTRpl),
			openflow.CTMark(SNATCTMark, 0xffffffff), openflow.NwSrc(netip.PrefixFrom(e.IP, 32))),
		loadReg(EgressField, e.ID), openflow.SetEthDst(n.GatewayMAC), openflow.GotoTable(L2ForwardingCalcTable))
}

// egressSNATFlow marks the packets of one selected Pod, from source, for Egress id's SNAT.
func (n Node) egressSNATFlow(id uint32, pod netip.Addr, source uint32) openflow.Flow {
	return flow(L3ForwardingTable, priorityEgressSNAT,
		match(openflow.IPv4(), regMatch(PktSourceField, source), openflow.NwSrc(netip.PrefixFrom(pod, 32))),
		loadReg(EgressField, id), openflow.SetEthDst(n.GatewayMAC), openflow.GotoTable(L2ForwardingCalcTable))
}

// EgressRelayFlows carry the connections that selected local Pods open to destinations outside the
// cluster through the tunnel to the node holding their Egress, after NetworkPolicy (L3Forwarding
// comes after the policy stages), and admit the holder's replies narrowly:
//
//   - L3Forwarding, per Pod: a new connection's packet (its source address, from a local Pod port,
//     +new) goes through the tunnel to the holder and is marked (EgressRelayField); a later packet
//     from the Pod of a connection committed with EgressRelayCTMark follows it. The destinations
//     never SNATed (NoSNAT, at prioritySkip) win over both. A connection the Pod accepted (a
//     NodePort or LoadBalancer client's) never has the mark: its replies never go to the holder;
//   - ConntrackCommit, once: the marked new connection is committed with EgressRelayCTMark;
//   - TunnelAdmission, per Pod: from the holder's tunnel endpoint and VNI to the Pod, whatever the
//     inner source (an outside address: the holder un-SNATed the reply), marked EgressReplyField;
//   - ConntrackStateTable, once: a packet so marked goes on only as a reply (+est+rpl) of a
//     connection committed with EgressRelayCTMark, unmarked and resubmitted to the table, whose own
//     flows then take it as any reply (a Service connection's: un-DNAT in its UDP port's zone);
//     every other one is dropped.
//
// Nothing is relayed without a tunnel (NoEncap). Cost: 3 flows per selected local Pod, 3 once.
func (n Node) EgressRelayFlows(relays []EgressRelay) []openflow.Flow {
	if n.TunnelOFPort == 0 {
		return nil
	}
	var out []openflow.Flow
	relayed := openflow.CTMark(EgressRelayCTMark, EgressRelayCTMark)
	for _, r := range relays {
		if !r.Holder.NodeIP.Is4() {
			continue
		}
		toHolder := n.tunnelTo(r.Holder)
		for _, p := range uniqueIPv4(r.Pods) {
			pod := netip.PrefixFrom(p, 32)
			fromPod := match(openflow.IPv4(), regMatch(PktSourceField, FromLocalPod), openflow.NwSrc(pod))
			out = append(out,
				flow(L3ForwardingTable, priorityEgressSNAT, append(slices.Clone(fromPod), openflow.CTState(openflow.CTNew|openflow.CTTrk, 0)),
					slices.Concat(toHolder, []openflow.Action{loadReg(EgressRelayField, 1), openflow.GotoTable(ConntrackCommitTable)})...),
				flow(L3ForwardingTable, priorityEgressSNAT, append(slices.Clone(fromPod), openflow.CTState(openflow.CTTrk, openflow.CTNew), relayed),
					append(slices.Clone(toHolder), openflow.GotoTable(ConntrackCommitTable))...),
				flow(TunnelAdmissionTable, priorityTunnelEgressReply,
					match(openflow.IPv4(), openflow.TunSrc(r.Holder.NodeIP), openflow.TunID(uint64(r.Holder.VNI)), openflow.NwDst(pod)),
					loadReg(EgressReplyField, 1), openflow.GotoTable(TunnelClassifierTable)),
			)
		}
	}
	if len(out) == 0 {
		return nil
	}
	reply := regMatch(EgressReplyField, 1)
	return append(out,
		flow(ConntrackCommitTable, priorityHigh, match(openflow.IPv4(), openflow.CTState(openflow.CTNew|openflow.CTTrk, 0), regMatch(EgressRelayField, 1)),
			openflow.CT(openflow.CTAction{Commit: true, Table: ptr(L2ForwardingOutTable), Zone: ConntrackZone,
				Exec: append([]openflow.Action{openflow.SetCTMark(EgressRelayCTMark, EgressRelayCTMark)}, commitNew()...)})),
		flow(ConntrackStateTable, priorityEgressReplyAdmit,
			match(openflow.IPv4(), reply, openflow.CTState(openflow.CTTrk|openflow.CTEst|openflow.CTRpl, openflow.CTNew), relayed),
			loadReg(EgressReplyField, 0), openflow.Resubmit(ConntrackStateTable)),
		flow(ConntrackStateTable, priorityEgressReplyDrop, match(openflow.IPv4(), reply), openflow.Drop()),
	)
}

// uniqueIPv4 returns the IPv4 addresses of ips, sorted, each once.
func uniqueIPv4(ips []netip.Addr) []netip.Addr {
	out := slices.DeleteFunc(slices.Clone(ips), func(a netip.Addr) bool { return !a.Is4() })
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// uniqueRemotePods returns the IPv4 remote Pods, sorted by address, each address once.
func uniqueRemotePods(pods []RemotePod) []RemotePod {
	out := slices.DeleteFunc(slices.Clone(pods), func(p RemotePod) bool { return !p.IP.Is4() })
	slices.SortFunc(out, func(a, b RemotePod) int { return a.IP.Compare(b.IP) })
	return slices.CompactFunc(out, func(a, b RemotePod) bool { return a.IP == b.IP })
}
