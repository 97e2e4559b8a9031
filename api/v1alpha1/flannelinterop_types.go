package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FlannelInteropName is the name of the one FlannelInterop winnet-controller reads.
const FlannelInteropName = "default"

// DefaultFlannelAnnotationPrefix is flanneld's default --kube-annotation-prefix.
const DefaultFlannelAnnotationPrefix = "flannel.alpha.coreos.com"

// FlannelInteropSpec is how winnet joins a cluster whose Linux nodes run stock flannel (VXLAN backend,
// kube subnet manager).
type FlannelInteropSpec struct {
	// vni is the flannel network's VNI (flanneld's Backend.VNI): the VNI winnet nodes publish in their
	// flannel record and use to and from flannel nodes. flanneld on Linux puts its own device's VNI on
	// everything it sends and ignores the VNI its peers publish, so every node of the network uses this
	// one. flannel's own Windows nodes need 4096 or more (HNS refuses smaller VNIs).
	// +optional
	// +kubebuilder:default=4096
	VNI VNI `json:"vni,omitempty"`

	// annotationPrefix is flanneld's --kube-annotation-prefix: the prefix of the Node annotations that
	// hold flannel's records.
	// +optional
	// +kubebuilder:default="flannel.alpha.coreos.com"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="annotationPrefix must be a DNS subdomain such as flannel.alpha.coreos.com (lower-case letters, digits, '-' and '.', no '/'), as flanneld's --kube-annotation-prefix",reason=FieldValueInvalid
	AnnotationPrefix string `json:"annotationPrefix,omitempty"`
}

// FlannelInterop turns on winnet's interop with flannel: while it exists, winnet-controller publishes
// every winnet node's flannel record (its VXLAN lease) on its Node and routes to every node whose lease
// flanneld published; deleted, it withdraws both. There is one, named default.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=fi,categories=winnet
// +kubebuilder:validation:XValidation:rule="self.metadata.name == 'default'",message="metadata.name must be default: winnet-controller reads the one FlannelInterop named default and no other",reason=FieldValueInvalid
// +kubebuilder:printcolumn:name="VNI",type=integer,JSONPath=`.spec.vni`
// +kubebuilder:printcolumn:name="Annotation prefix",type=string,JSONPath=`.spec.annotationPrefix`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type FlannelInterop struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the flannel network winnet joins; absent, flannel's defaults (VNI 4096 as flannel's Windows
	// support needs, the default annotation prefix).
	// +optional
	// +kubebuilder:default={}
	Spec FlannelInteropSpec `json:"spec,omitzero"`
}

// FlannelInteropList is a list of FlannelInterops.
//
// +kubebuilder:object:root=true
type FlannelInteropList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FlannelInterop `json:"items"`
}

func init() {
	SchemeBuilder.Register(&FlannelInterop{}, &FlannelInteropList{})
}
