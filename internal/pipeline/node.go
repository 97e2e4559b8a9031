package pipeline

import (
	"net"
	"net/netip"
	"slices"

	"github.com/winnet-io/winnet/internal/ovs/openflow"
)

// Node is the part of a node's realised network that the base pipeline depends on.
type Node struct {
	// NodeIP is the node's transport address: the SNAT source and the tunnel source.
	NodeIP netip.Addr
	// PodCIDR is the node's IPv4 Pod subnet.
	PodCIDR netip.Prefix
	// GatewayIP, GatewayMAC and GatewayOFPort describe the gateway port.
	GatewayIP     netip.Addr
	GatewayMAC    net.HardwareAddr
	GatewayOFPort uint32
	// UplinkOFPort is the uplink adapter's port.
	UplinkOFPort uint32
	// TunnelOFPort is the tunnel port; 0 when the node does not encapsulate (NoEncap).
	TunnelOFPort uint32
	// TunnelUDPPort is the tunnel's UDP destination port (4789, 6081, ...): the node's Pods may not
	// send to it on any node (podTunnelGuard).
	TunnelUDPPort uint16
	// VNI is the tunnel's own VNI: the VNI of every peer whose route has none of its own.
	VNI uint32
	// AdmitAnyTunnelSource turns tunnel admission off: every IPv4 packet on the tunnel port goes
	// on, whatever its tunnel source, VNI and inner source, as on an underlay that rewrites the
	// peers' addresses (NAT). Off by default: only peers' tunnel endpoints with inner sources they
	// own are admitted (RouteFlows).
	AdmitAnyTunnelSource bool
	// VTEPMAC is the node's VTEP MAC: tunnelled traffic to it is delivered like traffic to the global
	// virtual MAC, and it is the inner source MAC of what the node encapsulates.
	VTEPMAC net.HardwareAddr
	// SNAT turns SNAT of Pod-to-external traffic on.
	SNAT bool
	// NoSNAT are the destinations Pods reach with their own address: cluster and Service CIDRs,
	// configured exclusions, the nodes' IPs.
	NoSNAT []netip.Prefix
}

// Features lists the flows of the node's base pipeline by Sync category. Every base category is
// present, empty when its feature is off, so that syncing the map removes a feature turned off.
func (n Node) Features() map[uint8][]openflow.Flow {
	f := map[uint8][]openflow.Flow{
		CategoryClassifier: n.classifierFlows(),
		CategoryConntrack:  n.conntrackFlows(),
		CategoryForwarding: n.forwardingFlows(),
		CategorySNAT:       nil,
	}
	if n.SNAT {
		f[CategorySNAT] = n.snatFlows()
	}
	return f
}

// BaseFlows returns every flow of the node's base pipeline.
func (n Node) BaseFlows() []openflow.Flow {
	features := n.Features()
	var out []openflow.Flow
	for _, c := range BaseCategories {
		out = append(out, features[c]...)
	}
	return out
}

func regMatch(f RegField, v uint32) openflow.MatchField {
	return openflow.Reg(f.Reg, f.Start, f.End, v)
}
func loadReg(f RegField, v uint32) openflow.Action { return openflow.SetReg(f.Reg, f.Start, f.End, v) }

func flow(table uint8, priority uint16, match []openflow.MatchField, actions ...openflow.Action) openflow.Flow {
	return openflow.Flow{Table: table, Priority: priority, Match: match, Actions: actions}
}

func match(m ...openflow.MatchField) []openflow.MatchField { return m }

// classifierFlows mark where each packet entered. Host traffic between the uplink and the bridge's
// LOCAL port bypasses the pipeline, except TCP, UDP and ICMP from the uplink, which go through
// conntrack so that replies to SNATed Pod traffic find their Pod. Other IP protocols from the uplink
// (ESP, GRE, VRRP, SCTP, ...) go straight to the host like non-IP: Windows conntrack drops them
// (see windows_profile.go). So do ICMP errors for the node itself: Windows marks them invalid, and
// the host's path MTU discovery needs them; the un-NAT of errors for SNATed Pod connections that
// the userspace datapath would do is impossible on Windows anyway.
func (n Node) classifierFlows() []openflow.Flow {
	uplink := openflow.InPort(n.UplinkOFPort)
	nodeIP := openflow.NwDst(netip.PrefixFrom(n.NodeIP, 32))
	var out []openflow.Flow
	for _, t := range icmpErrorTypes {
		out = append(out, flow(ClassifierTable, priorityHigh, match(uplink, openflow.IPv4(), openflow.IPProto(openflow.ProtoICMP), nodeIP, openflow.ICMPType(t)),
			openflow.Output(openflow.PortLocal)))
	}
	for _, proto := range trackedProtocols {
		out = append(out, flow(ClassifierTable, priorityNormal, match(uplink, openflow.IPv4(), openflow.IPProto(proto)),
			loadReg(PktSourceField, FromUplink), openflow.GotoTable(ConntrackTable)))
	}
	out = append(out,
		flow(ClassifierTable, priorityLow, match(uplink), openflow.Output(openflow.PortLocal)),
		flow(ClassifierTable, priorityNormal, match(openflow.InPort(openflow.PortLocal), openflow.IPv4(), openflow.NwDst(n.PodCIDR)),
			loadReg(PktSourceField, FromLocal), openflow.GotoTable(ConntrackTable)),
		flow(ClassifierTable, priorityLow, match(openflow.InPort(openflow.PortLocal)), openflow.Output(n.UplinkOFPort)),
		flow(ClassifierTable, priorityNormal, match(openflow.InPort(n.GatewayOFPort)),
			loadReg(PktSourceField, FromGateway), openflow.GotoTable(SpoofGuardTable)),
		flow(ClassifierTable, priorityMiss, nil, openflow.Drop()),
		// The gateway is trusted; Pods are checked per Pod (PodFlows).
		flow(SpoofGuardTable, priorityLow, match(openflow.ARP(), regMatch(PktSourceField, FromGateway)), openflow.GotoTable(ARPResponderTable)),
		flow(SpoofGuardTable, priorityLow, match(openflow.IPv4(), regMatch(PktSourceField, FromGateway)), openflow.GotoTable(ConntrackTable)),
		flow(SpoofGuardTable, priorityMiss, nil, openflow.Drop()),
	)
	if n.TunnelOFPort != 0 {
		out = append(out, n.tunnelFlows()...)
		out = append(out, n.podTunnelGuard(n.NodeIP)...)
	}
	return out
}

// podTunnelGuard drops the node's Pods' UDP to the tunnel port of the node at nodeIP (this node, or a
// peer: RouteFlows), as Calico drops VXLAN from workloads: a Pod's traffic to a node IP is SNATed to
// its own node's IP, so a tunnel packet a Pod built would reach the peer from its node's tunnel
// endpoint, with inner sources of its node's Pod CIDR (another Pod, the gateway), and pass the peer's
// admission.
func (n Node) podTunnelGuard(nodeIP netip.Addr) []openflow.Flow {
	if n.TunnelUDPPort == 0 || !nodeIP.Is4() {
		return nil
	}
	return []openflow.Flow{flow(SpoofGuardTable, priorityHigh,
		match(openflow.IPv4(), openflow.IPProto(openflow.ProtoUDP), regMatch(PktSourceField, FromLocalPod), openflow.NwDst(netip.PrefixFrom(nodeIP, 32)),
			openflow.TpDst(openflow.ProtoUDP, n.TunnelUDPPort)), openflow.Drop())}
}

// tunnelFlows send what arrives on the tunnel port through TunnelAdmissionTable, whose miss drops
// what comes from no peer (TunnelDropUnknownSource; the peers' flows are RouteFlows'), and classify
// what it admits in TunnelClassifierTable. With admission off, every IPv4 packet is admitted.
//
// Admitted traffic addressed to the node's VTEP MAC (flannel's Linux nodes address each node by
// its own MAC) gets the global virtual MAC that L3Forwarding delivers on the fast path.
// Decapsulated traffic to the node's Pods is routed by the node, so its TTL goes down by one, as
// the Linux kernel does with what flannel.<VNI> decapsulates (ip_forward from the vxlan device to
// cni0): a packet between Pods of two nodes arrives with two less, whichever side runs flannel.
// Traffic to the gateway address is for the host itself (local delivery on Linux) and keeps its TTL.
func (n Node) tunnelFlows() []openflow.Flow {
	in := match(openflow.IPv4())
	out := []openflow.Flow{
		flow(ClassifierTable, priorityNormal, match(openflow.InPort(n.TunnelOFPort)), openflow.GotoTable(TunnelAdmissionTable)),
		flow(TunnelAdmissionTable, priorityMiss, nil, openflow.Drop()),
		flow(TunnelClassifierTable, priorityNormal, in, openflow.DecTTL(), loadReg(PktSourceField, FromTunnel), openflow.GotoTable(ConntrackTable)),
		// L3Forwarding gives traffic to the gateway address that carries the global virtual MAC the gateway's.
		flow(TunnelClassifierTable, priorityTop, append(slices.Clone(in), openflow.NwDst(netip.PrefixFrom(n.GatewayIP, 32))),
			openflow.SetEthDst(GlobalVirtualMAC), loadReg(PktSourceField, FromTunnel), openflow.GotoTable(ConntrackTable)),
		flow(TunnelClassifierTable, priorityMiss, nil, openflow.Drop()),
	}
	if n.AdmitAnyTunnelSource {
		out = append(out, flow(TunnelAdmissionTable, priorityTunnelOpen, match(openflow.IPv4()), openflow.GotoTable(TunnelClassifierTable)))
	}
	if n.VTEPMAC != nil {
		out = append(out, flow(TunnelClassifierTable, priorityHigh, append(slices.Clone(in), openflow.EthDst(n.VTEPMAC)),
			openflow.SetEthDst(GlobalVirtualMAC), openflow.DecTTL(), loadReg(PktSourceField, FromTunnel), openflow.GotoTable(ConntrackTable)))
	}
	return out
}

// conntrackFlows track TCP, UDP and ICMP in the pipeline's zone, un-NATing replies, and steer
// replies to SNATed connections that came in on the uplink towards their Pod. Other IP protocols
// are dropped, as Windows conntrack would drop them.
func (n Node) conntrackFlows() []openflow.Flow {
	stateTable := ConntrackStateTable
	established := openflow.CTState(openflow.CTTrk, openflow.CTNew)
	out := []openflow.Flow{flow(ARPResponderTable, priorityMiss, nil, openflow.Normal())}
	for _, proto := range trackedProtocols {
		out = append(out, flow(ConntrackTable, priorityNormal, match(openflow.IPv4(), openflow.IPProto(proto)),
			openflow.CT(openflow.CTAction{Table: &stateTable, Zone: ConntrackZone, NAT: true})))
	}
	return append(out,
		flow(ConntrackTable, priorityMiss, nil, openflow.Drop()),
		flow(ConntrackStateTable, priorityHigh, match(openflow.IPv4(), established, openflow.CTMark(SNATCTMark, 0xffffffff), regMatch(PktSourceField, FromUplink)),
			openflow.SetEthDst(GlobalVirtualMAC), openflow.GotoTable(DNATTable)),
		flow(ConntrackStateTable, priorityNormal, match(openflow.IPv4(), established, openflow.CTMark(SNATCTMark, 0xffffffff)),
			openflow.GotoTable(DNATTable)),
		// Host traffic from the uplink that is not a reply to a Pod goes to the host.
		flow(ConntrackStateTable, priorityLow, match(openflow.IPv4(), regMatch(PktSourceField, FromUplink)), openflow.Output(openflow.PortLocal)),
		flow(ConntrackStateTable, prioritySkip, match(openflow.IPv4(), openflow.CTState(openflow.CTTrk|openflow.CTInv, 0)), openflow.Drop()),
		flow(ConntrackStateTable, priorityMiss, nil, openflow.GotoTable(DNATTable)),
		flow(DNATTable, priorityMiss, nil, openflow.GotoTable(AdminEgressRuleTable)),
	)
}

// forwardingFlows are the L3/L2 base: the local Pod CIDR and the node are reached by MAC; the
// gateway's MAC leads to the gateway; a packet whose port is known is output there. The policy
// tables are walked through: only new connections are evaluated (the NetworkPolicy flows of
// CategoryPolicy), established and related packets skip the rules, and what no policy isolates
// passes.
func (n Node) forwardingFlows() []openflow.Flow {
	ingress := AdminIngressRuleTable
	// Replies skip policy; so do other established and related packets, except those of Service
	// connections policy has not admitted (PolicyAdmittedCTMark).
	skip := func(rules, next uint8) []openflow.Flow {
		var out []openflow.Flow
		for _, state := range []uint32{openflow.CTEst, openflow.CTRel} {
			out = append(out,
				flow(rules, priorityClusterSkip, match(openflow.IPv4(), openflow.CTState(openflow.CTTrk|state, openflow.CTNew), openflow.CTMark(0, ServiceCTMark)), openflow.GotoTable(next)),
				flow(rules, priorityClusterSkip, match(openflow.IPv4(), openflow.CTState(openflow.CTTrk|state, openflow.CTNew), openflow.CTMark(PolicyAdmittedCTMark, PolicyAdmittedCTMark)), openflow.GotoTable(next)))
		}
		return append(out, flow(rules, priorityClusterSkip, match(openflow.IPv4(), openflow.CTState(openflow.CTTrk|openflow.CTRpl, openflow.CTNew)), openflow.GotoTable(next)))
	}
	// They skip them in the first policy stage of their direction (the Admin tier's), through the
	// incarnation tables, where a connection of an earlier Pod of a local Pod's address stops
	// (incarnation.go).
	out := slices.Concat(skip(AdminEgressRuleTable, EgressIncarnationTable), skip(AdminIngressRuleTable, IngressIncarnationTable), incarnationBaseFlows())
	fromLocalPod := regMatch(PktSourceField, FromLocalPod)
	return append(out,
		// ClusterNetworkPolicy's tiers: traffic between a Pod and its own node goes on to
		// NetworkPolicy, which exempts it (PolicyFlows); what no Admin rule decides goes on to
		// NetworkPolicy, and what NetworkPolicy did not decide to the Baseline tier.
		flow(AdminEgressRuleTable, priorityClusterExempt, match(openflow.IPv4(), fromLocalPod, hostPrefix(n.GatewayIP, openflow.NwDst)), openflow.GotoTable(EgressPeerClassTable)),
		flow(AdminEgressRuleTable, priorityClusterExempt, match(openflow.IPv4(), fromLocalPod, hostPrefix(n.NodeIP, openflow.NwDst)), openflow.GotoTable(EgressPeerClassTable)),
		flow(AdminIngressRuleTable, priorityClusterExempt, match(openflow.IPv4(), regMatch(PktSourceField, FromGateway), hostPrefix(n.GatewayIP, openflow.NwSrc)),
			openflow.GotoTable(IngressPeerClassTable)),
		flow(AdminIngressRuleTable, priorityClusterExempt, match(openflow.IPv4(), regMatch(PktSourceField, FromGateway), hostPrefix(n.NodeIP, openflow.NwSrc)),
			openflow.GotoTable(IngressPeerClassTable)),
		flow(AdminIngressRuleTable, priorityClusterExempt, match(openflow.IPv4(), regMatch(PktSourceField, FromLocal), hostPrefix(n.NodeIP, openflow.NwSrc)),
			openflow.GotoTable(IngressPeerClassTable)),
		flow(AdminEgressRuleTable, priorityMiss, nil, openflow.GotoTable(EgressPeerClassTable)),
		flow(AdminIngressRuleTable, priorityMiss, nil, openflow.GotoTable(IngressPeerClassTable)),
		flow(BaselineEgressRuleTable, priorityMiss, nil, openflow.GotoTable(EgressMetricTable)),
		flow(BaselineIngressRuleTable, priorityMiss, nil, openflow.GotoTable(IngressMetricTable)),
		// The peer classes' miss: no prefix of an ipBlock with exceptions covers the address
		// (class 0); NetworkPolicy adds the prefixes (CategoryPolicy).
		flow(EgressPeerClassTable, priorityMiss, nil, openflow.GotoTable(EgressRuleTable)),
		flow(IngressPeerClassTable, priorityMiss, nil, openflow.GotoTable(IngressRuleTable)),
		flow(EgressRuleTable, priorityMiss, nil, openflow.GotoTable(EgressDefaultTable)),
		flow(EgressDefaultTable, priorityMiss, nil, openflow.GotoTable(BaselineEgressRuleTable)),
		flow(EgressMetricTable, priorityMiss, nil, openflow.GotoTable(L3ForwardingTable)),
		flow(IngressRuleTable, priorityMiss, nil, openflow.GotoTable(IngressDefaultTable)),
		flow(IngressDefaultTable, priorityMiss, nil, openflow.GotoTable(BaselineIngressRuleTable)),
		flow(IngressMetricTable, priorityMiss, nil, openflow.GotoTable(ConntrackCommitTable)),
		// Packets routed to this node's gateway (from a remote node, through the tunnel) carry the
		// global virtual MAC; they get the gateway's.
		flow(L3ForwardingTable, priorityNormal, match(openflow.IPv4(), openflow.EthDst(GlobalVirtualMAC), openflow.NwDst(netip.PrefixFrom(n.GatewayIP, 32))),
			openflow.SetEthDst(n.GatewayMAC), openflow.GotoTable(L2ForwardingCalcTable)),
		flow(L3ForwardingTable, priorityLow, match(openflow.IPv4(), openflow.NwDst(n.PodCIDR)), openflow.GotoTable(L2ForwardingCalcTable)),
		flow(L3ForwardingTable, priorityLow, match(openflow.IPv4(), regMatch(PktSourceField, FromLocalPod), openflow.NwDst(netip.PrefixFrom(n.NodeIP, 32))),
			openflow.GotoTable(L2ForwardingCalcTable)),
		flow(L3ForwardingTable, priorityMiss, nil, openflow.GotoTable(L2ForwardingCalcTable)),
		flow(L2ForwardingCalcTable, priorityNormal, match(openflow.EthDst(n.GatewayMAC)),
			loadReg(TargetOFPortField, n.GatewayOFPort), loadReg(OFPortFoundField, 1), openflow.GotoTable(ingress)),
		flow(L2ForwardingCalcTable, priorityMiss, nil, openflow.GotoTable(ingress)),
		// New connections are committed with the ids of the rules that admitted them (counters.go)
		// and the incarnations of their local Pods (incarnation.go); a NodePort connection from the
		// uplink, whose ct_label keeps MACs where the egress id and the incarnations would go, with
		// its ingress rule's alone (it has no egress rule) and its endpoint's incarnation in ct_mark.
		flow(ConntrackCommitTable, priorityLow, match(openflow.IPv4(), openflow.CTState(openflow.CTNew|openflow.CTTrk, 0)),
			openflow.CT(openflow.CTAction{Commit: true, Table: ptr(L2ForwardingOutTable), Zone: ConntrackZone, Exec: commitNew()})),
		flow(ConntrackCommitTable, priorityLow+1, match(openflow.IPv4(), openflow.CTState(openflow.CTNew|openflow.CTTrk, 0), openflow.CTMark(ServiceExternalCTMark, ServiceExternalCTMark)),
			openflow.CT(openflow.CTAction{Commit: true, Table: ptr(L2ForwardingOutTable), Zone: ConntrackZone, Exec: commitNewExternal()})),
		flow(ConntrackCommitTable, priorityMiss, nil, openflow.GotoTable(L2ForwardingOutTable)),
		flow(L2ForwardingOutTable, priorityLow, match(regMatch(OFPortFoundField, 1)), openflow.OutputReg(TargetOFPortField.Reg, TargetOFPortField.Start, TargetOFPortField.End)),
		flow(L2ForwardingOutTable, priorityMiss, nil, openflow.Drop()),
	)
}

// snatFlows implement SNAT of Pod-to-external traffic to the node IP, as the Antrea Windows design
// specifies: L3Forwarding marks it (reg0[17]) unless the destination is in NoSNAT; ConntrackCommit
// commits it with nat(src=NodeIP) and ct_mark 0x40; L2ForwardingOut sends it out on the gateway, from
// where the host forwards it to the bridge interface and the uplink. Traffic L3Forwarding sends to
// the host this way gets the gateway's MAC: a Pod addresses its own packets to it already, but a
// Service connection DNATed to an endpoint outside the cluster (the API server behind the kubernetes
// Service) carries the global virtual MAC, and the host's stack drops frames that are not addressed
// to it.
func (n Node) snatFlows() []openflow.Flow {
	out := []openflow.Flow{
		flow(L3ForwardingTable, prioritySNAT, match(openflow.IPv4(), regMatch(PktSourceField, FromLocalPod)),
			loadReg(SNATRequiredField, 1), openflow.SetEthDst(n.GatewayMAC), openflow.GotoTable(L2ForwardingCalcTable)),
		flow(ConntrackCommitTable, priorityNormal, match(openflow.IPv4(), openflow.CTState(openflow.CTNew|openflow.CTTrk, 0), regMatch(SNATRequiredField, 1)),
			openflow.CT(openflow.CTAction{Commit: true, Table: ptr(L2ForwardingOutTable), Zone: ConntrackZone, SNAT: n.NodeIP,
				Exec: append([]openflow.Action{openflow.SetCTMark(SNATCTMark, 0xffffffff)}, commitNew()...)})),
		flow(L2ForwardingOutTable, priorityNormal, match(openflow.IPv4(), regMatch(SNATRequiredField, 1)), openflow.Output(n.GatewayOFPort)),
	}
	for _, p := range n.NoSNAT {
		if !p.Addr().Is4() {
			continue
		}
		out = append(out, flow(L3ForwardingTable, prioritySkip, match(openflow.IPv4(), regMatch(PktSourceField, FromLocalPod), openflow.NwDst(p)),
			openflow.SetEthDst(n.GatewayMAC), openflow.GotoTable(L2ForwardingCalcTable)))
	}
	return out
}

func ptr[T any](v T) *T { return &v }
