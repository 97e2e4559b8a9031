package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// PodEndpointName is the name of the PodEndpoint of the Pod with uid on node: "<nodeName>.<podUID>".
// The node comes first so that the admission policy can require an agent to create its PodEndpoints
// under exactly this name, its own node's and its spec.podUID's (no agent can take another node's
// Pod's name first, not even node "win" one of node "win.corp"), and the Pod's UID makes the name
// unique over the Pod's life. Node names of at most MaxPodEndpointNodeName characters fit an
// object name.
func PodEndpointName(nodeName string, podUID types.UID) string {
	return nodeName + "." + string(podUID)
}

// MaxPodEndpointNodeName is the longest node name whose PodEndpoints' names fit the 253 characters
// of an object name (a dot and a 36-character UID follow it).
const MaxPodEndpointNodeName = 253 - 1 - 36

// PodEndpointSpec is the network attachment of one Pod, as the node's agent made it in CNI ADD.
//
// +kubebuilder:validation:XValidation:rule="!has(self.gateway) || !isIP(self.gateway) || !self.ips.all(a, isCIDR(a)) || self.ips.exists(a, cidr(a).ip().family() == ip(self.gateway).family() && cidr(a).containsIP(self.gateway))",message="gateway must be inside the subnet of one of ips",fieldPath=".gateway",reason=FieldValueInvalid
// +kubebuilder:validation:XValidation:rule="!has(self.gateway) || self.ips.all(a, !a.startsWith(self.gateway + '/'))",message="gateway must not be one of the Pod's own addresses",fieldPath=".gateway",reason=FieldValueInvalid
type PodEndpointSpec struct {
	// podName is the Pod's name (kubectl get pep shows it; the object is named
	// "<nodeName>.<podUID>").
	// Immutable: a PodEndpoint belongs to one Pod for its whole life.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="podName is immutable: a PodEndpoint belongs to one Pod",reason=FieldValueForbidden
	PodName string `json:"podName"`

	// podUID is the Pod's UID; a Pod recreated with the same name gets a new PodEndpoint.
	// Immutable for the same reason as podName.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=36
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="podUID is immutable: a PodEndpoint belongs to one Pod",reason=FieldValueForbidden
	PodUID string `json:"podUID"`

	// nodeName is the node the Pod runs on; only that node's agent may write this object.
	// Immutable: a Pod never moves between nodes.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="nodeName is immutable: a Pod never moves between nodes",reason=FieldValueForbidden
	NodeName string `json:"nodeName"`

	// sandboxID is the container ID of the Pod's sandbox, for which the HNS endpoint was created.
	// It changes when the runtime recreates the sandbox.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9_.:-]*$`
	SandboxID string `json:"sandboxID"`

	// interfaceName is the interface name inside the Pod.
	// +optional
	// +kubebuilder:default=eth0
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	InterfaceName string `json:"interfaceName,omitempty"`

	// ips are the Pod's addresses with their prefix length, at most one per IP family.
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=2
	// +listType=set
	// +kubebuilder:validation:XValidation:rule="size(self) < 2 || !isCIDR(self[0]) || !isCIDR(self[1]) || cidr(self[0]).ip().family() != cidr(self[1]).ip().family()",message="ips may hold at most one address per IP family",reason=FieldValueInvalid
	IPs []InterfaceAddress `json:"ips"`

	// mac is the MAC address of the Pod's interface (and of its HNS endpoint).
	// +required
	MAC MACAddress `json:"mac"`

	// gateway is the Pod's default gateway: the node's gateway port address.
	// +optional
	Gateway IPAddress `json:"gateway,omitempty"`
}

// PodEndpointStatus is what the node's agent realised for the Pod.
type PodEndpointStatus struct {
	// conditions: Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// observedGeneration is the generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// hnsEndpointID is the ID of the Pod's HNS endpoint.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	HNSEndpointID string `json:"hnsEndpointID,omitempty"`

	// ovsPort is the name of the OVS internal port (the same as the HNS endpoint's).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	OVSPort string `json:"ovsPort,omitempty"`

	// ofPort is the OpenFlow port number of ovsPort.
	// +optional
	OFPort int32 `json:"ofPort,omitempty"`

	// attachedContainers are the containers the endpoint is attached to: the sandbox and every
	// workload container kubelet called CNI ADD for.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	AttachedContainers []string `json:"attachedContainers,omitempty"`

	// vnicToForwarding is how long the Pod's OVS port took to forward once the endpoint's vNIC
	// appeared (when the runtime started the sandbox, after CNI ADD).
	// +optional
	VNICToForwarding *metav1.Duration `json:"vnicToForwarding,omitempty"`
}

// PodEndpoint is the network attachment of one Pod: one HNS endpoint plus one OVS port of the same
// name, its addresses and flows. It lives in the Pod's namespace, is named "<nodeName>.<podUID>"
// (PodEndpointName) and is owned by the Pod. PodEndpoints written by earlier agents are named after
// their Pod; agents adopt them (see the podendpoint controller).
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=pep,categories=winnet
// +kubebuilder:selectablefield:JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="Pod",type=string,JSONPath=`.spec.podName`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="IPs",type=string,JSONPath=`.spec.ips`
// +kubebuilder:printcolumn:name="MAC",type=string,JSONPath=`.spec.mac`
// +kubebuilder:printcolumn:name="Port",type=string,JSONPath=`.status.ovsPort`
// +kubebuilder:printcolumn:name="OFPort",type=integer,JSONPath=`.status.ofPort`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Sandbox",type=string,JSONPath=`.spec.sandboxID`,priority=1
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.status.hnsEndpointID`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name == self.spec.nodeName + '.' + self.spec.podUID || self.metadata.name == self.spec.podName",message="metadata.name must be spec.nodeName + '.' + spec.podUID (or, for PodEndpoints of earlier releases, spec.podName)",fieldPath=".spec.podName",reason=FieldValueInvalid
type PodEndpoint struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the Pod's attachment.
	// +required
	Spec PodEndpointSpec `json:"spec"`

	// status is what the agent realised.
	// +optional
	Status PodEndpointStatus `json:"status,omitzero"`
}

// PodEndpointList is a list of PodEndpoints.
//
// +kubebuilder:object:root=true
type PodEndpointList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PodEndpoint `json:"items"`
}

func init() {
	SchemeBuilder.Register(&PodEndpoint{}, &PodEndpointList{})
}
