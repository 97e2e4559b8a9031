package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EncapsulationMode says how Pod traffic between nodes crosses the underlay.
// +kubebuilder:validation:Enum=Encap;NoEncap;Hybrid
type EncapsulationMode string

const (
	// EncapsulationModeEncap tunnels all traffic to other nodes' Pods.
	EncapsulationModeEncap EncapsulationMode = "Encap"
	// EncapsulationModeNoEncap routes Pod traffic unencapsulated through the underlay (the nodes must
	// share an L2 segment or the underlay must route Pod CIDRs, as in the Kubernetes L3 routing design).
	EncapsulationModeNoEncap EncapsulationMode = "NoEncap"
	// EncapsulationModeHybrid routes to peers in the node's own subnet and tunnels to the others.
	EncapsulationModeHybrid EncapsulationMode = "Hybrid"
)

// TunnelAdmission says which tunnel traffic the node lets in.
// +kubebuilder:validation:Enum=Enforce;Off
type TunnelAdmission string

const (
	// TunnelAdmissionEnforce admits a tunnelled packet only from the node IP of a RemoteSubnetRoute,
	// with that route's VNI, and with an inner source the route's node owns (its Pod CIDRs, its node
	// IP); the rest is dropped and counted. A peer's traffic that arrives from another address (NAT
	// between the nodes) is dropped too, with a Warning Event naming the peer and the address.
	TunnelAdmissionEnforce TunnelAdmission = "Enforce"
	// TunnelAdmissionOff admits every IPv4 packet of the tunnel port, whatever its tunnel source,
	// VNI and inner source: for underlays that rewrite the nodes' addresses between them. Anything
	// that can send a UDP datagram to the node then reaches its Pods.
	TunnelAdmissionOff TunnelAdmission = "Off"
)

// TunnelType is the encapsulation protocol of the tunnel port.
// +kubebuilder:validation:Enum=vxlan;geneve
type TunnelType string

const (
	// TunnelTypeVXLAN is VXLAN (default UDP port 4789).
	TunnelTypeVXLAN TunnelType = "vxlan"
	// TunnelTypeGeneve is Geneve (default UDP port 6081).
	TunnelTypeGeneve TunnelType = "geneve"
)

// HNSNetworkType is the type of the Host Networking Service network. The OVS extension runs on the
// Hyper-V switch of a Transparent network only.
// +kubebuilder:validation:Enum=Transparent
type HNSNetworkType string

// HNSNetworkTypeTransparent is a Transparent HNS network: its Hyper-V switch is bound to the uplink
// adapter and runs the Open vSwitch extension.
const HNSNetworkTypeTransparent HNSNetworkType = "Transparent"

// DatapathType is the OVS datapath of the bridge.
// +kubebuilder:validation:Enum=system;netdev
type DatapathType string

const (
	// DatapathTypeSystem is the kernel datapath: the Hyper-V switch extension on Windows.
	DatapathTypeSystem DatapathType = "system"
	// DatapathTypeNetdev is the userspace datapath, used by simulated nodes in tests and the demo.
	DatapathTypeNetdev DatapathType = "netdev"
)

// Defaults of the node network, as DESIGN.md names them.
const (
	DefaultBridgeName     = "br-int"
	DefaultGatewayName    = "winnet-gw0"
	DefaultHNSNetworkName = "winnet"
	DefaultTunnelPortName = "winnet-tun0"
	DefaultVNI            = 1
	DefaultVXLANPort      = 4789
	DefaultGenevePort     = 6081
	// ConntrackZone is the conntrack zone of the SNAT pipeline.
	ConntrackZone = 65520
	// GlobalVirtualMAC is the destination MAC of packets routed to remote Pods and of un-NATed replies.
	GlobalVirtualMAC = "aa:bb:cc:dd:ee:ff"
)

// WindowsNodeNetworkSpec is the desired network of one Windows node.
//
// +kubebuilder:validation:XValidation:rule="!has(self.gateway.ip) || !isIP(self.gateway.ip) || size(self.podCIDRs) == 0 || !self.podCIDRs.all(c, isCIDR(c)) || self.podCIDRs.exists(c, cidr(c).ip().family() == ip(self.gateway.ip).family() && cidr(c).containsIP(self.gateway.ip))",message="gateway.ip must be inside one of podCIDRs",fieldPath=".gateway.ip",reason=FieldValueInvalid
// +kubebuilder:validation:XValidation:rule="!has(self.gateway.ip) || self.podCIDRs.all(c, !c.startsWith(self.gateway.ip + '/'))",message="gateway.ip must not be the network address of its Pod CIDR; leave it empty to use the first address",fieldPath=".gateway.ip",reason=FieldValueInvalid
// +kubebuilder:validation:XValidation:rule="!has(self.nodeIP) || !isIP(self.nodeIP) || self.podCIDRs.all(c, !isCIDR(c) || cidr(c).ip().family() != ip(self.nodeIP).family() || !cidr(c).containsIP(self.nodeIP))",message="nodeIP must be the node's underlay address, not an address inside podCIDRs",fieldPath=".nodeIP",reason=FieldValueInvalid
// +kubebuilder:validation:XValidation:rule="!has(self.clusterCIDRs) || !self.clusterCIDRs.all(c, isCIDR(c)) || self.podCIDRs.all(p, !isCIDR(p) || self.clusterCIDRs.exists(c, cidr(c).ip().family() == cidr(p).ip().family() && cidr(c).containsCIDR(p)))",message="every entry of podCIDRs must lie inside one of clusterCIDRs",fieldPath=".clusterCIDRs",reason=FieldValueInvalid
// +kubebuilder:validation:XValidation:rule="!has(self.serviceCIDRs) || self.serviceCIDRs.all(s, !isCIDR(s) || self.podCIDRs.all(p, !isCIDR(p) || cidr(s).ip().family() != cidr(p).ip().family() || (!cidr(s).containsCIDR(p) && !cidr(p).containsCIDR(s))))",message="serviceCIDRs must not overlap podCIDRs",fieldPath=".serviceCIDRs",reason=FieldValueInvalid
// +kubebuilder:validation:XValidation:rule="!has(self.serviceCIDRs) || !has(self.clusterCIDRs) || self.serviceCIDRs.all(s, !isCIDR(s) || self.clusterCIDRs.all(c, !isCIDR(c) || cidr(s).ip().family() != cidr(c).ip().family() || (!cidr(s).containsCIDR(c) && !cidr(c).containsCIDR(s))))",message="serviceCIDRs must not overlap clusterCIDRs",fieldPath=".serviceCIDRs",reason=FieldValueInvalid
type WindowsNodeNetworkSpec struct {
	// podCIDRs are the node's Pod subnets, as in Node.spec.podCIDRs: at most one per IP family, and an
	// IPv4 one, which becomes the subnet of the HNS network.
	//
	// Immutable: the HNS network's subnet is fixed when it is created, and every Pod endpoint on the
	// node draws its address from it; changing it means draining the node and recreating this object.
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=2
	// +listType=set
	// +kubebuilder:validation:XValidation:rule="size(self) < 2 || !isCIDR(self[0]) || !isCIDR(self[1]) || cidr(self[0]).ip().family() != cidr(self[1]).ip().family()",message="podCIDRs may hold at most one CIDR per IP family",reason=FieldValueInvalid
	// +kubebuilder:validation:XValidation:rule="!self.all(c, isCIDR(c)) || self.exists(c, cidr(c).ip().family() == 4)",message="podCIDRs must include an IPv4 CIDR: it becomes the subnet of the node's HNS network",reason=FieldValueInvalid
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="podCIDRs is immutable: the HNS network subnet cannot change under running Pods; drain the node and recreate the WindowsNodeNetwork",reason=FieldValueForbidden
	PodCIDRs []CIDR `json:"podCIDRs"`

	// nodeIP is the node's transport address: the source of tunnels, the address Pod traffic to
	// external destinations is SNATed to, and the address that identifies the uplink adapter.
	// Absent: the Node's InternalIP, filled in by winnet-controller.
	// +optional
	NodeIP IPv4Address `json:"nodeIP,omitempty"`

	// uplink is the physical adapter the HNS network and the OVS bridge attach to.
	// +optional
	// +kubebuilder:default={}
	Uplink UplinkSpec `json:"uplink,omitzero"`

	// hnsNetwork is the Host Networking Service network whose Hyper-V switch runs the OVS extension.
	// +optional
	// +kubebuilder:default={}
	HNSNetwork HNSNetworkSpec `json:"hnsNetwork,omitzero"`

	// bridge is the OVS bridge that holds the uplink, the gateway, the tunnel and the Pod ports.
	// +optional
	// +kubebuilder:default={}
	Bridge BridgeSpec `json:"bridge,omitzero"`

	// gateway is the OVS internal port through which Pods reach the host and, after SNAT, the outside.
	// +optional
	// +kubebuilder:default={}
	Gateway GatewaySpec `json:"gateway,omitzero"`

	// encapsulation says how Pod traffic reaches other nodes. Every field can change live.
	// +optional
	// +kubebuilder:default={}
	Encapsulation EncapsulationSpec `json:"encapsulation,omitzero"`

	// snat controls the translation of Pod traffic to destinations outside the cluster to nodeIP, in
	// OpenFlow conntrack. Every field can change live.
	// +optional
	// +kubebuilder:default={}
	SNAT SNATSpec `json:"snat,omitzero"`

	// clusterCIDRs are the Pod CIDRs of the whole cluster; traffic to them is never SNATed.
	// +optional
	// +kubebuilder:validation:MaxItems=8
	// +listType=set
	ClusterCIDRs []CIDR `json:"clusterCIDRs,omitempty"`

	// serviceCIDRs are the cluster's Service CIDRs; traffic to them is never SNATed.
	// +optional
	// +kubebuilder:validation:MaxItems=4
	// +listType=set
	ServiceCIDRs []CIDR `json:"serviceCIDRs,omitempty"`
}

// UplinkSpec selects the physical adapter.
type UplinkSpec struct {
	// interface is the name of the adapter, such as "Ethernet 2". Absent: the adapter that holds
	// nodeIP. Mutable: a changed uplink is moved to the bridge and the old one released.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="!self.matches('[\\\\x00-\\\\x1f]')",message="interface must not contain control characters",reason=FieldValueInvalid
	Interface string `json:"interface,omitempty"`
}

// HNSNetworkSpec describes the HNS network.
type HNSNetworkSpec struct {
	// name of the HNS network.
	//
	// Immutable: every Pod endpoint on the node belongs to this network, so renaming it means deleting
	// them all.
	// +optional
	// +kubebuilder:default=winnet
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9_.-]*$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="hnsNetwork.name is immutable: every Pod endpoint on the node belongs to this network; drain the node and recreate the WindowsNodeNetwork",reason=FieldValueForbidden
	Name string `json:"name,omitempty"`

	// type of the HNS network. Only Transparent networks can run the OVS extension.
	// +optional
	// +kubebuilder:default=Transparent
	Type HNSNetworkType `json:"type,omitempty"`
}

// BridgeSpec describes the OVS bridge.
type BridgeSpec struct {
	// name of the OVS bridge. Its LOCAL interface takes over the host's IP, MAC and routes.
	//
	// Immutable: the host's address lives on the bridge's LOCAL interface and every port is on the
	// bridge; renaming it disconnects the node.
	// +optional
	// +kubebuilder:default=br-int
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="bridge.name is immutable: the host's address and every Pod port live on the bridge; drain the node and recreate the WindowsNodeNetwork",reason=FieldValueForbidden
	Name InterfaceName `json:"name,omitempty"`

	// datapathType is the OVS datapath: system (the Hyper-V switch extension on Windows, the kernel
	// module on Linux) or netdev (userspace, for simulated nodes).
	//
	// Immutable: OVS cannot move a bridge between datapaths; it would be deleted and rebuilt.
	// +optional
	// +kubebuilder:default=system
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="bridge.datapathType is immutable: OVS rebuilds a bridge to change its datapath; drain the node and recreate the WindowsNodeNetwork",reason=FieldValueForbidden
	DatapathType DatapathType `json:"datapathType,omitempty"`
}

// GatewaySpec describes the gateway port.
type GatewaySpec struct {
	// name of the gateway's OVS internal port and host interface.
	// +optional
	// +kubebuilder:default=winnet-gw0
	Name InterfaceName `json:"name,omitempty"`

	// ip of the gateway, inside an IPv4 Pod CIDR. Absent: the first address of the IPv4 Pod CIDR.
	// +optional
	IP IPv4Address `json:"ip,omitempty"`
}

// EncapsulationSpec describes how traffic to other nodes' Pods is carried.
type EncapsulationSpec struct {
	// mode: Encap tunnels to every node, NoEncap routes unencapsulated, Hybrid routes to nodes in the
	// same subnet and tunnels to the others.
	// +optional
	// +kubebuilder:default=Encap
	Mode EncapsulationMode `json:"mode,omitempty"`

	// tunnelType is the tunnel protocol.
	// +optional
	// +kubebuilder:default=vxlan
	TunnelType TunnelType `json:"tunnelType,omitempty"`

	// vni is the virtual network identifier of the tunnel. flannel's Windows VXLAN uses 4096.
	// +optional
	// +kubebuilder:default=1
	VNI VNI `json:"vni,omitempty"`

	// port is the UDP destination port of the tunnel. Absent: 4789 for vxlan, 6081 for geneve.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`

	// vtepMAC is the node's VTEP MAC: the inner destination MAC that peers which key their forwarding
	// by MAC (flannel's Linux nodes) put on traffic to this node's Pods, and the inner source MAC of
	// what the node sends through the tunnel. The node delivers it to its Pods on the fast path, like
	// the global virtual MAC. Every node needs its own: flannel keeps one forwarding entry per MAC.
	// Absent: a locally administered MAC derived from the node's name (stable across restarts).
	// +optional
	VTEPMAC MACAddress `json:"vtepMAC,omitempty"`

	// tunnelAdmission: Enforce admits tunnelled traffic only from the node IPs of the
	// RemoteSubnetRoutes, with their VNI and inner sources their nodes own; Off admits every IPv4
	// packet of the tunnel, for underlays with NAT between the nodes. See docs/tunnel-admission.md.
	// +optional
	// +kubebuilder:default=Enforce
	TunnelAdmission TunnelAdmission `json:"tunnelAdmission,omitempty"`

	// mtu of Pod interfaces and the gateway. Absent: the uplink's MTU less the tunnel overhead
	// (50 bytes for VXLAN, 58 for Geneve; none in NoEncap mode).
	// +optional
	// +kubebuilder:validation:Minimum=576
	// +kubebuilder:validation:Maximum=9216
	MTU int32 `json:"mtu,omitempty"`
}

// SNATSpec controls SNAT of Pod traffic to external destinations.
type SNATSpec struct {
	// enabled turns SNAT of Pod-to-external traffic to nodeIP on or off.
	// +optional
	// +kubebuilder:default=true
	Enabled *bool `json:"enabled,omitempty"`

	// excludeCIDRs are destinations that Pods reach with their own address (no SNAT), in addition to
	// clusterCIDRs, serviceCIDRs and the nodes' IPs.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	ExcludeCIDRs []CIDR `json:"excludeCIDRs,omitempty"`
}

// WindowsNodeNetworkStatus is what the node's agent observed and realised.
type WindowsNodeNetworkStatus struct {
	// conditions: Ready summarises HostSwitchReady, BridgeReady, UplinkReady, GatewayReady,
	// TunnelReady, PipelineReady and RoutesReady; ServicesReady reports the Services apart.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// observedGeneration is the generation of the spec the agent last converged successfully.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// hnsNetworkID is the ID HNS gave the network.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	HNSNetworkID string `json:"hnsNetworkID,omitempty"`

	// uplink is the adapter in use.
	// +optional
	Uplink *PortStatus `json:"uplink,omitempty"`

	// gateway is the gateway port in use.
	// +optional
	Gateway *GatewayStatus `json:"gateway,omitempty"`

	// tunnel is the tunnel port in use; absent in NoEncap mode.
	// +optional
	Tunnel *TunnelStatus `json:"tunnel,omitempty"`

	// mtu in effect for Pods and the gateway.
	// +optional
	MTU int32 `json:"mtu,omitempty"`

	// flowCount is the number of OpenFlow flows winnet has installed on the bridge.
	// +optional
	FlowCount int32 `json:"flowCount,omitempty"`

	// remoteRoutes counts the routes to other nodes' Pod subnets.
	// +optional
	RemoteRoutes RemoteRoutesStatus `json:"remoteRoutes,omitzero"`

	// services counts the Services and Service ports the agent realised in OVS.
	// +optional
	Services ServicesStatus `json:"services,omitzero"`

	// networkPolicies counts the NetworkPolicies and rules the agent realised in OVS.
	// +optional
	NetworkPolicies NetworkPoliciesStatus `json:"networkPolicies,omitzero"`

	// nodeSubnet is the node IP with the prefix length of its subnet, as the bridge interface holds
	// it: the uplink subnet, where the egress IPs the node may hold lie.
	// +optional
	NodeSubnet InterfaceAddress `json:"nodeSubnet,omitempty"`

	// egressIPs are the egress IPs of the Egresses assigned to the node that it realised: on the
	// bridge interface, with the selected Pods' connections SNATed to them.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	EgressIPs []IPv4Address `json:"egressIPs,omitempty"`
}

// NetworkPoliciesStatus counts what the agent realised of the cluster's NetworkPolicies on this
// node.
type NetworkPoliciesStatus struct {
	// policies is the number of NetworkPolicies that select at least one Pod of this node.
	Policies int32 `json:"policies"`
	// rules is the number of rules realised: one per rule and group of Pods that a named port
	// resolves to the same port numbers; rules whose peers match nothing are not counted.
	Rules int32 `json:"rules"`

	// clusterNetworkPolicies lists every ClusterNetworkPolicy (policy.networking.k8s.io) the agent
	// compiled, with subjects on this node or not, at the generation compiled and with what of it
	// this node does not realise. It is what winnet-controller 0.1.0 reads. Agents from 0.2.0 on
	// write it only while the cluster has at most 256 ClusterNetworkPolicies (none beyond: a node
	// with an empty list takes no part in a 0.1.0 controller's conditions), with what is not
	// realised only for the policies with subjects on this node, cut at 256 characters;
	// clusterNetworkPolicyReport is the bounded report they write for every size, which
	// winnet-controller reads from 0.2.0 on (this list only from agents that do not write it).
	// Absent while the agent does not realise ClusterNetworkPolicies (the cluster does not serve
	// their CRD; the agent follows it without a restart).
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=20000
	ClusterNetworkPolicies []ClusterNetworkPolicyRealisation `json:"clusterNetworkPolicies,omitempty"`

	// clusterNetworkPolicyReport is what the agent realised of the cluster's ClusterNetworkPolicies,
	// bounded whatever their number: digests of the policies compiled (name and generation), and
	// the policies with subjects on this node it does not realise whole. winnet-controller writes
	// each policy's Realised condition from the nodes' reports. Absent while the agent does not
	// realise ClusterNetworkPolicies, and from agents before 0.2.0.
	// +optional
	ClusterNetworkPolicyReport *ClusterNetworkPolicyReport `json:"clusterNetworkPolicyReport,omitempty"`
}

// ClusterNetworkPolicyReport is an agent's bounded report of the ClusterNetworkPolicies: a policy is
// realised on the node when the node compiled its current generation (its bucket's digest is the
// one winnet-controller computes, or was when that generation was current) and does not list it
// in notRealised (nor may have omitted it: notRealisedOmitted).
type ClusterNetworkPolicyReport struct {
	// compiled counts the ClusterNetworkPolicies the agent compiled: every one of the cluster's.
	Compiled int32 `json:"compiled"`
	// applied counts those whose subject selects a Pod of this node.
	Applied int32 `json:"applied"`
	// digests are the policies compiled in 256 buckets: a policy's bucket is the FNV-1a hash (32
	// bits) of its name modulo 256, and a bucket's digest the first 16 hexadecimal digits of the
	// SHA-256 of its policies' "<name> <generation>" lines, sorted by name, each ending in a newline,
	// or empty when it has none (internal/cnpstatus).
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=16
	// +listType=atomic
	Digests []string `json:"digests"`
	// notRealised lists the policies with subjects on this node it does not realise whole, at the
	// generation compiled, sorted by name: the first 64.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	NotRealised []ClusterNetworkPolicyRealisation `json:"notRealised,omitempty"`
	// notRealisedOmitted counts the policies not realised whole beyond those listed (their names
	// sort after the last one listed).
	// +optional
	NotRealisedOmitted int32 `json:"notRealisedOmitted,omitempty"`
	// legacyDigest is the digest of clusterNetworkPolicies as the agent wrote it with this report:
	// a report that no longer matches the list was left by a newer agent and overwritten since by
	// an older one, and the list is read instead.
	// +kubebuilder:validation:MaxLength=16
	LegacyDigest string `json:"legacyDigest"`
}

// ClusterNetworkPolicyRealisation is what an agent realised of one ClusterNetworkPolicy.
type ClusterNetworkPolicyRealisation struct {
	// name is the ClusterNetworkPolicy's name.
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// generation is the policy's metadata.generation the agent realised.
	Generation int64 `json:"generation"`
	// notRealised says what of the policy this node does not realise and how it is treated
	// instead (unsupported peers or ports, rules beyond the priority band); empty when all of it is.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	NotRealised string `json:"notRealised,omitempty"`
}

// ServicesStatus counts what the agent realised of the cluster's Services on this node.
type ServicesStatus struct {
	// services is the number of Services realised (ClusterIP and NodePort; headless, ExternalName and
	// other proxies' Services are not).
	Services int32 `json:"services"`
	// ports is the number of Service ports realised.
	Ports int32 `json:"ports"`
	// The number of endpoints is on the agent's metrics (winnet_service_realised{kind="endpoints"}), not
	// here: a count that changes with any endpoint of the cluster would make every node write its status
	// on every endpoint change.
}

// PortStatus is an OVS port as realised.
type PortStatus struct {
	// name of the port.
	Name string `json:"name"`
	// mac of the interface.
	// +optional
	MAC string `json:"mac,omitempty"`
	// ofPort is the OpenFlow port number.
	// +optional
	OFPort int32 `json:"ofPort,omitempty"`
}

// GatewayStatus is the gateway as realised.
type GatewayStatus struct {
	// ip of the gateway.
	IP string `json:"ip"`
	// mac of the gateway interface.
	// +optional
	MAC string `json:"mac,omitempty"`
	// ofPort is the OpenFlow port number.
	// +optional
	OFPort int32 `json:"ofPort,omitempty"`
}

// TunnelStatus is the tunnel port as realised.
type TunnelStatus struct {
	// type of the tunnel.
	Type TunnelType `json:"type"`
	// port is the UDP destination port in use.
	// +optional
	Port int32 `json:"port,omitempty"`
	// ofPort is the OpenFlow port number.
	// +optional
	OFPort int32 `json:"ofPort,omitempty"`
	// vni is the tunnel's own VNI: the one the node sends to winnet peers with and accepts from any
	// peer (routes with a VNI of their own are accepted from their peer only).
	// +optional
	VNI int32 `json:"vni,omitempty"`
	// vtepMAC is the node's VTEP MAC in use (spec.encapsulation.vtepMAC or the one derived from the
	// node's name).
	// +optional
	VTEPMAC string `json:"vtepMAC,omitempty"`
}

// RemoteRoutesStatus counts RemoteSubnetRoutes applied to the node.
type RemoteRoutesStatus struct {
	// desired is the number of routes the node should have.
	Desired int32 `json:"desired"`
	// installed is the number of routes whose host route and flows are in place.
	Installed int32 `json:"installed"`
	// failed is the number of routes that could not be installed; RoutesReady names them.
	Failed int32 `json:"failed"`
}

// WindowsNodeNetwork is the desired network of one Windows node, named after its Node.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=wnn,categories=winnet
// +kubebuilder:printcolumn:name="Pod CIDRs",type=string,JSONPath=`.spec.podCIDRs`
// +kubebuilder:printcolumn:name="Node IP",type=string,JSONPath=`.spec.nodeIP`
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.encapsulation.mode`
// +kubebuilder:printcolumn:name="Tunnel",type=string,JSONPath=`.spec.encapsulation.tunnelType`
// +kubebuilder:printcolumn:name="Routes",type=integer,JSONPath=`.status.remoteRoutes.installed`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Bridge",type=string,JSONPath=`.spec.bridge.name`,priority=1
// +kubebuilder:printcolumn:name="Flows",type=integer,JSONPath=`.status.flowCount`,priority=1
// +kubebuilder:printcolumn:name="MTU",type=integer,JSONPath=`.status.mtu`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type WindowsNodeNetwork struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired network of the node.
	// +required
	Spec WindowsNodeNetworkSpec `json:"spec"`

	// status is what the node's agent observed.
	// +optional
	Status WindowsNodeNetworkStatus `json:"status,omitzero"`
}

// WindowsNodeNetworkList is a list of WindowsNodeNetworks.
//
// +kubebuilder:object:root=true
type WindowsNodeNetworkList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []WindowsNodeNetwork `json:"items"`
}

func init() {
	SchemeBuilder.Register(&WindowsNodeNetwork{}, &WindowsNodeNetworkList{})
}
