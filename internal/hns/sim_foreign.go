package hns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
)

// This file teaches the simulator the state other network stacks leave on a Windows node, so that
// `winnet-agent takeover` is tested against a node seeded with it. Sources, each call below names its own:
//   - flannel-io/flannel pkg/backend/vxlan/device_windows.go and vxlan_network_windows.go (win-overlay: an
//     Overlay network, its HostRoute policy, one RemoteSubnetRoute policy per remote lease);
//   - flannel-io/flannel pkg/backend/hostgw/hostgw_windows.go (host-gw: an L2Bridge network "cbr0" and its
//     host endpoint "cbr0_ep");
//   - kubernetes/kubernetes pkg/proxy/winkernel/hns.go and proxier.go (winkernel: a local source-VIP
//     endpoint on the Overlay network, remote endpoints for backends on other nodes, one load balancer per
//     Service port and frontend);
//   - Microsoft's HNS documentation (learn.microsoft.com, "Container networking: network drivers" and the
//     HNS/HCN JSON schema): network types Transparent, L2Bridge, Overlay, NAT; deleting a network deletes its
//     endpoints and policies.
//
// The Linux-backed simulator keeps these networks as HNS state only: it realises (veth pairs, management
// vNIC) only Transparent networks, winnet's. Like HNS it refuses a Transparent network on an adapter another
// network's switch holds (ErrAdapterInUse), which is why another stack's network must go before winnet's
// agent can build its own.

// ForeignNetworkSpec is a network another stack creates.
type ForeignNetworkSpec struct {
	Type NetworkType
	Name string
	// AdapterName is the adapter its switch binds to (NetAdapterName policy); empty for NAT.
	AdapterName string
	Subnet      netip.Prefix
	Gateway     netip.Addr
	// HostRoute adds the HostRoute policy (flannel's Overlay network).
	HostRoute bool
}

// CreateNetwork creates a network of another stack's type, as flannel's backends do (hcn
// HostComputeNetwork.Create for Overlay, HNS v1 POST for L2Bridge). An adapter another network holds fails
// with ErrAdapterInUse, as CreateTransparentNetwork does.
func (s *Sim) CreateNetwork(ctx context.Context, spec ForeignNetworkSpec) (*NetworkInfo, error) {
	m := s.m
	if spec.Type == "" || spec.Type == Transparent {
		return nil, errors.New("a Transparent network is created with CreateTransparentNetwork")
	}
	if spec.Name == "" || !spec.Subnet.IsValid() || !spec.Subnet.Masked().Contains(spec.Gateway) {
		return nil, fmt.Errorf("network %q: a name, a subnet and a gateway in it are required", spec.Name)
	}
	m.all.Lock()
	defer m.all.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, n := range m.networks {
		if spec.AdapterName != "" && strings.EqualFold(n.AdapterName, spec.AdapterName) {
			return nil, fmt.Errorf("%w: HNS returned 0x80070057 (The parameter is incorrect); adapter %q is bound to network %q (%s)",
				ErrAdapterInUse, spec.AdapterName, n.Name, n.ID)
		}
	}
	n := &simNetwork{netType: spec.Type, hostRoute: spec.HostRoute, Network: Network{
		ID: newGUID(), Name: spec.Name, AdapterName: spec.AdapterName, Subnet: spec.Subnet.Masked(), Gateway: spec.Gateway,
	}}
	if spec.AdapterName != "" {
		n.ManagementVNIC = WindowsManagementVNICName(spec.AdapterName)
	}
	m.networks = append(m.networks, n)
	return m.networkInfo(n), m.save(m.pending())
}

// AddRemoteSubnetPolicy adds a RemoteSubnetRoute policy to a network, as flannel's vxlan backend does for
// every remote lease (HostComputeNetwork.AddPolicy); one for the same DestinationPrefix is replaced, as
// flannel removes the existing one first.
func (s *Sim) AddRemoteSubnetPolicy(networkID string, p RemoteSubnetPolicy) error {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.network(networkID)
	if n == nil {
		return fmt.Errorf("network %q: %w", networkID, ErrNotFound)
	}
	if n.netType != Overlay {
		return fmt.Errorf("network %q is %s: RemoteSubnetRoute policies belong to Overlay networks", n.Name, n.typ())
	}
	n.remoteSubnets = slices.DeleteFunc(n.remoteSubnets, func(o RemoteSubnetPolicy) bool { return o.DestinationPrefix == p.DestinationPrefix })
	n.remoteSubnets = append(n.remoteSubnets, p)
	return m.save(m.pending())
}

// CreateRemoteEndpoint creates a remote endpoint (hcn.EndpointFlagsRemoteEndpoint) on an Overlay network,
// as kube-proxy's winkernel proxier does for a Service backend on another node (HostComputeNetwork.
// CreateRemoteEndpoint with a ProviderAddress policy): its address is the remote Pod's, outside the
// network's subnet. It is attached to no namespace.
func (s *Sim) CreateRemoteEndpoint(_ context.Context, networkID string, ip netip.Addr, mac net.HardwareAddr) (*Endpoint, error) {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.network(networkID)
	if n == nil {
		return nil, fmt.Errorf("network %q: %w", networkID, ErrNotFound)
	}
	if n.netType != Overlay {
		return nil, fmt.Errorf("network %q is %s: remote endpoints belong to Overlay networks", n.Name, n.typ())
	}
	if len(mac) != 6 {
		return nil, fmt.Errorf("MAC %q is not a 48-bit MAC", mac)
	}
	ep := &Endpoint{ID: newGUID(), NetworkID: n.ID, IP: ip, PrefixLength: 32, MAC: slices.Clone(mac), Remote: true}
	m.endpoints = append(m.endpoints, ep)
	return copyEndpoint(ep), m.save(m.pending())
}

// CreateSourceVIPEndpoint creates kube-proxy's source-VIP endpoint on an Overlay network: a local endpoint
// without a name holding the source VIP (from the network's subnet) with the host's MAC (kubernetes
// pkg/proxy/winkernel/proxier.go, NewProxier: endpointInfo{ip: sourceVip, isLocal: true, macAddress:
// hostMac}, created through hns.go createEndpoint). It is attached to no namespace.
func (s *Sim) CreateSourceVIPEndpoint(_ context.Context, networkID string, ip netip.Addr, hostMAC net.HardwareAddr) (*Endpoint, error) {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.network(networkID)
	if n == nil {
		return nil, fmt.Errorf("network %q: %w", networkID, ErrNotFound)
	}
	if n.netType != Overlay || !n.Subnet.Contains(ip) || len(hostMAC) != 6 {
		return nil, fmt.Errorf("a source VIP endpoint needs an Overlay network, an address in its subnet %s and a 48-bit MAC", n.Subnet)
	}
	ep := &Endpoint{ID: newGUID(), NetworkID: n.ID, IP: ip, PrefixLength: n.Subnet.Bits(), MAC: slices.Clone(hostMAC), Gateway: n.Gateway}
	m.endpoints = append(m.endpoints, ep)
	return copyEndpoint(ep), m.save(m.pending())
}

// CreateLoadBalancer creates a load balancer as kube-proxy's winkernel proxier does (hcn
// HostComputeLoadBalancer.Create). Its endpoints must exist.
func (s *Sim) CreateLoadBalancer(_ context.Context, lb LoadBalancer) (*LoadBalancer, error) {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range lb.Endpoints {
		if m.endpoint(id) == nil {
			return nil, fmt.Errorf("endpoint %q of the load balancer: %w", id, ErrNotFound)
		}
	}
	c := copyLoadBalancer(&lb)
	c.ID = newGUID()
	m.loadBalancers = append(m.loadBalancers, c)
	return copyLoadBalancer(c), m.save(m.pending())
}

func (n *simNetwork) typ() NetworkType {
	if n.netType == "" {
		return Transparent
	}
	return n.netType
}

func copyLoadBalancer(lb *LoadBalancer) *LoadBalancer {
	c := *lb
	c.FrontendVIPs, c.Endpoints = slices.Clone(lb.FrontendVIPs), slices.Clone(lb.Endpoints)
	return &c
}

// networkInfo returns the network as Inventory reports it; the caller holds m.mu.
func (m *simModel) networkInfo(n *simNetwork) *NetworkInfo {
	return &NetworkInfo{Network: n.Network, Type: n.typ(), RemoteSubnets: slices.Clone(n.remoteSubnets), HostRoute: n.hostRoute}
}

func (m *simModel) ListNetworks(context.Context) ([]NetworkInfo, error) {
	if err := m.enter(OpListNetworks); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]NetworkInfo, 0, len(m.networks))
	for _, n := range m.networks {
		out = append(out, *m.networkInfo(n))
	}
	return out, nil
}

func (m *simModel) ListLoadBalancers(context.Context) ([]LoadBalancer, error) {
	if err := m.enter(OpListLoadBalancers); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]LoadBalancer, 0, len(m.loadBalancers))
	for _, lb := range m.loadBalancers {
		out = append(out, *copyLoadBalancer(lb))
	}
	return out, nil
}

func (m *simModel) DeleteLoadBalancer(_ context.Context, id string) error {
	if err := m.enter(OpDeleteLoadBalancer); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	i := slices.IndexFunc(m.loadBalancers, func(lb *LoadBalancer) bool { return sameID(lb.ID, id) })
	if i < 0 {
		return nil
	}
	m.loadBalancers = slices.Delete(m.loadBalancers, i, i+1)
	return m.save(m.pending())
}

var _ inventoryRaw = (*simModel)(nil)

// The bounded views of the inventory calls.

var _ Inventory = (*bounded)(nil)

func (b *bounded) inventory(op string) (inventoryRaw, error) {
	inv, ok := b.raw.(inventoryRaw)
	if !ok {
		return nil, fmt.Errorf("%s: this HNS client lists no networks or load balancers: %w", op, errors.ErrUnsupported)
	}
	return inv, nil
}

func (b *bounded) ListNetworks(ctx context.Context) ([]NetworkInfo, error) {
	const op = "listing HNS networks"
	inv, err := b.inventory(op)
	if err != nil {
		return nil, err
	}
	return withTimeout(ctx, b.timeouts.Default, op, inv.ListNetworks)
}

func (b *bounded) ListLoadBalancers(ctx context.Context) ([]LoadBalancer, error) {
	const op = "listing HNS load balancers"
	inv, err := b.inventory(op)
	if err != nil {
		return nil, err
	}
	return withTimeout(ctx, b.timeouts.Default, op, inv.ListLoadBalancers)
}

func (b *bounded) DeleteLoadBalancer(ctx context.Context, id string) error {
	op := fmt.Sprintf("deleting HNS load balancer %q", id)
	inv, err := b.inventory(op)
	if err != nil {
		return err
	}
	return withTimeoutErr(ctx, b.timeouts.Default, op, func(ctx context.Context) error { return inv.DeleteLoadBalancer(ctx, id) })
}
