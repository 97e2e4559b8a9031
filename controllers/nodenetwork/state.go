package nodenetwork

import (
	"net"
	"net/netip"
	"sync"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/internal/pipeline"
)

// Realized is the node network as the reconciler last converged it: what the reconcilers built on
// it (remote routes, Pods) need.
type Realized struct {
	// Flows is the OpenFlow connection to the bridge; other reconcilers sync their own categories.
	Flows *openflow.Bridge
	// Node is the base pipeline's model: ofports, MACs, node IP, Pod CIDR, gateway.
	Node pipeline.Node
	// Mode and VNI are the encapsulation settings.
	Mode networkv1alpha1.EncapsulationMode
	VNI  uint32
	// NodeSubnet is the node IP with the prefix length of its subnet, for Hybrid mode.
	NodeSubnet netip.Prefix
	// UplinkMAC is the source MAC of packets routed out of the uplink.
	UplinkMAC net.HardwareAddr
	// BridgeLinkIndex and GatewayLinkIndex are the host interfaces of the bridge and the gateway.
	BridgeLinkIndex, GatewayLinkIndex int
}

// RoutesResult is what the remote route reconciler installed, reported in the node's status.
type RoutesResult struct {
	Desired, Installed int
	// Failed names the routes that could not be installed, with why.
	Failed []string
}

// State shares the realised node network between the node's reconcilers. The node network
// reconciler is the only writer of the WindowsNodeNetwork's status: the others report through State.
type State struct {
	mu       sync.RWMutex
	realized *Realized
	routes   *RoutesResult
	changed  chan struct{}
}

// NewState returns an empty State.
func NewState() *State { return &State{changed: make(chan struct{}, 1)} }

// Realized returns the realised node network; false until the node network is Ready.
func (s *State) Realized() (Realized, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.realized == nil {
		return Realized{}, false
	}
	return *s.realized, true
}

// Changed is signalled when the realised node network changes.
func (s *State) Changed() <-chan struct{} { return s.changed }

func (s *State) setRealized(r *Realized) {
	s.mu.Lock()
	changed := !sameRealized(s.realized, r)
	s.realized = r
	s.mu.Unlock()
	if changed {
		select {
		case s.changed <- struct{}{}:
		default:
		}
	}
}

func sameRealized(a, b *Realized) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Flows == b.Flows && a.Mode == b.Mode && a.VNI == b.VNI && a.NodeSubnet == b.NodeSubnet &&
		a.BridgeLinkIndex == b.BridgeLinkIndex && a.GatewayLinkIndex == b.GatewayLinkIndex &&
		a.Node.NodeIP == b.Node.NodeIP && a.Node.GatewayOFPort == b.Node.GatewayOFPort &&
		a.Node.TunnelOFPort == b.Node.TunnelOFPort && a.Node.UplinkOFPort == b.Node.UplinkOFPort &&
		a.Node.GatewayMAC.String() == b.Node.GatewayMAC.String() && a.UplinkMAC.String() == b.UplinkMAC.String()
}

// SetRoutes records what the remote route reconciler installed.
func (s *State) SetRoutes(r RoutesResult) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.routes = &r
}

func (s *State) routesResult() (RoutesResult, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.routes == nil {
		return RoutesResult{}, false
	}
	return *s.routes, true
}
