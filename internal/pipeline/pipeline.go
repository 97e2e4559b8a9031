package pipeline

import (
	"net"
	"net/netip"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/ovs/openflow"
)

// The tables of the pipeline, in the order a packet walks them. Table IDs appear nowhere else.
const (
	// ClassifierTable marks the packet's source in PktSourceField and sends host traffic between
	// the uplink and the bridge's LOCAL port straight through.
	ClassifierTable uint8 = 0
	// TunnelAdmissionTable admits what arrives on the tunnel port only from a peer's tunnel endpoint
	// (tun_src, the node IP of a RemoteSubnetRoute) with the peer's VNI and an inner source the peer
	// owns (its Pod CIDRs, its node IP): RouteFlows. The rest is dropped by flows whose priority tells
	// the reason (TunnelDropReasons); traffic carrying a peer's inner source from another address also
	// records that address in TunnelSourceSeenTable. With admission off (Node.TunnelAdmission false)
	// one flow admits every IPv4 packet.
	TunnelAdmissionTable uint8 = 1
	// TunnelClassifierTable marks admitted tunnel traffic as FromTunnel and routes it (TTL, MAC).
	TunnelClassifierTable uint8 = 2
	// TunnelSourceSeenTable holds only flows learned by TunnelAdmissionTable: one per tunnel source
	// from which a peer's inner sources arrived, cookie CategoryTunnelSeen with the peer's route
	// object, for TunnelSeenTimeout seconds. No packet walks it; the agent reads it to say which
	// address a peer's dropped traffic comes from.
	TunnelSourceSeenTable uint8 = 3
	// SpoofGuardTable admits a Pod's packets only with the Pod's own MAC and IP.
	SpoofGuardTable uint8 = 10
	// ARPResponderTable answers ARP for remote gateways with the global virtual MAC.
	ARPResponderTable uint8 = 20
	// ConntrackTable sends IP packets through conntrack in ConntrackZone, un-NATing replies. The
	// Services' UnSNAT stage is its first pass: packets to the gateway IP (the Service SNAT
	// address) that have not been through conntrack yet are un-SNATed in ServiceSNATZone and
	// recirculated into this table, so replies are un-SNATed before they are un-DNATed.
	ConntrackTable uint8 = 30
	// ConntrackStateTable steers SNATed replies from the uplink to their Pod, new NodePort
	// connections from the uplink to DNATTable, and replies of NodePort connections from the
	// uplink back out of it.
	ConntrackStateTable uint8 = 31
	// DNATTable load-balances new connections to a Service (ClusterIP, NodePort): a select group
	// per Service port whose buckets commit ct(nat(dst=endpoint)) in ConntrackZone.
	DNATTable uint8 = 40
	// AffinityTable holds the flows learned by the buckets of Service ports with session affinity
	// ClientIP: one per (client, Service address, port), loading the endpoint chosen for that client
	// into AffinityEndpointIPField and AffinityEndpointField, for hard_timeout = timeoutSeconds.
	// DNATTable resubmits new connections of such ports here, then goes to AffinityDNATTable.
	AffinityTable uint8 = 42
	// AffinityDNATTable DNATs a new connection to the endpoint AffinityTable remembered for its
	// client (one flow per Service port and endpoint), or sends it to the port's select group,
	// whose buckets learn the choice through AffinityLearnTable.
	AffinityDNATTable uint8 = 43
	// AffinityLearnTable learns a Service port's choice of endpoint into AffinityTable: the port's
	// buckets load the endpoint into registers and resubmit here (OVS does not run a learn action
	// placed in a group bucket itself: it is skipped silently, on every datapath).
	AffinityLearnTable uint8 = 44
	// EndpointDNATTable receives the connections a DNATTable group DNATed: they get the global
	// virtual MAC (L3Forwarding delivers them like routed packets) and go on to L3Forwarding.
	EndpointDNATTable uint8 = 45
	// AdminEgressRuleTable is the Admin tier of ClusterNetworkPolicy for egress, the first policy
	// stage: established and related packets skip every policy stage from here, through
	// EgressIncarnationTable; on new connections each Admin rule is one conjunction at an OVS priority of
	// its own (ClusterPriority), whose conj_id flow accepts (EgressMetricTable: NetworkPolicy and
	// Baseline skipped), denies (drop) or passes (EgressPeerClassTable, NetworkPolicy). Traffic from
	// a Pod to its own node and what no rule matches go on to NetworkPolicy.
	AdminEgressRuleTable uint8 = 46
	// EgressIncarnationTable is where established and related packets go from the egress policy
	// stages' skips: a packet from a local Pod goes on (EgressMetricTable) only when its connection
	// was committed with that Pod's incarnation (podIncarnationFlows), so that a connection of a Pod
	// deleted since never passes as established for the Pod its address went to. Packets from
	// elsewhere, and from Pods attached before incarnations (0), go on; the miss drops
	// (IncarnationDrops, counted).
	EgressIncarnationTable uint8 = 47
	// EgressPeerClassTable is the longest-prefix-match stage of egress ipBlocks with exceptions:
	// one flow per distinct CIDR or exception of the node's egress rules (priority
	// priorityPeerClass + prefix length) loads the class of the destination (the id of its longest
	// matching prefix) into EgressPeerClassField; EgressRuleTable matches the classes a rule admits.
	EgressPeerClassTable uint8 = 48
	// EgressRuleTable evaluates the egress rules of NetworkPolicies on new connections, after
	// Service DNAT (it sees the endpoint, not the ClusterIP): one conjunction per rule, whose
	// clauses are the source Pods' ports, the destinations and the destination ports; a
	// completed conjunction (conj_id) allows. Traffic from a Pod to its own node and to itself
	// skips the evaluation; established and related packets never reach it (they skip every
	// policy stage from AdminEgressRuleTable).
	EgressRuleTable uint8 = 50
	// EgressDefaultTable drops what no egress rule allowed from Pods isolated for egress.
	EgressDefaultTable uint8 = 60
	// BaselineEgressRuleTable is the Baseline tier of ClusterNetworkPolicy for egress: only what
	// NetworkPolicy did not decide reaches it (EgressDefaultTable's miss: Pods no egress
	// NetworkPolicy isolates); each rule is a conjunction at a priority of its own, whose conj_id
	// flow accepts or passes (EgressMetricTable) or denies (drop). The miss goes on.
	BaselineEgressRuleTable uint8 = 61
	// EgressMetricTable is where packets go once egress policy let them through.
	EgressMetricTable uint8 = 62
	// L3ForwardingTable routes: local Pods, remote subnets (tunnel or routed), and marks
	// Pod-to-external traffic for SNAT.
	L3ForwardingTable uint8 = 70
	// L2ForwardingCalcTable maps the destination MAC to the output port in TargetOFPortField.
	L2ForwardingCalcTable uint8 = 80
	// AdminIngressRuleTable is AdminEgressRuleTable for ingress, once the output port is known:
	// a rule's clauses are the sources, the target Pods' ports (TargetOFPortField) and the ports.
	AdminIngressRuleTable uint8 = 82
	// IngressIncarnationTable is EgressIncarnationTable for ingress: a packet to a local Pod
	// (TargetOFPortField) goes on (IngressMetricTable) only when its connection was committed with
	// that Pod's incarnation.
	IngressIncarnationTable uint8 = 83
	// IngressPeerClassTable is EgressPeerClassTable for ingress: it classifies the source into
	// IngressPeerClassField for IngressRuleTable.
	IngressPeerClassTable uint8 = 85
	// IngressRuleTable evaluates the ingress rules of NetworkPolicies on new connections, once
	// the output port is known: one conjunction per rule, whose clauses are the sources, the
	// target Pods' ports (TargetOFPortField) and the destination ports.
	IngressRuleTable uint8 = 90
	// IngressDefaultTable drops what no ingress rule allowed to Pods isolated for ingress.
	IngressDefaultTable uint8 = 100
	// BaselineIngressRuleTable is BaselineEgressRuleTable for ingress.
	BaselineIngressRuleTable uint8 = 101
	// IngressMetricTable is where packets go once ingress policy let them through.
	IngressMetricTable uint8 = 102
	// ConntrackCommitTable commits new connections, SNATing those marked for it. It is also the
	// Services' SNAT stage: L3Forwarding's flows go straight to L2ForwardingCalc or here, so a
	// Service SNAT table between them would never be reached; the Service SNAT flows (in
	// ServiceSNATZone) come first here.
	ConntrackCommitTable uint8 = 105
	// L2ForwardingOutTable outputs: SNATed traffic on the gateway, the rest on the port found.
	L2ForwardingOutTable uint8 = 110
)

// TableNames names every table, for logs and `kubectl describe`.
var TableNames = map[uint8]string{
	ClassifierTable:          "Classifier",
	TunnelAdmissionTable:     "TunnelAdmission",
	TunnelClassifierTable:    "TunnelClassifier",
	TunnelSourceSeenTable:    "TunnelSourceSeen",
	SpoofGuardTable:          "SpoofGuard",
	ARPResponderTable:        "ARPResponder",
	ConntrackTable:           "Conntrack",
	ConntrackStateTable:      "ConntrackState",
	DNATTable:                "DNAT",
	AffinityTable:            "SessionAffinity",
	AffinityDNATTable:        "AffinityDNAT",
	AffinityLearnTable:       "AffinityLearn",
	EndpointDNATTable:        "EndpointDNAT",
	AdminEgressRuleTable:     "AdminEgressRule",
	EgressIncarnationTable:   "EgressIncarnation",
	EgressPeerClassTable:     "EgressPeerClass",
	EgressRuleTable:          "EgressRule",
	EgressDefaultTable:       "EgressDefaultRule",
	BaselineEgressRuleTable:  "BaselineEgressRule",
	EgressMetricTable:        "EgressMetric",
	L3ForwardingTable:        "L3Forwarding",
	L2ForwardingCalcTable:    "L2ForwardingCalc",
	AdminIngressRuleTable:    "AdminIngressRule",
	IngressIncarnationTable:  "IngressIncarnation",
	IngressPeerClassTable:    "IngressPeerClass",
	IngressRuleTable:         "IngressRule",
	IngressDefaultTable:      "IngressDefaultRule",
	BaselineIngressRuleTable: "BaselineIngressRule",
	IngressMetricTable:       "IngressMetric",
	ConntrackCommitTable:     "ConntrackCommit",
	L2ForwardingOutTable:     "L2ForwardingOut",
}

// RegField is a bit range of a NXM register.
type RegField struct {
	Reg        int
	Start, End int
}

// Register marks. Every bit the pipeline uses is declared here:
//
//	reg0[0..15]  PktSourceField: where the packet entered (FromTunnel .. FromLocal)
//	reg0[16]     OFPortFoundField: L2ForwardingCalc (or a route) put the output port in reg1
//	reg0[17]     SNATRequiredField: Pod-to-external traffic, SNATed in ConntrackCommit
//	reg0[18]     ServiceSNATField: a new NodePort connection from the uplink to an endpoint on
//	             another node, or from the host to its own NodePort (HostGroup), SNATed to the
//	             gateway IP in ServiceSNATZone (ConntrackCommit)
//	reg0[19]     HairpinField: a packet of a Pod's connection to itself through a Service, output
//	             on the port it came in on (OVS never outputs to in_port otherwise)
//	reg0[20]     EgressRelayField: a selected local Pod's new connection to outside the cluster,
//	             relayed through the tunnel to the node holding its Egress, committed with
//	             EgressRelayCTMark (ConntrackCommit)
//	reg0[21]     EgressReplyField: a packet the tunnel admitted from an Egress's holder to a selected
//	             local Pod with a source outside the cluster: it goes on only as a reply of a
//	             connection committed with EgressRelayCTMark (ConntrackStateTable)
//	reg1[0..31]  TargetOFPortField: the output port
//	reg2[0..31]  EgressPeerClassField: the class of the destination among the prefixes of the
//	             node's egress ipBlocks with exceptions (EgressPeerClassTable; 0: none covers it)
//	reg3[0..31]  AffinityEndpointIPField: the endpoint a learned session-affinity flow chose
//	reg4[0..31]  AffinityEndpointField: its port (bits 0..15) and the Service port's cluster group
//	             (bits 16..31, never 0), so that a choice learned for one Service port is used
//	             by that port only (AffinityPortField)
//	reg5[0..31]  AffinityTimeoutField: the timeout the learned flow was learned with, so that a
//	             choice learned under another timeout is not used (and is learned again)
//	reg6[0..31]  IngressPeerClassField: the class of the source among the prefixes of the node's
//	             ingress ipBlocks with exceptions (IngressPeerClassTable; 0: none covers it)
//	reg8[0..31]  EgressRuleField: the id of the egress rule (NetworkPolicy or ClusterNetworkPolicy
//	             Accept) that admitted a new connection, loaded by its deciding flow (0: none);
//	             committed into ct_label[64..95] (EgressRuleLabel), counted in EgressMetricTable
//	reg9[0..31]  IngressRuleField: the same for ingress, into ct_label[96..127] (IngressRuleLabel),
//	             counted in IngressMetricTable
//	reg10[0..31] SrcIncarnationField: the incarnation of the local Pod that sent the packet
//	             (SpoofGuardTable; 0: not from a local Pod, or from one attached before
//	             incarnations), committed into ct_label[0..31] (SrcIncarnationLabel)
//	reg7[0..7]   packet traces' marks (trace.go: traceReportedDNAT, traceTagField)
//	reg12[0..31] EgressField: the id of the Egress whose IP a local Pod's new connection to outside
//	             the cluster is SNATed to (L3ForwardingTable; 0: none, the node's SNAT applies)
//	reg11[0..31] DstIncarnationField: the incarnation of the local Pod the packet goes to
//	             (L2ForwardingCalcTable), committed into ct_label[32..63] (DstIncarnationLabel), or
//	             for a NodePort connection from the uplink into ct_mark[16..31]
var (
	PktSourceField          = RegField{Reg: 0, Start: 0, End: 15}
	OFPortFoundField        = RegField{Reg: 0, Start: 16, End: 16}
	SNATRequiredField       = RegField{Reg: 0, Start: 17, End: 17}
	ServiceSNATField        = RegField{Reg: 0, Start: 18, End: 18}
	HairpinField            = RegField{Reg: 0, Start: 19, End: 19}
	EgressRelayField        = RegField{Reg: 0, Start: 20, End: 20}
	EgressReplyField        = RegField{Reg: 0, Start: 21, End: 21}
	TargetOFPortField       = RegField{Reg: 1, Start: 0, End: 31}
	AffinityEndpointIPField = RegField{Reg: 3, Start: 0, End: 31}
	AffinityEndpointField   = RegField{Reg: 4, Start: 0, End: 31}
	AffinityPortField       = RegField{Reg: 4, Start: 16, End: 31}
	AffinityTimeoutField    = RegField{Reg: 5, Start: 0, End: 31}
	EgressPeerClassField    = RegField{Reg: 2, Start: 0, End: 31}
	IngressPeerClassField   = RegField{Reg: 6, Start: 0, End: 31}
	EgressRuleField         = RegField{Reg: 8, Start: 0, End: 31}
	IngressRuleField        = RegField{Reg: 9, Start: 0, End: 31}
	EgressField             = RegField{Reg: 12, Start: 0, End: 31}
	SrcIncarnationField     = RegField{Reg: 10, Start: 0, End: 31}
	DstIncarnationField     = RegField{Reg: 11, Start: 0, End: 31}
)

// ct_label of ConntrackZone (and of a UDP Service port's own zone) is 128 bits:
//
//	[0..47]   the client side's MAC of a NodePort connection from the uplink (ServiceExternalCTMark)
//	[48..95]  the node's MAC of such a connection
//	[64..95]  EgressRuleLabel: the egress rule that admitted the connection (EgressRuleField), on
//	          every other connection; a connection from the uplink has no egress rule, so its MAC
//	          bits are never written over (its commit moves the ingress rule alone), and the egress
//	          counters skip it (ct_mark without ServiceExternalCTMark)
//	[96..127] IngressRuleLabel: the ingress rule that admitted the connection (IngressRuleField)
//	[0..31]   SrcIncarnationLabel: the incarnation of the local Pod that opened the connection
//	          (SrcIncarnationField), on every connection but those from the uplink (whose client
//	          is never a local Pod)
//	[32..63]  DstIncarnationLabel: the incarnation of the local Pod the connection goes to
//	          (DstIncarnationField), on the same connections; a NodePort connection from the
//	          uplink keeps it in ct_mark[16..31] (IncarnationCTMarkShift) instead
//
// The rule ids are written by the commit that ends a new connection's walk (ConntrackCommitTable),
// so that its later packets, in both directions, are counted per rule in the metric tables. A
// Service connection SNATed in ServiceSNATZone (hairpin, the host's own NodePorts, clients from the
// uplink reaching another node's endpoint) keeps them in the zone it is DNATed in (ConntrackZone,
// or its UDP port's own), where its packets are tracked when they pass the metric tables: the
// flow that SNATs it first commits it there (admit), never in ServiceSNATZone, whose ct_label
// is never read.
const (
	// EgressRuleLabel is the first bit of ct_label that keeps the id of the egress rule that
	// admitted the connection (EgressRuleField), for its counters.
	EgressRuleLabel = 64
	// IngressRuleLabel is the first bit of ct_label that keeps the id of the ingress rule that
	// admitted the connection (IngressRuleField), for its counters.
	IngressRuleLabel = 96
	// SrcIncarnationLabel and DstIncarnationLabel are the first bits of ct_label that keep the
	// incarnations of the connection's local Pods (incarnation.go).
	SrcIncarnationLabel = 0
	DstIncarnationLabel = 32
)

// Values of PktSourceField.
const (
	FromTunnel   uint32 = 0
	FromGateway  uint32 = 1
	FromLocalPod uint32 = 2
	FromUplink   uint32 = 3
	FromLocal    uint32 = 4
)

// Flow categories: each feature's flows are synced as one category, stamped into the cookies.
const (
	// CategoryClassifier holds the base flows of ClassifierTable and SpoofGuardTable: where a packet
	// entered, and host traffic passed straight through.
	CategoryClassifier uint8 = 1
	// CategoryConntrack holds the base flows of ConntrackTable and ConntrackStateTable.
	CategoryConntrack uint8 = 2
	// CategoryForwarding holds the base flows of the forwarding stages (L3Forwarding,
	// L2ForwardingCalc, ConntrackCommit, L2ForwardingOut) and the policy tables' defaults (what
	// passes them when no policy isolates a Pod).
	CategoryForwarding uint8 = 3
	// CategorySNAT holds the flows that SNAT Pod-to-external traffic to the node IP (marked in
	// L3Forwarding, committed with nat(src=NodeIP) in ConntrackCommit).
	CategorySNAT uint8 = 4
	// CategoryPod holds the flows of every local Pod; the object part of the cookie is the ofport.
	CategoryPod uint8 = 5
	// CategoryRoute holds the flows of every remote route.
	CategoryRoute uint8 = 6
	// CategoryService holds the flows of every Service, and the Services' base flows (object 0).
	CategoryService uint8 = 7
	// CategoryPolicy holds the flows of every NetworkPolicy rule, the default-deny flows of
	// isolated Pods and the policy exemptions (own node, self).
	CategoryPolicy uint8 = 8
	// CategoryAffinityLearned is the cookie category of the flows session affinity learns into
	// AffinityTable (never synced: ovs-vswitchd adds them); the object part holds the Service
	// port's cluster group and the timeout, so that a learning flow that changes (or goes) takes
	// the flows it learned with it (learn's delete_learned).
	CategoryAffinityLearned uint8 = 9
	// CategoryTunnelSeen is the cookie category of the flows TunnelAdmissionTable learns into
	// TunnelSourceSeenTable (never synced: ovs-vswitchd adds them); the object part is the object of
	// the route whose inner sources arrived from the learned address, and they go with the route's
	// flows (delete_learned).
	CategoryTunnelSeen uint8 = 10
	// CategoryTrace holds the flows of every running packet trace on the node; the object part of
	// the cookie is TraceCookieObject.
	CategoryTrace uint8 = 11
	// CategoryEgress holds the flows of the Egresses (EgressFlows): on their holder the SNAT of the
	// selected Pods' connections (local and relayed) to the egress IP and the drops of other traffic
	// to it; on other nodes the relay of their selected Pods' connections to the holder.
	CategoryEgress uint8 = 12
)

// CategoryPolicy's cookie objects of the policy counter flows (PolicyCounterObject): bit 38 set
// and bit 39 clear, which no other policy flow has (PolicyPeerObject and ClusterRuleObject set bit
// 39, the rest is object 0).
const policyCounterBit uint64 = 1 << 38

// TunnelSeenLimit caps the flows of TunnelSourceSeenTable (the bridge's flow_limit for it): at most
// that many addresses a peer's inner sources arrived from are remembered at once, however many
// outer sources a forger uses; a learn beyond it is refused by ovs-vswitchd (the packet is dropped
// all the same).
const TunnelSeenLimit = 1024

// TunnelSeenTimeout is how long (seconds) TunnelSourceSeenTable remembers an address a peer's inner
// sources arrived from after its last packet.
const TunnelSeenTimeout uint16 = 60

// Priorities of TunnelAdmissionTable; each drop priority is one reason (TunnelDropReasons).
const (
	// priorityTunnelOpen admits everything when admission is off.
	priorityTunnelOpen = priorityTop
	// priorityTunnelAdmit: a peer's address, its VNI, an inner source it owns.
	priorityTunnelAdmit = priorityNormal
	// priorityTunnelNotOwned: a peer's address and VNI, an inner source it does not own (or not IPv4).
	priorityTunnelNotOwned uint16 = 195
	// priorityTunnelEgressReply: the Egress holder's address and VNI, to a selected local Pod, an
	// inner source outside the cluster: marked (EgressReplyField) for ConntrackStateTable, which
	// lets only replies of relayed connections through. Above priorityTunnelNotOwned.
	priorityTunnelEgressReply uint16 = 197
	// priorityTunnelWrongVNI: a peer's address with another VNI than the peer's.
	priorityTunnelWrongVNI = priorityLow
	// priorityTunnelPeerElsewhere: a peer's inner source from an address that is no peer's (NAT
	// between the nodes, a flannel public-ip unlike the arrival address, or a forgery); learned.
	priorityTunnelPeerElsewhere = prioritySkip
	// priorityMiss: no peer's address and no peer's inner source.
)

// The reasons of tunnel admission drops, as metric labels.
const (
	TunnelDropUnknownSource = "unknown-source"
	TunnelDropNotOwned      = "inner-source-not-owned"
	TunnelDropWrongVNI      = "wrong-vni"
	TunnelDropPeerElsewhere = "peer-from-other-address"
)

// TunnelDropReasons maps the priority of each drop flow of TunnelAdmissionTable to its reason.
var TunnelDropReasons = map[uint16]string{
	priorityTunnelNotOwned:      TunnelDropNotOwned,
	priorityTunnelWrongVNI:      TunnelDropWrongVNI,
	priorityTunnelPeerElsewhere: TunnelDropPeerElsewhere,
	priorityMiss:                TunnelDropUnknownSource,
}

// BaseCategories are the categories of Node.Features, in install order.
var BaseCategories = []uint8{CategoryClassifier, CategoryConntrack, CategoryForwarding, CategorySNAT}

// InstalledCategories are every category whose flows winnet installs (the learned categories,
// CategoryAffinityLearned and CategoryTunnelSeen, are ovs-vswitchd's): what a node's flow count
// (WindowsNodeNetwork status.flowCount) sums.
var InstalledCategories = []uint8{CategoryClassifier, CategoryConntrack, CategoryForwarding, CategorySNAT,
	CategoryPod, CategoryRoute, CategoryService, CategoryPolicy, CategoryTrace, CategoryEgress}

// trackedProtocols are the IPv4 protocols sent through conntrack: the ones Windows conntrack tracks.
var trackedProtocols = []uint8{openflow.ProtoTCP, openflow.ProtoUDP, openflow.ProtoICMP}

// icmpErrorTypes are the ICMPv4 errors for the node's own connections that go to the host without
// conntrack: destination unreachable (with fragmentation needed) and time exceeded.
var icmpErrorTypes = []uint8{3, 11}

// SNATCTMark marks connections SNATed to the node IP.
const SNATCTMark uint32 = 0x40

// ct_mark bits of Service connections (in ConntrackZone), set by the DNAT commit; none is 0x40,
// and SNAT flows match ct_mark=0x40 exactly:
//
//	0x10 ServiceCTMark: DNATed to a Service endpoint
//	0x20 ServiceSNATCTMark: also SNATed to the gateway IP in ServiceSNATZone (ServiceSNATField)
//	0x400 HostNodePortCTMark: the host's connection to one of its own NodePorts, which the host
//	      NATed to NodePortVirtualIP (its replies go back out on the gateway)
//	0x80 ServiceExternalCTMark: a NodePort connection from the uplink; ct_label[0..47] holds the
//	     client side's MAC and ct_label[48..95] the node's, for the replies sent back out of it
const (
	ServiceCTMark         uint32 = 0x10
	ServiceSNATCTMark     uint32 = 0x20
	ServiceExternalCTMark uint32 = 0x80
	HostNodePortCTMark    uint32 = 0x400
)

// HairpinCTMark marks, in ServiceSNATZone, a Pod's connection to itself through a Service: SNATed
// to the gateway IP so that the Pod answers through OVS, and output on the port it came from.
const HairpinCTMark uint32 = 0x200

// EgressRelayCTMark marks, in ConntrackZone, a connection a selected local Pod opened to outside the
// cluster whose Egress another node holds: its packets from the Pod follow it through the tunnel to
// the holder, and the holder's relayed replies are admitted for it alone (EgressRelayFlows). Set
// with its own mask: a Service connection keeps its bits.
const EgressRelayCTMark uint32 = 0x800

// PolicyAdmittedCTMark marks a Service connection that NetworkPolicy let through, set when it
// reaches ConntrackCommit. A Service connection is committed by its DNAT, before policy sees it, so
// a connection policy refuses exists in conntrack all the same; on Windows its next packets are
// established (+est-new: datapath-windows/ovsext Conntrack-other.c OvsConntrackUpdateOtherEntry
// returns CT_UPDATE_VALID for every later UDP packet), and skipping policy for them would let the
// refused connection through. Established Service connections skip policy only with this mark
// (the userspace datapath keeps them +new until a reply, so the tests' datapath cannot show it).
const PolicyAdmittedCTMark uint32 = 0x100

// ServiceSNATZone is the conntrack zone of Service SNAT: NAT is fixed at a connection's first
// commit, which for a Service connection is the DNAT in ConntrackZone, so the SNAT that follows
// needs a zone of its own.
const ServiceSNATZone uint16 = ConntrackZone + 1

// ConntrackZone is the conntrack zone of the pipeline.
const ConntrackZone uint16 = networkv1alpha1.ConntrackZone

// The zone budget of UDP Service ports: each UDP Service port DNATs in a conntrack zone of its own,
// from ServiceUDPZoneFirst to ServiceUDPZoneLast (4,080 zones, just below ConntrackZone), so that
// when one of its endpoints goes the agent can flush that zone whole (the only clean flush on
// Windows, see ServiceZoneFlush) without touching Pod SNAT (ConntrackZone), Service SNAT
// (ServiceSNATZone), TCP Services (ConntrackZone) or another UDP Service port. UDP ports beyond
// the budget DNAT in ConntrackZone like TCP ports, and their clients are not re-balanced when an
// endpoint goes (their conntrack entries stay until they time out). Zone 0 is never used: on
// Windows a flush of zone 0 flushes every zone.
const (
	ServiceUDPZoneFirst uint16 = 0xf000
	ServiceUDPZoneLast  uint16 = ConntrackZone - 1
)

// ServiceZoneCTMarkMask is where ConntrackZone's record of a UDP Service connection keeps the zone
// the connection is DNATed in (ct_mark[16..31], ServiceZoneCTMarkShift): a reply comes from the
// endpoint, which may serve several UDP Service ports, so only this record tells which zone
// un-DNATs it. A NodePort connection from the uplink keeps its local endpoint's incarnation in the
// same bits of the record its policy stages read (the zone it is DNATed in: IncarnationCTMarkShift),
// below ServiceUDPZoneFirst (MaxIncarnation), so that it is never taken for a zone. No other
// ct_mark bit above 0x400 is used but EgressRelayCTMark (0x800).
const (
	ServiceZoneCTMarkShift        = 16
	ServiceZoneCTMarkMask  uint32 = 0xffff0000
)

// GlobalVirtualMAC is the destination MAC of packets routed to remote Pods and of un-NATed replies
// on their way to a local Pod.
var GlobalVirtualMAC = mustMAC(networkv1alpha1.GlobalVirtualMAC)

// ServiceNextHop is the next hop of the host's routes to ClusterIPs through the gateway; the
// pipeline answers ARP for it with GlobalVirtualMAC. It is Antrea's choice of address.
var ServiceNextHop = netip.MustParseAddr("169.254.0.253")

// NodePortVirtualIP is where the host sends its own connections to its NodePorts: a host process
// connecting to one of the node's addresses never leaves the host's stack, so the host NATs it
// (on Windows a NetNat static mapping, on the simulated nodes an nftables output DNAT) to this
// address, same port, routed through the gateway to ServiceNextHop; the pipeline balances it over
// the port's endpoints (HostGroup). It is Antrea's virtual NodePort DNAT IP.
var NodePortVirtualIP = netip.MustParseAddr("169.254.0.252")

// Priorities used across tables.
const (
	// priorityHairpin and the affinity hits are above every other flow of their tables; a hit for
	// a client from the uplink is above one for any client.
	priorityHairpin uint16 = 230
	// The Service SNAT and hairpin flows of UDP ports in a zone of their own (zoneFlows): above
	// the ones they stand in for.
	priorityServiceZoneHairpin  uint16 = 231
	priorityServiceZoneSNAT     uint16 = 221
	priorityAffinityHit         uint16 = 230
	priorityAffinityHitExternal uint16 = 231
	priorityTop                 uint16 = 220
	// priorityServiceZone: the flows of a UDP Service port's own conntrack zone, above the
	// ConntrackZone flows they stand in for, below Service SNAT and hairpin.
	priorityServiceZone uint16 = 215
	priorityHigh        uint16 = 210
	// priorityAllowAll: a NetworkPolicy rule with one dimension only (its Pods: any peer, any
	// port) allows them directly, above the clause flows of conjunctions (OVS needs two clauses).
	priorityAllowAll uint16 = 205
	priorityNormal   uint16 = 200
	priorityLow      uint16 = 190
	// priorityCountAs: a merged rule's conj_id flow for a Pod counted under another rule's id
	// (PolicyRule.CountAs), above the rule's own; priorityTraceRule: a traced packet's report of the
	// rule that admitted it, above both.
	priorityCountAs   uint16 = priorityLow + 1
	priorityTraceRule uint16 = priorityLow + 2
	// priorityPeerClass is the base of the peer class stage's priorities: a prefix of length l
	// is at priorityPeerClass + l, so the longest prefix that matches wins.
	priorityPeerClass uint16 = 100
	prioritySkip      uint16 = 180
	// The Admin tier's tables (AdminEgressRuleTable, AdminIngressRuleTable) hold, above the band
	// of their rules: a new Pod's pending drop, the established-connection skips, the own-node
	// exemptions.
	priorityClusterPending uint16 = 65000
	priorityClusterSkip    uint16 = 64000
	priorityClusterExempt  uint16 = 63000
	// priorityEgressSNAT: a selected Pod's traffic to outside the cluster, SNATed to its Egress's
	// IP (EgressFlows): below the destinations never SNATed (prioritySkip), above the node's SNAT.
	priorityEgressSNAT uint16 = 150
	// priorityEgressReplyAdmit and priorityEgressReplyDrop: in ConntrackStateTable, above every
	// other flow, the tunnel's relayed Egress replies (EgressReplyField) go on only when they are
	// replies of a connection committed with EgressRelayCTMark; the rest is dropped.
	priorityEgressReplyAdmit uint16 = priorityTop + 2
	priorityEgressReplyDrop  uint16 = priorityTop + 1
	// priorityEgressReturn: on the holder, in L3Forwarding, an un-SNATed reply from the uplink to a
	// remote selected Pod goes back through the tunnel to the Pod's node, above the route (which in
	// Hybrid mode may route it unencapsulated, where its node would not admit it).
	priorityEgressReturn        = priorityHigh
	prioritySNAT         uint16 = 10
	priorityMiss         uint16 = 0
)

// The band of OVS priorities of ClusterNetworkPolicy rules in each tier's tables: every rule of a
// table has a priority of its own in ClusterPriorityLowest..ClusterPriorityHighest (59,001 rules
// per tier and direction), the rule evaluated first the highest, so that which rule decides is
// never left to OVS.
const (
	ClusterPriorityHighest uint16 = 60000
	ClusterPriorityLowest  uint16 = 1000
	// ClusterPriorityBeyondBand is where the Deny and Pass rules beyond a table's band fail closed:
	// below every rule of the band (which the API orders before them), above the table's miss
	// (the next tier, which they precede). They share it, each one drop per subject (every peer,
	// every port): rules that all drop need no order among themselves, and flows of one action at
	// one priority never conflict.
	ClusterPriorityBeyondBand uint16 = ClusterPriorityLowest - 1
)

func mustMAC(s string) net.HardwareAddr {
	mac, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return mac
}
