package hns

import (
	"context"
	"net/netip"
)

// NetworkType is an HNS network's type (hcn.NetworkType).
type NetworkType string

// The network types winnet meets on a node. winnet makes only Transparent networks; the others are what
// other network stacks leave on a node that winnet takes over (`winnet-agent takeover`).
const (
	// Transparent is winnet's: its switch carries the OVS extension.
	Transparent NetworkType = "Transparent"
	// Overlay is what flannel's vxlan backend on Windows creates (flannel-io/flannel
	// pkg/backend/vxlan/device_windows.go, newVXLANDevice: Type "Overlay", one Static IPAM subnet = the
	// node's lease with its default route through the subnet's .1 and a VSID policy = the VNI, a
	// NetAdapterName policy, then a HostRoute policy; named by Backend.Name, default "flannel.<VNI>",
	// "vxlan0" in the sig-windows-tools and microsoft/SDN configurations).
	Overlay NetworkType = "Overlay"
	// L2Bridge is what flannel's host-gw backend on Windows creates (flannel-io/flannel
	// pkg/backend/hostgw/hostgw_windows.go: Type "L2Bridge", named by Backend.Name, default "cbr0",
	// gateway the subnet's .1, and a host endpoint "<name>_ep" holding the subnet's .2 attached to the host
	// compartment).
	L2Bridge NetworkType = "L2Bridge"
	// NAT is the network containerd's and Docker's default configurations create; no network stack's.
	NAT NetworkType = "NAT"
)

// RemoteSubnetPolicy is a network's RemoteSubnetRoute policy (hcn.RemoteSubnetRoutePolicySetting): flannel's
// vxlan backend adds one per remote node lease to its Overlay network (pkg/backend/vxlan/
// vxlan_network_windows.go, handleSubnetEvents: DestinationPrefix the lease's subnet, ProviderAddress its
// public IP, DistributedRouterMacAddress its VtepMAC, IsolationId its VNI), and kube-proxy's winkernel
// proxier reads them (kubernetes pkg/proxy/winkernel/hns.go, getNetworkByName).
type RemoteSubnetPolicy struct {
	DestinationPrefix netip.Prefix `json:"destinationPrefix"`
	ProviderAddress   netip.Addr   `json:"providerAddress"`
	// DRMAC is the DistributedRouterMacAddress: the remote node's VTEP MAC, as flannel formats it.
	DRMAC       string `json:"drMAC"`
	IsolationID uint16 `json:"isolationID"`
}

// NetworkInfo is any HNS network with its type and the policies the takeover reads.
type NetworkInfo struct {
	Network
	Type NetworkType
	// RemoteSubnets are its RemoteSubnetRoute policies.
	RemoteSubnets []RemoteSubnetPolicy
	// HostRoute reports its HostRoute policy (flannel adds one to its Overlay network for host-to-Pod traffic).
	HostRoute bool
}

// Inventory is the host-wide view of HNS that `winnet-agent takeover` needs to remove what another network
// stack left: every network whatever its type, every load balancer, and deleting them. It is kept apart from
// Interface, which is what winnet's own reconcilers use.
//
// Contract: as Interface's (every call bounded, deletes of something absent are no-ops, IDs compare
// case-insensitively). Deleting a network deletes its endpoints and its policies, as HNS does.
type Inventory interface {
	// ListNetworks returns every HNS network (hcn.ListNetworks).
	ListNetworks(ctx context.Context) ([]NetworkInfo, error)
	// ListEndpoints returns the endpoints of a network, local and remote.
	ListEndpoints(ctx context.Context, networkID string) ([]Endpoint, error)
	// ListLoadBalancers returns every HNS load balancer (hcn.ListLoadBalancers).
	ListLoadBalancers(ctx context.Context) ([]LoadBalancer, error)
	DeleteLoadBalancer(ctx context.Context, id string) error
	DeleteEndpoint(ctx context.Context, endpointID string) error
	DeleteNetwork(ctx context.Context, networkID string) error
}

// inventoryRaw is what a raw implementation adds to Interface for Inventory; bounded bounds it.
type inventoryRaw interface {
	ListNetworks(ctx context.Context) ([]NetworkInfo, error)
	ListLoadBalancers(ctx context.Context) ([]LoadBalancer, error)
	DeleteLoadBalancer(ctx context.Context, id string) error
}

// AsInventory returns the Inventory view of an HNS client made by New, NewSim or NewLinuxSim.
func AsInventory(h Interface) (Inventory, bool) {
	inv, ok := h.(Inventory)
	return inv, ok
}
