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
}

// RouteFlows are the flows of one remote route. They take precedence over SNAT, so Pod traffic to
// other nodes' Pods keeps its source address.
func (n Node) RouteFlows(r RemoteRoute) []openflow.Flow {
	if !r.Tunnel {
		return []openflow.Flow{
			flow(L3ForwardingTable, priorityNormal, match(openflow.IPv4(), openflow.NwDst(r.CIDR)),
				openflow.SetEthSrc(r.UplinkMAC), openflow.SetEthDst(r.NextHopMAC),
				loadReg(TargetOFPortField, n.UplinkOFPort), loadReg(OFPortFoundField, 1), openflow.GotoTable(ConntrackCommitTable)),
		}
	}
	src := n.VTEPMAC
	if src == nil {
		src = n.GatewayMAC
	}
	// The node routes: the TTL goes down by one (and once more on the receiving node, tunnelAcceptFlows).
	out := []openflow.Flow{
		flow(L3ForwardingTable, priorityNormal, match(openflow.IPv4(), openflow.NwDst(r.CIDR)),
			openflow.DecTTL(), openflow.SetEthSrc(src), openflow.SetEthDst(r.DstMAC), openflow.SetTunDst(r.NodeIP), openflow.SetTunID(uint64(r.VNI)),
			loadReg(TargetOFPortField, n.TunnelOFPort), loadReg(OFPortFoundField, 1), openflow.GotoTable(ConntrackCommitTable)),
	}
	if r.VNI != n.VNI {
		// A peer with a VNI of its own (a flannel node) is answered and heard on that VNI.
		out = append(out, n.tunnelAcceptFlows(openflow.TunID(uint64(r.VNI)), openflow.TunSrc(r.NodeIP))...)
	}
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
