package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PacketTrace limits, enforced by the schema and by winnet-controller.
const (
	// MaxPacketTraceHops is the most nodes a trace records (a path crosses two or three).
	MaxPacketTraceHops = 8
	// MaxPacketTraceObservations is the most observations one node records for a trace.
	MaxPacketTraceObservations = 16
	// MaxPacketTraceTags is the number of DSCP values a trace can be tagged with (1..63): at most
	// that many traces run at once in the cluster; more wait in Pending.
	MaxPacketTraceTags = 63
	// DefaultPacketTraceTimeoutSeconds is spec.timeoutSeconds when it is not set.
	DefaultPacketTraceTimeoutSeconds = 20
)

// PacketTraceDisclosure is what a trace may name: what its creator was allowed to read when it was
// created (the chart's admission policy checks it with the creator's rights).
// +kubebuilder:validation:Enum=Namespace;Cluster
type PacketTraceDisclosure string

// Disclosure levels of a trace.
const (
	// PacketTraceDisclosureNamespace: the trace names the Pods and NetworkPolicies of its own
	// namespace and the destination its creator named; any other Pod, NetworkPolicy or
	// ClusterNetworkPolicy is named by its kind alone ("a NetworkPolicy of namespace N", "a Pod of
	// another namespace", "a ClusterNetworkPolicy of the Admin tier"). The names of the nodes on the
	// packet's path are shown (each node writes its own hop under its name).
	PacketTraceDisclosureNamespace PacketTraceDisclosure = "Namespace"
	// PacketTraceDisclosureCluster: the trace names every object that decided; only a creator who
	// may get Pods, Services and NetworkPolicies in every namespace and ClusterNetworkPolicies may
	// ask for it.
	PacketTraceDisclosureCluster PacketTraceDisclosure = "Cluster"
)

// PacketTraceProtocol is the IP protocol of a traced packet.
// +kubebuilder:validation:Enum=TCP;UDP;ICMP
type PacketTraceProtocol string

// Protocols of a traced packet.
const (
	PacketTraceTCP  PacketTraceProtocol = "TCP"
	PacketTraceUDP  PacketTraceProtocol = "UDP"
	PacketTraceICMP PacketTraceProtocol = "ICMP"
)

// ObjectReference names a namespaced object.
type ObjectReference struct {
	// namespace of the object; empty means the PacketTrace's namespace.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`
	// name of the object.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// PacketTraceSource is where the traced packet comes from.
type PacketTraceSource struct {
	// pod is the Pod that sends the packet; it must run on a winnet node.
	// +required
	Pod ObjectReference `json:"pod"`
}

// PacketTraceDestination is where the traced packet goes: exactly one of pod, ip and service.
//
// +kubebuilder:validation:XValidation:rule="[has(self.pod), has(self.ip), has(self.service)].filter(x, x).size() == 1",message="set exactly one of destination.pod, destination.ip and destination.service",reason=FieldValueInvalid
type PacketTraceDestination struct {
	// pod sends the packet to a Pod's address.
	// +optional
	Pod *ObjectReference `json:"pod,omitempty"`
	// ip sends the packet to an IPv4 address (a Pod, a node, an external host).
	// +optional
	IP IPv4Address `json:"ip,omitempty"`
	// service sends the packet to a Service's ClusterIP, on packet.dstPort (a Service port).
	// +optional
	Service *ObjectReference `json:"service,omitempty"`
}

// PacketTracePacket is the traced packet.
//
// +kubebuilder:validation:XValidation:rule="self.protocol == 'ICMP' || has(self.dstPort)",message="packet.dstPort is required for TCP and UDP",fieldPath=".dstPort",reason=FieldValueRequired
// +kubebuilder:validation:XValidation:rule="self.protocol != 'ICMP' || !has(self.dstPort)",message="packet.dstPort must not be set for ICMP (an echo request)",fieldPath=".dstPort",reason=FieldValueForbidden
type PacketTracePacket struct {
	// protocol is TCP (a SYN), UDP (an empty datagram) or ICMP (an echo request).
	// +optional
	// +kubebuilder:default=TCP
	Protocol PacketTraceProtocol `json:"protocol,omitempty"`
	// dstPort is the destination port (TCP, UDP).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	DstPort int32 `json:"dstPort,omitempty"`
}

// PacketTraceSpec says which packet to trace. It is immutable: create another trace instead.
//
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="a PacketTrace's spec is immutable: create another PacketTrace",reason=FieldValueForbidden
type PacketTraceSpec struct {
	// source is the sending Pod.
	// +required
	Source PacketTraceSource `json:"source"`
	// destination is where the packet is sent.
	// +required
	Destination PacketTraceDestination `json:"destination"`
	// packet is the protocol and port.
	// +optional
	Packet PacketTracePacket `json:"packet,omitzero"`
	// timeoutSeconds is how long the trace waits for the packet's fate before it fails; a trace
	// still Pending (waiting for a tag) fails after it too.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=300
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`
	// disclosure is what the trace may name: Namespace (the default) names the Pods and
	// NetworkPolicies of the trace's namespace and the destination its creator named, and any
	// other object by its kind alone; Cluster names every Pod, NetworkPolicy and
	// ClusterNetworkPolicy that decided, and needs the rights to read them all (the chart's
	// admission policy refuses it otherwise).
	// +optional
	// +kubebuilder:default=Namespace
	Disclosure PacketTraceDisclosure `json:"disclosure,omitempty"`
}

// PacketTracePhase is where a trace is.
// +kubebuilder:validation:Enum=Pending;Running;Succeeded;Failed
type PacketTracePhase string

// Phases of a trace.
const (
	// PacketTracePending: waiting for a tag (every DSCP value is taken) or its validation.
	PacketTracePending PacketTracePhase = "Pending"
	// PacketTraceRunning: tagged; the source node injects the packet, the nodes report.
	PacketTraceRunning PacketTracePhase = "Running"
	// PacketTraceSucceeded: the packet's fate is known (status.verdict).
	PacketTraceSucceeded PacketTracePhase = "Succeeded"
	// PacketTraceFailed: no verdict (status.reason says why).
	PacketTraceFailed PacketTracePhase = "Failed"
)

// Reasons of a trace's phase.
const (
	PacketTraceReasonSourceNotFound = "SourcePodNotFound"
	// PacketTraceReasonSourceNotInNamespace: the source Pod is not in the trace's namespace (a
	// trace sends only as its own namespace's Pods).
	PacketTraceReasonSourceNotInNamespace = "SourceNotInTraceNamespace"
	// PacketTraceReasonNotAuthorized: the trace names another namespace's objects or asks for
	// Cluster disclosure, and winnet-controller cannot know that its creator may read them (the
	// chart's admission policies, which check the creator's rights, are off).
	PacketTraceReasonNotAuthorized = "NotAuthorized"
	// PacketTraceReasonNodeNotReady: a winnet node on the packet's path has no ready agent.
	PacketTraceReasonNodeNotReady = "NodeNotReady"
	// PacketTraceReasonClusterLimit: the cluster has as many unfinished traces as
	// winnet-controller allows.
	PacketTraceReasonClusterLimit       = "TooManyTracesInCluster"
	PacketTraceReasonSourceNotWinnet    = "SourceNotOnWinnetNode"
	PacketTraceReasonSourceNotReady     = "SourcePodHasNoAddress"
	PacketTraceReasonDestinationUnknown = "DestinationNotFound"
	PacketTraceReasonTimeout            = "Timeout"
	PacketTraceReasonTooManyTraces      = "TooManyTraces"
	PacketTraceReasonNoTag              = "NoTagFree"
	PacketTraceReasonCompleted          = "Completed"
)

// PacketTraceVerdict is the traced packet's fate.
// +kubebuilder:validation:Enum=Delivered;Dropped;ForwardedExternally
type PacketTraceVerdict string

// Verdicts of a trace.
const (
	PacketTraceDelivered           PacketTraceVerdict = "Delivered"
	PacketTraceDropped             PacketTraceVerdict = "Dropped"
	PacketTraceForwardedExternally PacketTraceVerdict = "ForwardedExternally"
)

// Components of an observation.
const (
	PacketTraceComponentSource        = "Source"
	PacketTraceComponentService       = "ServiceDNAT"
	PacketTraceComponentNetworkPolicy = "NetworkPolicy"
	// PacketTraceComponentClusterNetworkPolicy: a rule of the Admin or Baseline tier decided.
	PacketTraceComponentClusterNetworkPolicy = "ClusterNetworkPolicy"
	PacketTraceComponentForwarding           = "Forwarding"
	PacketTraceComponentOutput               = "Output"
)

// Actions of an observation.
const (
	PacketTraceActionInjected            = "Injected"
	PacketTraceActionDNAT                = "DNAT"
	PacketTraceActionAdmitted            = "Admitted"
	PacketTraceActionDropped             = "Dropped"
	PacketTraceActionForwarded           = "Forwarded"
	PacketTraceActionDelivered           = "Delivered"
	PacketTraceActionForwardedExternally = "ForwardedExternally"
	// PacketTraceActionPassed: a ClusterNetworkPolicy Pass rule handed the packet to the next
	// tier (from Admin to NetworkPolicy, from Baseline to the default, which admits).
	PacketTraceActionPassed = "Passed"
)

// PolicyRuleReference names a NetworkPolicy or ClusterNetworkPolicy rule, or the NetworkPolicy that
// isolates a Pod (rule "default deny").
type PolicyRuleReference struct {
	// kind is NetworkPolicy or ClusterNetworkPolicy.
	// +required
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind"`
	// namespace of the policy; empty for a ClusterNetworkPolicy (cluster-scoped).
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`
	// name of the policy.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// rule is the rule ("ingress[0]", "egress[1]"), or "default deny" for a packet no rule admitted.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[^\x00-\x1f\x7f-\x9f]*$`
	Rule string `json:"rule,omitempty"`
}

// PacketTraceObservation is one decision a node's pipeline took on the packet.
type PacketTraceObservation struct {
	// component is the stage that decided: Source, ServiceDNAT, ClusterNetworkPolicy,
	// NetworkPolicy, Forwarding, Output.
	// +required
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[^\x00-\x1f\x7f-\x9f]*$`
	Component string `json:"component"`
	// action is what it did: Injected, DNAT, Admitted, Passed, Dropped, Forwarded, Delivered,
	// ForwardedExternally.
	// +required
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[^\x00-\x1f\x7f-\x9f]*$`
	Action string `json:"action"`
	// detail says with what: the endpoint, the policy rule, the tunnel peer, the Pod. Control
	// characters are refused (a terminal that prints the trace must not take them for commands).
	// +optional
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^[^\x00-\x1f\x7f-\x9f]*$`
	Detail string `json:"detail,omitempty"`
	// policy is the policy rule that admitted, passed or dropped the packet (NetworkPolicy and
	// ClusterNetworkPolicy observations).
	// +optional
	Policy *PolicyRuleReference `json:"policy,omitempty"`
}

// PacketTraceHop is what one node observed, in order. Only that node's agent writes it.
type PacketTraceHop struct {
	// node is the node's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node"`
	// observations are the node's decisions, in the order the pipeline took them.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Observations []PacketTraceObservation `json:"observations,omitempty"`
}

// PacketTraceStatus is the trace's progress and result.
type PacketTraceStatus struct {
	// phase is Pending, Running, Succeeded or Failed.
	// +optional
	Phase PacketTracePhase `json:"phase,omitempty"`
	// reason is why the trace is in its phase (a Failed trace's cause).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[^\x00-\x1f\x7f-\x9f]*$`
	Reason string `json:"reason,omitempty"`
	// message says it for a person; control characters are refused.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^[^\x00-\x1f\x7f-\x9f]*$`
	Message string `json:"message,omitempty"`
	// tag is the DSCP value winnet-controller gave the running trace (1..63).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=63
	Tag int32 `json:"tag,omitempty"`
	// sourceNode, sourceIP and sourcePort are where the packet is injected from.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	SourceNode string `json:"sourceNode,omitempty"`
	// +optional
	SourceIP IPv4Address `json:"sourceIP,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=65535
	SourcePort int32 `json:"sourcePort,omitempty"`
	// destinationIP is the address the packet is sent to (a Service's ClusterIP before DNAT).
	// +optional
	DestinationIP IPv4Address `json:"destinationIP,omitempty"`
	// nodes are the nodes whose agents must have installed the trace's flows before the source
	// node injects the packet: the source's, the destination Pod's, the Service's endpoints'.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=253
	Nodes []string `json:"nodes,omitempty"`
	// startTime is when the trace got its tag.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// completionTime is when it succeeded or failed.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// verdict is the packet's fate: Delivered, Dropped, ForwardedExternally.
	// +optional
	Verdict PacketTraceVerdict `json:"verdict,omitempty"`
	// droppedBy names the policy that dropped the packet.
	// +optional
	DroppedBy *PolicyRuleReference `json:"droppedBy,omitempty"`
	// hops are the nodes the packet crossed; each node's agent writes its own hop only.
	// +optional
	// +listType=map
	// +listMapKey=node
	// +kubebuilder:validation:MaxItems=8
	Hops []PacketTraceHop `json:"hops,omitempty"`
}

// PacketTrace injects one tagged packet as if a Pod sent it and records where each node's pipeline
// decided: Service DNAT and the endpoint chosen, the NetworkPolicy rule that admitted or dropped it,
// forwarding, output. The packet is consumed where it ends and never reaches a Pod's application.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=ptrace,categories=winnet
// +kubebuilder:selectablefield:JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Verdict",type=string,JSONPath=`.status.verdict`
// +kubebuilder:printcolumn:name="Dropped-By",type=string,JSONPath=`.status.droppedBy.name`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PacketTrace struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the packet to trace.
	// +required
	Spec PacketTraceSpec `json:"spec"`

	// status is the trace's progress and what the nodes observed.
	// +optional
	Status PacketTraceStatus `json:"status,omitzero"`
}

// PacketTraceList is a list of PacketTraces.
//
// +kubebuilder:object:root=true
type PacketTraceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PacketTrace `json:"items"`
}

func init() {
	SchemeBuilder.Register(&PacketTrace{}, &PacketTraceList{})
}
