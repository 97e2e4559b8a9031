package v1alpha1

// Condition types of WindowsNodeNetwork. Each names one component the agent converges, in the order
// it converges them; Ready is True when all of them are.
const (
	// ReadyCondition summarises the node network: True when every component below is True.
	ReadyCondition = "Ready"
	// HostSwitchReadyCondition: the HNS Transparent network exists on the uplink and its Hyper-V switch
	// runs the Open vSwitch extension.
	HostSwitchReadyCondition = "HostSwitchReady"
	// BridgeReadyCondition: the OVS bridge exists and its LOCAL interface carries the host's IP, MAC
	// and routes.
	BridgeReadyCondition = "BridgeReady"
	// UplinkReadyCondition: the uplink adapter is a port of the bridge.
	UplinkReadyCondition = "UplinkReady"
	// GatewayReadyCondition: the gateway port has its address, forwarding is on and the local Pod CIDR
	// is routed through it.
	GatewayReadyCondition = "GatewayReady"
	// TunnelReadyCondition: the tunnel port exists with the configured type, VNI and port (True with
	// reason TunnelNotRequired in NoEncap mode).
	TunnelReadyCondition = "TunnelReady"
	// PipelineReadyCondition: the base OpenFlow pipeline, SNAT included, is installed.
	PipelineReadyCondition = "PipelineReady"
	// RoutesReadyCondition: every RemoteSubnetRoute that applies to the node is installed.
	RoutesReadyCondition = "RoutesReady"
	// ServicesReadyCondition: the cluster's Services are realised in OVS (groups, flows, host
	// routes). It is not part of Ready: a node whose Services lag still networks its Pods.
	ServicesReadyCondition = "ServicesReady"
	// PoliciesReadyCondition: the NetworkPolicies selecting the node's Pods are realised in OVS.
	// It is not part of Ready: a node whose policies lag still networks its Pods.
	PoliciesReadyCondition = "PoliciesReady"
	// PreflightCondition: the node's fitness for winnet as the agent's preflight found it at its
	// start (`winnet-agent preflight`): True when no check failed (reason PreflightPassed, or
	// PreflightWarnings with the warnings in the message), False when some did (PreflightFailed,
	// the failed checks and their fixes in the message). It is not part of Ready and blocks nothing.
	PreflightCondition = "Preflight"
)

// Reasons of the Preflight condition of WindowsNodeNetwork, also those of the agent's Event.
const (
	// PreflightPassedReason: every check passed (or does not apply on this platform).
	PreflightPassedReason = "PreflightPassed"
	// PreflightWarningsReason: no check failed, some warned.
	PreflightWarningsReason = "PreflightWarnings"
	// PreflightFailedReason: some checks failed.
	PreflightFailedReason = "PreflightFailed"
)

// Condition types winnet-controller writes on ClusterNetworkPolicies (policy.networking.k8s.io,
// whose API leaves the conditions to the implementation), from the agents' reports
// (NetworkPoliciesStatus.ClusterNetworkPolicyReport, or ClusterNetworkPolicies from agents before
// 0.2.0).
const (
	// RealisedCondition: every winnet node realises the policy's current generation whole (True,
	// RealisedReason); some part is not realised on some node (False, PartlyRealisedReason, the
	// message says what and where); some node has not reported the current generation yet
	// (Unknown, ProgressingReason); some node's report is capped and may leave it out of what it
	// does not realise (Unknown, NotReportedReason).
	RealisedCondition = "Realised"
)

// Condition types of RemoteSubnetRoute.
const (
	// AcceptedCondition: winnet-controller validated the route and agents will install it.
	AcceptedCondition = "Accepted"
	// ConflictCondition: the route's CIDRs overlap another route or a node's Pod CIDR, or repeat a CIDR
	// of an older route of the same node; agents skip it.
	ConflictCondition = "Conflict"
)

// PodEndpoint's only condition type is ReadyCondition: the HNS endpoint, the OVS port and the Pod's
// flows are in place.

// Condition reasons shared by the kinds.
const (
	// ReadyReason: the component is converged.
	ReadyReason = "Ready"
	// ProgressingReason: the agent is converging the component.
	ProgressingReason = "Progressing"
	// InvalidSpecReason: the spec cannot be realised on this host (the message says why); the agent
	// waits for a corrected spec.
	InvalidSpecReason = "InvalidSpec"
	// DependencyNotReadyReason: a component this one is built on is not ready (the message names it).
	DependencyNotReadyReason = "DependencyNotReady"
	// DeletingReason: the object is being deleted and its host state torn down.
	DeletingReason = "Deleting"
)

// Condition reasons of WindowsNodeNetwork components.
const (
	// ComponentsNotReadyReason: Ready is False because the components named in the message are not.
	ComponentsNotReadyReason = "ComponentsNotReady"
	// HNSNetworkFailedReason: HNS refused or timed out creating the network (0x57 means the adapter is
	// bound to another network).
	HNSNetworkFailedReason = "HNSNetworkFailed"
	// OVSExtensionDisabledReason: the network exists but its switch does not run the OVS extension.
	OVSExtensionDisabledReason = "OVSExtensionDisabled"
	// UplinkNotFoundReason: no adapter has the configured name or holds nodeIP.
	UplinkNotFoundReason = "UplinkNotFound"
	// HostAddressMoveFailedReason: the host's IP, MAC or routes could not be moved to the bridge.
	HostAddressMoveFailedReason = "HostAddressMoveFailed"
	// OVSUnavailableReason: ovsdb-server or ovs-vswitchd cannot be reached.
	OVSUnavailableReason = "OVSUnavailable"
	// FlowInstallFailedReason: the switch rejected the OpenFlow bundle.
	FlowInstallFailedReason = "FlowInstallFailed"
	// TunnelNotRequiredReason: NoEncap mode needs no tunnel port.
	TunnelNotRequiredReason = "TunnelNotRequired"
	// RoutesFailedReason: some RemoteSubnetRoutes could not be installed (the message names them).
	RoutesFailedReason = "RoutesFailed"
	// HostRebootedReason: the agent found HNS state gone and stale OVS state (a reboot) and is
	// rebuilding the node network in order.
	HostRebootedReason = "HostRebooted"
)

// Condition reasons of RemoteSubnetRoute.
const (
	// AcceptedReason: the route is valid and does not conflict.
	AcceptedReason = "Accepted"
	// NoConflictReason: Conflict is False.
	NoConflictReason = "NoConflict"
	// OverlapReason: Conflict is True; the message names the overlapping object and CIDRs.
	OverlapReason = "Overlap"
	// DuplicateReason: Conflict is True; another route of the same node claims the same CIDR, which
	// would be the same flow match, and wins: the older route (creationTimestamp, then name) is
	// installed, the newer one is not.
	DuplicateReason = "Duplicate"
)

// Condition reasons of PodEndpoint.
const (
	// EndpointMissingReason: the HNS endpoint is gone and the agent is recreating it.
	EndpointMissingReason = "EndpointMissing"
	// ServicesFailedReason: the agent could not program the Services into OVS.
	ServicesFailedReason = "ServicesFailed"
	// PoliciesFailedReason: the agent could not program the NetworkPolicies into OVS.
	PoliciesFailedReason = "PoliciesFailed"
	// PolicyRulesRefusedReason: PoliciesReady is False because rules of NetworkPolicies exceed the
	// agent's size limit (the message names the policies and rules): they admit nothing, the rest
	// of the policies is realised.
	PolicyRulesRefusedReason = "PolicyRulesRefused"
	// RealisedReason: every winnet node realises the ClusterNetworkPolicy whole.
	RealisedReason = "Realised"
	// PartlyRealisedReason: some part of the ClusterNetworkPolicy is not realised on some node.
	PartlyRealisedReason = "PartlyRealised"
	// NotReportedReason: a node does not realise whole more ClusterNetworkPolicies than its report
	// lists (ClusterNetworkPolicyReport.NotRealisedOmitted), and this one may be among them.
	NotReportedReason = "NotReported"
	// PortMissingReason: the OVS port is gone and the agent is recreating it.
	PortMissingReason = "PortMissing"
	// WaitingForVNICReason: the endpoint and the Pod's flows are in place; the OVS port waits for
	// the endpoint's vNIC, which appears when the runtime starts the sandbox after CNI ADD.
	WaitingForVNICReason = "WaitingForVNIC"
	// PoliciesPendingReason: the NetworkPolicy flows for the Pod were not committed within the
	// agent's wait; its port stays unbound (the Pod isolated) until they are.
	PoliciesPendingReason = "PoliciesPending"
	// VNICMissingReason: the endpoint's vNIC did not appear within the agent's wait after ADD.
	VNICMissingReason = "VNICMissing"
	// PodGoneReason: the Pod no longer exists; the attachment is being torn down.
	PodGoneReason = "PodGone"
)

// Condition types of Egress. ReadyCondition is the other: the holding node puts egressIP on its
// uplink and SNATs the selected Pods' connections to it.
const (
	// AssignedCondition: winnet-controller chose the node that holds egressIP (status.node).
	AssignedCondition = "Assigned"
	// SupersededCondition: some Pods this Egress selects are selected by an older Egress too,
	// whose egressIP they use (the message names it and counts them); False when none is.
	SupersededCondition = "Superseded"
)

// Condition reasons of Egress.
const (
	// EgressAssignedReason: Assigned is True; status.node holds egressIP.
	EgressAssignedReason = "Assigned"
	// NoEligibleNodeReason: no Ready winnet node matches nodeSelector and has egressIP on its
	// uplink subnet (the message says how many nodes fail which test).
	NoEligibleNodeReason = "NoEligibleNode"
	// IPConflictReason: egressIP is a node's address, an address of the cluster's Pod or Service
	// CIDRs, or the egressIP of an older Egress (creationTimestamp, then name), which keeps it.
	IPConflictReason = "IPConflict"
	// NoEncapRefusedReason: the node that would hold egressIP runs in NoEncap mode, where the Pods
	// of other nodes cannot be carried to it; winnet assigns Egresses to Encap and Hybrid nodes only.
	NoEncapRefusedReason = "NoEncap"
	// EgressReleasingReason: Assigned is False while egressIP moves away from status.node, which has
	// not surely given it up yet: its agent reports it released, or its Egress Lease has been expired
	// for the Lease's duration (the fencing bound) again; then another node takes it.
	EgressReleasingReason = "Releasing"
	// EgressRealisedReason: Ready is True; the node holds egressIP and SNATs to it.
	EgressRealisedReason = "Realised"
	// EgressPendingReason: Ready is False; the node does not report egressIP realised yet.
	EgressPendingReason = "Pending"
	// NotAssignedReason: Ready is False because Assigned is.
	NotAssignedReason = "NotAssigned"
	// OlderEgressSelectsPodsReason: Superseded is True; the message names the older Egress.
	OlderEgressSelectsPodsReason = "OlderEgressSelectsPods"
	// NoOverlapReason: Superseded is False.
	NoOverlapReason = "NoOverlap"
)
