package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RouteMode says how a node reaches a remote subnet.
// +kubebuilder:validation:Enum=Auto;Tunnel;Route
type RouteMode string

const (
	// RouteModeAuto tunnels, or routes when the local node's encapsulation mode is NoEncap, or Hybrid
	// and the peer shares the node's subnet.
	RouteModeAuto RouteMode = "Auto"
	// RouteModeTunnel always encapsulates to nodeIP.
	RouteModeTunnel RouteMode = "Tunnel"
	// RouteModeRoute sends packets unencapsulated to nodeIP as the next hop.
	RouteModeRoute RouteMode = "Route"
)

// RemoteSubnetRouteSpec is a route from every winnet node to a remote subnet.
//
// +kubebuilder:validation:XValidation:rule="!has(self.gatewayIP) || !isIP(self.gatewayIP) || !self.podCIDRs.all(c, isCIDR(c)) || self.podCIDRs.exists(c, cidr(c).ip().family() == ip(self.gatewayIP).family() && cidr(c).containsIP(self.gatewayIP))",message="gatewayIP must be inside one of podCIDRs",fieldPath=".gatewayIP",reason=FieldValueInvalid
// +kubebuilder:validation:XValidation:rule="!isIP(self.nodeIP) || self.podCIDRs.all(c, !isCIDR(c) || cidr(c).ip().family() != ip(self.nodeIP).family() || !cidr(c).containsIP(self.nodeIP))",message="nodeIP must be the remote node's underlay address, not an address inside podCIDRs",fieldPath=".nodeIP",reason=FieldValueInvalid
// +kubebuilder:validation:XValidation:rule="self.mode != 'Route' || !isIP(self.nodeIP) || self.podCIDRs.all(c, !isCIDR(c) || cidr(c).ip().family() == ip(self.nodeIP).family())",message="in Route mode nodeIP is the next hop and must be of the same IP family as every entry of podCIDRs",fieldPath=".nodeIP",reason=FieldValueInvalid
// +kubebuilder:validation:XValidation:rule="self.mode != 'Route' || (!has(self.vni) && !has(self.vtepMAC))",message="vni and vtepMAC apply to tunnelled traffic only: remove them or set mode to Tunnel or Auto",fieldPath=".mode",reason=FieldValueInvalid
// +kubebuilder:validation:XValidation:rule="!self.podCIDRs.all(c, isCIDR(c)) || self.podCIDRs.all(a, self.podCIDRs.all(b, a == b || cidr(a).ip().family() != cidr(b).ip().family() || (!cidr(a).containsCIDR(b) && !cidr(b).containsCIDR(a))))",message="podCIDRs must not overlap each other",fieldPath=".podCIDRs",reason=FieldValueInvalid
type RemoteSubnetRouteSpec struct {
	// nodeName is the Node whose Pod subnets this route reaches. winnet-controller creates one route per
	// Node and keeps it up to date. Absent for a manual route to a subnet outside the cluster.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="nodeName must be a Node name: lower-case letters, digits, '-' and '.'",reason=FieldValueInvalid
	NodeName string `json:"nodeName,omitempty"`

	// podCIDRs are the remote subnets.
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +listType=set
	PodCIDRs []CIDR `json:"podCIDRs"`

	// nodeIP is the remote node's underlay address: the tunnel destination, or the next hop in Route
	// mode.
	// +required
	NodeIP IPAddress `json:"nodeIP"`

	// gatewayIP is the remote node's gateway inside its Pod CIDR; host routes to the subnet go via it.
	// Absent: the first address of the first IPv4 Pod CIDR.
	// +optional
	GatewayIP IPAddress `json:"gatewayIP,omitempty"`

	// mode chooses tunnel or routed delivery.
	// +optional
	// +kubebuilder:default=Auto
	Mode RouteMode `json:"mode,omitempty"`

	// vni overrides the tunnel's VNI for this peer, for peers such as flannel (VNI 4096).
	// +optional
	VNI *VNI `json:"vni,omitempty"`

	// vtepMAC overrides the inner destination MAC for this peer (flannel's VTEP MAC); absent: the
	// global virtual MAC aa:bb:cc:dd:ee:ff.
	// +optional
	VTEPMAC MACAddress `json:"vtepMAC,omitempty"`
}

// RemoteSubnetRouteStatus is what winnet-controller decided about the route.
type RemoteSubnetRouteStatus struct {
	// conditions: Accepted and Conflict.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// observedGeneration is the generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// RemoteSubnetRoute is a route from every winnet node to a remote node's Pod subnets, or to a subnet
// outside the cluster.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=rsr,categories=winnet
// +kubebuilder:selectablefield:JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="Pod CIDRs",type=string,JSONPath=`.spec.podCIDRs`
// +kubebuilder:printcolumn:name="Node IP",type=string,JSONPath=`.spec.nodeIP`
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="Accepted",type=string,JSONPath=`.status.conditions[?(@.type=="Accepted")].status`
// +kubebuilder:printcolumn:name="Conflict",type=string,JSONPath=`.status.conditions[?(@.type=="Conflict")].status`
// +kubebuilder:printcolumn:name="Gateway",type=string,JSONPath=`.spec.gatewayIP`,priority=1
// +kubebuilder:printcolumn:name="VNI",type=integer,JSONPath=`.spec.vni`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type RemoteSubnetRoute struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the route.
	// +required
	Spec RemoteSubnetRouteSpec `json:"spec"`

	// status is winnet-controller's verdict on it.
	// +optional
	Status RemoteSubnetRouteStatus `json:"status,omitzero"`
}

// RemoteSubnetRouteList is a list of RemoteSubnetRoutes.
//
// +kubebuilder:object:root=true
type RemoteSubnetRouteList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RemoteSubnetRoute `json:"items"`
}

func init() {
	SchemeBuilder.Register(&RemoteSubnetRoute{}, &RemoteSubnetRouteList{})
}
