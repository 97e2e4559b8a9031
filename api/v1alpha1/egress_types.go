package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Egress limits, enforced by the schema.
const (
	// MaxSelectorTerms is the most matchLabels entries, and the most matchExpressions, of a
	// selector of an Egress.
	MaxSelectorTerms = 16
	// MaxSelectorValues is the most values of one matchExpressions entry.
	MaxSelectorValues = 32
)

// LabelSelector selects objects by their labels, as metav1.LabelSelector does (the same fields and
// meaning: every term must match; an empty selector selects everything), with bounds on its size so
// that the API server can check it whole: operators, values and the syntax of keys and values.
//
// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, e.operator in ['Exists', 'DoesNotExist'] ? (!has(e.values) || size(e.values) == 0) : (has(e.values) && size(e.values) > 0))",message="matchExpressions: the operators In and NotIn need at least one value; Exists and DoesNotExist take none",fieldPath=".matchExpressions",reason=FieldValueInvalid
type LabelSelector struct {
	// matchLabels are label keys and the values they must have.
	// +optional
	// +kubebuilder:validation:MaxProperties=16
	// +kubebuilder:validation:XValidation:rule="self.all(k, size(k) <= 317 && k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$'))",message="matchLabels: every key must be a label key: an optional DNS subdomain prefix and '/', then at most 63 letters, digits, '-', '_' or '.', beginning and ending with a letter or digit",reason=FieldValueInvalid
	MatchLabels map[string]LabelValue `json:"matchLabels,omitempty"`

	// matchExpressions are requirements on labels.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	MatchExpressions []LabelSelectorRequirement `json:"matchExpressions,omitempty"`
}

// LabelValue is the value of a label: empty, or at most 63 letters, digits, '-', '_' or '.',
// beginning and ending with a letter or digit.
// +kubebuilder:validation:MaxLength=63
// +kubebuilder:validation:XValidation:rule="self.matches('^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$')",message="must be a label value: at most 63 letters, digits, '-', '_' or '.', beginning and ending with a letter or digit",reason=FieldValueInvalid
type LabelValue string

// LabelSelectorOperator is the operator of a LabelSelectorRequirement.
// +kubebuilder:validation:Enum=In;NotIn;Exists;DoesNotExist
type LabelSelectorOperator string

// LabelSelectorRequirement is a requirement on one label, as metav1.LabelSelectorRequirement.
type LabelSelectorRequirement struct {
	// key is the label key.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:XValidation:rule="self.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$')",message="must be a label key: an optional DNS subdomain prefix and '/', then at most 63 letters, digits, '-', '_' or '.', beginning and ending with a letter or digit",reason=FieldValueInvalid
	Key string `json:"key"`

	// operator is In, NotIn, Exists or DoesNotExist.
	// +required
	Operator LabelSelectorOperator `json:"operator"`

	// values are the label values for In and NotIn; empty for Exists and DoesNotExist.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	Values []LabelValue `json:"values,omitempty"`
}

// EgressSpec is the fixed source address of the selected Pods' connections to destinations
// outside the cluster.
type EgressSpec struct {
	// podSelector selects Pods, in the namespaces namespaceSelector selects, by their labels. An
	// empty selector selects every Pod of those namespaces.
	// +required
	PodSelector LabelSelector `json:"podSelector"`

	// namespaceSelector selects the namespaces of the Pods by their labels: at least one label or
	// expression. The egress IP is what firewalls admit, and anyone who may create or label Pods in
	// a selected namespace can give a Pod the labels podSelector asks for; so the namespaces are
	// chosen on purpose (every namespace: matchExpressions [{key: kubernetes.io/metadata.name,
	// operator: Exists}]).
	// +required
	// +kubebuilder:validation:XValidation:rule="(has(self.matchLabels) && size(self.matchLabels) > 0) || (has(self.matchExpressions) && size(self.matchExpressions) > 0)",message="namespaceSelector must name at least one label or expression: an empty one would give the egress IP to Pods of every namespace, whose users may label their Pods to match podSelector; to select every namespace on purpose, use matchExpressions [{key: kubernetes.io/metadata.name, operator: Exists}]",reason=FieldValueInvalid
	NamespaceSelector LabelSelector `json:"namespaceSelector"`

	// egressIP is the source address of the selected Pods' connections to destinations outside
	// the cluster: an IPv4 unicast address on the uplink subnet of the nodes that may hold it, used
	// by nothing else (winnet-controller refuses a node's address, another Egress's address and
	// addresses of the cluster's Pod and Service CIDRs with Assigned=False, reason IPConflict).
	// +required
	// +kubebuilder:validation:XValidation:rule="!isIP(self) || ip(self).family() != 4 || !ip(self).isLoopback()",message="egressIP must not be a loopback address (127.0.0.0/8): use an address of the nodes' uplink subnet",reason=FieldValueInvalid
	// +kubebuilder:validation:XValidation:rule="!isIP(self) || ip(self).family() != 4 || !ip(self).isUnspecified()",message="egressIP must not be the unspecified address 0.0.0.0: use an address of the nodes' uplink subnet",reason=FieldValueInvalid
	// +kubebuilder:validation:XValidation:rule="!isIP(self) || ip(self).family() != 4 || (!ip(self).isLinkLocalMulticast() && !cidr('224.0.0.0/4').containsIP(self))",message="egressIP must not be a multicast address (224.0.0.0/4): use a unicast address of the nodes' uplink subnet",reason=FieldValueInvalid
	// +kubebuilder:validation:XValidation:rule="!isIP(self) || ip(self).family() != 4 || !ip(self).isLinkLocalUnicast()",message="egressIP must not be a link-local address (169.254.0.0/16): use an address of the nodes' uplink subnet",reason=FieldValueInvalid
	// +kubebuilder:validation:XValidation:rule="!isIP(self) || ip(self).family() != 4 || self != '255.255.255.255'",message="egressIP must not be the broadcast address 255.255.255.255: use an address of the nodes' uplink subnet",reason=FieldValueInvalid
	EgressIP IPv4Address `json:"egressIP"`

	// nodeSelector restricts the nodes that may hold egressIP to the winnet nodes with these
	// labels. Absent: every Ready winnet node on whose uplink subnet egressIP lies.
	// +optional
	NodeSelector *LabelSelector `json:"nodeSelector,omitempty"`
}

// EgressStatus is where winnet-controller put the Egress, and whether its node realises it.
type EgressStatus struct {
	// node is the node holding egressIP; empty when none does.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node,omitempty"`

	// conditions: Assigned (winnet-controller chose a node for egressIP) and Ready (the node holds
	// it and SNATs the selected Pods' connections to it).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// observedGeneration is the generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// Egress gives the Pods it selects a fixed source address, egressIP, for their connections to
// destinations outside the cluster: winnet-controller puts it on one eligible winnet node, which
// SNATs those connections to it.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=winnet
// +kubebuilder:printcolumn:name="IP",type=string,JSONPath=`.spec.egressIP`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.node`
// +kubebuilder:printcolumn:name="Assigned",type=string,JSONPath=`.status.conditions[?(@.type=="Assigned")].status`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Egress struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the Egress.
	// +required
	Spec EgressSpec `json:"spec"`

	// status is where it is held.
	// +optional
	Status EgressStatus `json:"status,omitzero"`
}

// EgressList is a list of Egresses.
//
// +kubebuilder:object:root=true
type EgressList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Egress `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Egress{}, &EgressList{})
}
