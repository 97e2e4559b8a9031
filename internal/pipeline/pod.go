package pipeline

import (
	"net"
	"net/netip"

	"github.com/winnet-io/winnet/internal/ovs/openflow"
)

// Pod is one local Pod's attachment as the pipeline sees it.
type Pod struct {
	OFPort uint32
	MAC    net.HardwareAddr
	IP     netip.Addr
	// Incarnation tells this attachment of the address from the earlier ones (incarnation.go);
	// 0 for a Pod attached before incarnations, whose connections are not checked.
	Incarnation uint16
}

// PodFlows are the flows of one local Pod: it is classified as a local Pod, may send only with its
// own MAC and IP (ARP too: sender MAC and IP, arp_sha and arp_spa, as Antrea's SpoofGuard checks, so
// that a Pod cannot announce its own IP with another Pod's MAC), is reached by its MAC, and packets
// routed to it (from the tunnel, or un-NATed replies) get its MAC and the gateway's as source. Its
// incarnation is loaded as its packets enter and as packets to it are switched, and its
// established connections pass the incarnation tables only when they carry it (incarnation.go).
func (n Node) PodFlows(p Pod) []openflow.Flow {
	host := netip.PrefixFrom(p.IP, p.IP.BitLen())
	var src, dst []openflow.Action
	if p.Incarnation != 0 {
		src = []openflow.Action{loadReg(SrcIncarnationField, uint32(p.Incarnation))}
		dst = []openflow.Action{loadReg(DstIncarnationField, uint32(p.Incarnation))}
	}
	out := []openflow.Flow{
		flow(ClassifierTable, priorityLow, match(openflow.InPort(p.OFPort)),
			loadReg(PktSourceField, FromLocalPod), openflow.GotoTable(SpoofGuardTable)),
		flow(SpoofGuardTable, priorityNormal, match(openflow.InPort(p.OFPort), openflow.IPv4(), openflow.EthSrc(p.MAC), openflow.NwSrc(host)),
			append(src, openflow.GotoTable(ConntrackTable))...),
		flow(SpoofGuardTable, priorityNormal, match(openflow.InPort(p.OFPort), openflow.ARP(), openflow.EthSrc(p.MAC), openflow.NwSrc(host), openflow.ARPSHA(p.MAC)),
			openflow.GotoTable(ARPResponderTable)),
		flow(L3ForwardingTable, priorityNormal, match(openflow.IPv4(), openflow.EthDst(GlobalVirtualMAC), openflow.NwDst(host)),
			openflow.SetEthSrc(n.GatewayMAC), openflow.SetEthDst(p.MAC), openflow.GotoTable(L2ForwardingCalcTable)),
		flow(L2ForwardingCalcTable, priorityNormal, match(openflow.EthDst(p.MAC)),
			append(append([]openflow.Action{loadReg(TargetOFPortField, p.OFPort), loadReg(OFPortFoundField, 1)}, dst...), openflow.GotoTable(AdminIngressRuleTable))...),
	}
	return append(out, n.podIncarnationFlows(p)...)
}

// PodPolicyPendingFlows refuse every IP packet to a local Pod whose NetworkPolicy flows are not
// committed yet (a new Pod's port waits for them before it is bound): above the policy exemptions
// and the established-connection skips, so that nothing sent to the Pod before its policies hold
// is committed to conntrack, where its connection's later packets would pass as established. It is
// in the first ingress policy stage, the Admin tier's table, so that no Admin rule admits them either.
func (n Node) PodPolicyPendingFlows(p Pod) []openflow.Flow {
	return []openflow.Flow{
		flow(AdminIngressRuleTable, priorityClusterPending, match(openflow.IPv4(), regMatch(TargetOFPortField, p.OFPort)), openflow.Drop()),
	}
}
