package pipeline

import (
	"net"
	"net/netip"

	"github.com/winnet-io/winnet/internal/ovs/openflow"
)

// RemoteRoute is a route to a remote subnet as the pipeline realises it.
type RemoteRoute struct {
	CIDR netip.Prefix
	// Tunnel: encapsulate to NodeIP. Otherwise route unencapsulated out of the uplink to NextHopMAC.
	Tunnel bool
	NodeIP netip.Addr
	// VNI of the tunnel (the node's, or the route's override).
	VNI uint32
	// DstMAC is the inner destination MAC: the global virtual MAC, or a peer's VTEP MAC.
	DstMAC net.HardwareAddr
	// GatewayIP is the remote gateway; the node answers ARP for it with DstMAC (tunnel only).
	GatewayIP netip.Addr
	// NextHopMAC is the MAC of NodeIP on the underlay (route only).
	NextHopMAC net.HardwareAddr
	// UplinkMAC is the source MAC of routed packets (route only).
	UplinkMAC net.HardwareAddr
	// Peer identifies the route's object (a RemoteSubnetRoute) in the cookies of the tunnel sources
	// learned for it (TunnelSourceSeenTable).
	Peer uint64
}

// RouteFlows are the flows of one remote route. They take precedence over SNAT, so Pod traffic to
// other nodes' Pods keeps its source address. On a node with a tunnel they admit the peer's tunnel
// traffic (admissionFlows), whether this node tunnels to the peer or routes to it (Hybrid mode, a
// route's mode): the peer owns its CIDR either way.
func (n Node) RouteFlows(r RemoteRoute) []openflow.Flow {
	var admission []openflow.Flow
	if n.TunnelOFPort != 0 && r.NodeIP.Is4() {
		admission = n.admissionFlows(r)
	}
	if !r.Tunnel {
		return append([]openflow.Flow{
			flow(L3ForwardingTable, priorityNormal, match(openflow.IPv4(), openflow.NwDst(r.CIDR)),
				openflow.SetEthSrc(r.UplinkMAC), openflow.SetEthDst(r.NextHopMAC),
				loadReg(TargetOFPortField, n.UplinkOFPort), loadReg(OFPortFoundField, 1), openflow.GotoTable(ConntrackCommitTable)),
		}, admission...)
	}
	out := []openflow.Flow{
		flow(L3ForwardingTable, priorityNormal, match(openflow.IPv4(), openflow.NwDst(r.CIDR)),
			append(n.tunnelTo(r), openflow.GotoTable(ConntrackCommitTable))...),
	}
	out = append(out, admission...)
	if r.GatewayIP.IsValid() {
		// Answer the host's ARP for the remote gateway (the next hop of its route to the CIDR).
		out = append(out, flow(ARPResponderTable, priorityNormal, match(openflow.ARP(), openflow.ARPTPA(r.GatewayIP), openflow.ARPOp(1)),
			openflow.Move(openflow.FieldEthSrc, openflow.FieldEthDst), openflow.SetEthSrc(r.DstMAC), openflow.SetARPOp(2),
			openflow.Move(openflow.FieldARPSha, openflow.FieldARPTha), openflow.SetARPSha(r.DstMAC),
			openflow.Move(openflow.FieldARPSpa, openflow.FieldARPTpa), openflow.SetARPSpa(r.GatewayIP),
			openflow.Output(openflow.PortInPort)))
	}
	return out
}

// tunnelTo are the actions that send a packet through the tunnel to the peer of r (its node IP, its
// VNI, its inner MAC), output in L2ForwardingOut. The node routes: the TTL goes down by one (and
// once more on the receiving node, tunnelFlows).
func (n Node) tunnelTo(r RemoteRoute) []openflow.Action {
	src := n.VTEPMAC
	if src == nil {
		src = n.GatewayMAC
	}
	return []openflow.Action{openflow.DecTTL(), openflow.SetEthSrc(src), openflow.SetEthDst(r.DstMAC), openflow.SetTunDst(r.NodeIP), openflow.SetTunID(uint64(r.VNI)),
		loadReg(TargetOFPortField, n.TunnelOFPort), loadReg(OFPortFoundField, 1)}
}

// admissionFlows admit the peer's tunnel traffic in TunnelAdmissionTable: from its node IP, with its
// VNI, IPv4 whose inner source is in its CIDR (its Pods, its gateway, a flannel node's flannel.<VNI>
// address) or is its node IP (the peer's host answering a Pod that reached it on the underlay). The
// peer's other tunnel traffic is dropped as not owned (another source) or of the wrong VNI. Its inner
// sources arriving from any other address are dropped too, and the address they came from is
// learned into TunnelSourceSeenTable with the peer's object in the cookie, so that the agent can say
// where the peer's traffic comes from (NAT between the nodes). The per-peer flows are the same for
// every CIDR of the peer; the caller keeps one of each.
func (n Node) admissionFlows(r RemoteRoute) []openflow.Flow {
	peer := openflow.TunSrc(r.NodeIP)
	vni := openflow.TunID(uint64(r.VNI))
	seen := openflow.Learn(openflow.LearnSpec{
		Table: TunnelSourceSeenTable, Priority: priorityNormal, HardTimeout: TunnelSeenTimeout,
		Cookie: openflow.MakeCookie(0, CategoryTunnelSeen, r.Peer), DeleteLearned: true,
		Match: []openflow.Field{openflow.FieldTunIPv4Src},
	})
	out := n.podTunnelGuard(r.NodeIP)
	for _, owned := range []netip.Prefix{r.CIDR, netip.PrefixFrom(r.NodeIP, 32)} {
		out = append(out,
			flow(TunnelAdmissionTable, priorityTunnelAdmit, match(openflow.IPv4(), peer, vni, openflow.NwSrc(owned)), openflow.GotoTable(TunnelClassifierTable)),
			flow(TunnelAdmissionTable, priorityTunnelPeerElsewhere, match(openflow.IPv4(), openflow.NwSrc(owned)), seen))
	}
	return append(out,
		flow(TunnelAdmissionTable, priorityTunnelNotOwned, match(peer, vni), openflow.Drop()),
		flow(TunnelAdmissionTable, priorityTunnelWrongVNI, match(peer), openflow.Drop()))
}
