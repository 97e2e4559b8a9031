package hns

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"time"
)

// OVSExtensionID is the ID of the Open vSwitch forwarding extension of the Hyper-V switch, as Open vSwitch for
// Windows registers it.
const OVSExtensionID = "583CC151-73EC-4A6A-8B47-578297AD7623"

var (
	// ErrNotFound is returned (wrapped) when a network, endpoint or namespace a call needs does not exist.
	ErrNotFound = errors.New("not found")

	// ErrAdapterInUse is returned (wrapped) when a network is created on an adapter that is already bound to
	// another HNS network. HNS reports it as HRESULT 0x80070057 (ERROR_INVALID_PARAMETER, "The parameter is
	// incorrect"), Antrea issues #2013 and #2213.
	ErrAdapterInUse = errors.New("network adapter is already bound to another HNS network (HNS error 0x57, ERROR_INVALID_PARAMETER)")

	// ErrTimeout is returned (wrapped, with the operation) when an HNS call does not return within its bound.
	// The call itself may still complete later: HNS calls cannot be cancelled.
	ErrTimeout = errors.New("HNS call timed out")
)

// NetworkSpec describes the Transparent network to create.
type NetworkSpec struct {
	// Name is the HNS network name; it is winnet's ownership mark. HNS does not enforce unique names: callers
	// look a network up by name before creating it.
	Name string
	// AdapterName is the host adapter the network's Hyper-V switch binds to (the one holding the Node IP).
	AdapterName string
	// Subnet is the network's IPAM subnet (the Pod CIDR of the node).
	Subnet netip.Prefix
	// Gateway is the next hop of the subnet's default route (the winnet gateway address).
	Gateway netip.Addr
	// SourceMAC, optional, is the MAC the management vNIC keeps (the adapter's own MAC).
	SourceMAC net.HardwareAddr
}

// Network is an HNS network as HNS reports it.
type Network struct {
	ID          string
	Name        string
	AdapterName string
	Subnet      netip.Prefix
	Gateway     netip.Addr
	// ManagementVNIC is the name under which the host network stack first shows the management vNIC HNS
	// created with the network's Hyper-V switch: "vEthernet (<AdapterName>)" on Windows, a short name
	// mapped from it in the Linux simulator (see LinuxManagementVNICName). The vNIC takes the adapter's
	// addresses, MAC, routes and DNS servers; the agent renames it to the bridge name, so after that no
	// link carries this name any more.
	ManagementVNIC string
}

// WindowsManagementVNICName is the alias Windows gives the management vNIC of a Hyper-V switch bound to
// the adapter: "vEthernet (<adapter>)" (Antrea: util.VirtualAdapterName).
func WindowsManagementVNICName(adapter string) string { return "vEthernet (" + adapter + ")" }

// EndpointSpec describes an endpoint to create on a network.
type EndpointSpec struct {
	// Name is the endpoint name; the OVS internal port of the Pod carries the same name.
	Name string
	// NetworkID is the ID of the network the endpoint is created on.
	NetworkID string
	// IP is the endpoint's IPv4 address; it must lie in the network's subnet.
	IP netip.Addr
	// PrefixLength defaults to the network subnet's prefix length when 0.
	PrefixLength int
	// MAC, optional, is the endpoint's MAC; HNS allocates one when nil.
	MAC net.HardwareAddr
	// Gateway, optional, is the next hop of the endpoint's default route; the network's gateway when invalid.
	Gateway netip.Addr
	// DNS are the Pod's DNS settings; HNS configures the container's DNS client from them.
	DNS DNS
}

// DNS are an endpoint's DNS settings (hcn HostComputeEndpoint.Dns).
type DNS struct {
	Domain  string   `json:"domain,omitempty"`
	Search  []string `json:"search,omitempty"`
	Servers []string `json:"servers,omitempty"`
	Options []string `json:"options,omitempty"`
}

func (d DNS) empty() bool {
	return d.Domain == "" && len(d.Search) == 0 && len(d.Servers) == 0 && len(d.Options) == 0
}

// Endpoint is an HNS endpoint as HNS reports it.
type Endpoint struct {
	ID           string
	Name         string
	NetworkID    string
	IP           netip.Addr
	PrefixLength int
	MAC          net.HardwareAddr
	Gateway      netip.Addr
	DNS          DNS
	// NamespaceID is the namespace the endpoint is attached to, empty when it is attached to none.
	NamespaceID string
	// Remote marks a remote endpoint (hcn.EndpointFlagsRemoteEndpoint): kube-proxy's winkernel proxier
	// creates one on an Overlay network for every Service backend on another node (kubernetes
	// pkg/proxy/winkernel/hns.go, createEndpoint with CreateRemoteEndpoint). winnet makes none.
	Remote bool
}

// Interface is the narrow view winnet has of the Host Networking Service.
//
// Contract, kept by every implementation:
//   - Every call is bounded by a timeout (see Timeouts); a call that does not return in time fails with an error
//     for which errors.Is(err, ErrTimeout) holds, while the underlying HNS call may still complete later.
//   - Lookups of something absent return an error for which errors.Is(err, ErrNotFound) holds.
//   - Deletes of something absent are a no-op and return nil; so are detaching an endpoint that is not attached
//     to the namespace and attaching an endpoint to the namespace it is already attached to.
//   - Creating a network on an adapter that is already bound to another network fails with an error for which
//     errors.Is(err, ErrAdapterInUse) holds (HNS: 0x80070057).
//   - HNS state does not survive a reboot: after one, networks and endpoints are gone and the OVS extension is
//     disabled; callers rebuild.
//   - IDs are GUIDs, compared case-insensitively.
type Interface interface {
	// GetNetworkByName returns the first network with this name.
	GetNetworkByName(ctx context.Context, name string) (*Network, error)
	// CreateTransparentNetwork creates a Transparent network bound to spec.AdapterName, with one IPAM subnet
	// whose default route goes through spec.Gateway. The OVS extension is left disabled. As HNS does, it
	// creates the Hyper-V switch and the management vNIC (Network.ManagementVNIC), which takes the adapter's
	// addresses, MAC, routes and DNS servers, static or DHCP; the adapter keeps no IP. The host loses
	// connectivity briefly. An adapter bound to another network, or one that is the management vNIC of
	// another network, fails with ErrAdapterInUse, naming that network.
	//
	// DeleteNetwork removes the switch and its management vNIC (whatever it was renamed to) and gives the
	// adapter its configuration back.
	CreateTransparentNetwork(ctx context.Context, spec NetworkSpec) (*Network, error)
	// DeleteNetwork deletes the network and, as HNS does, every endpoint on it.
	DeleteNetwork(ctx context.Context, networkID string) error
	// EnableOVSExtension enables the OVS extension (OVSExtensionID) on the network's Hyper-V switch. Call it
	// only after the host IP is confirmed on the management vNIC: enabling it earlier can break DHCP.
	EnableOVSExtension(ctx context.Context, networkID string) error
	// OVSExtensionEnabled reports whether the OVS extension is enabled on the network's Hyper-V switch.
	OVSExtensionEnabled(ctx context.Context, networkID string) (bool, error)

	// CreateEndpoint creates an endpoint on spec.NetworkID, attached to no namespace.
	CreateEndpoint(ctx context.Context, spec EndpointSpec) (*Endpoint, error)
	// GetEndpointByName returns the first endpoint with this name.
	GetEndpointByName(ctx context.Context, name string) (*Endpoint, error)
	// ListEndpoints returns the endpoints of a network; none when the network does not exist.
	ListEndpoints(ctx context.Context, networkID string) ([]Endpoint, error)
	// DeleteEndpoint deletes an endpoint, detaching it from its namespace.
	DeleteEndpoint(ctx context.Context, endpointID string) error
	// AttachEndpoint adds the endpoint to the namespace (on Windows the HCN namespace GUID that containerd
	// passes as the CNI netns). An endpoint belongs to at most one namespace: attaching it to a second one
	// fails.
	AttachEndpoint(ctx context.Context, endpointID, namespaceID string) error
	// DetachEndpoint removes the endpoint from the namespace.
	DetachEndpoint(ctx context.Context, endpointID, namespaceID string) error
}

// Timeouts bound HNS calls. A zero field takes its default.
type Timeouts struct {
	// Default bounds lookups, endpoint creation, attach and detach. Default 10s.
	Default time.Duration
	// Network bounds creating and deleting networks and enabling the extension: these create or remove the
	// Hyper-V switch and move the host's IP configuration, which takes seconds. Default 60s.
	Network time.Duration
	// EndpointDelete bounds endpoint deletion, which is known to hang in HNS; Antrea uses a hard 1s. Default 1s.
	EndpointDelete time.Duration
}

// Default timeouts.
const (
	DefaultCallTimeout           = 10 * time.Second
	DefaultNetworkTimeout        = 60 * time.Second
	DefaultEndpointDeleteTimeout = 1 * time.Second
)

func (t Timeouts) withDefaults() Timeouts {
	if t.Default <= 0 {
		t.Default = DefaultCallTimeout
	}
	if t.Network <= 0 {
		t.Network = DefaultNetworkTimeout
	}
	if t.EndpointDelete <= 0 {
		t.EndpointDelete = DefaultEndpointDeleteTimeout
	}
	return t
}

// Options configure the real HNS client returned by New.
type Options struct {
	Timeouts Timeouts
}
