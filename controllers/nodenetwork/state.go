package nodenetwork

import (
	"net"
	"net/netip"
	"reflect"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

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
	// BridgeAddresses are the addresses the bridge interface (the management vNIC, which took the
	// uplink's addresses) held when the node network was last converged, sorted, link-local ones
	// included: the node IP and any other address the host has there. An address added or removed
	// there is seen at the next converge, which wakes the subscribers.
	BridgeAddresses []netip.Prefix
	// UplinkMAC is the source MAC of packets routed out of the uplink.
	UplinkMAC net.HardwareAddr
	// BridgeLinkIndex and GatewayLinkIndex are the host interfaces of the bridge and the gateway.
	BridgeLinkIndex, GatewayLinkIndex int
	// ServiceCIDRs are the spec's IPv4 Service CIDRs, masked and sorted: the host routes each one
	// into the gateway instead of a route per ClusterIP (the Service reconciler).
	ServiceCIDRs []netip.Prefix
}

// RoutesResult is what the remote route reconciler installed, reported in the node's status.
type RoutesResult struct {
	Desired, Installed int
	// Failed names the routes that could not be installed, with why.
	Failed []string
}

// ServicesResult is what the Service reconciler realised in its last pass: counts, or why it failed.
// Endpoints are not counted here (they are on the Service reconciler's metrics): a change of any
// endpoint in the cluster would wake the node network and write its status.
type ServicesResult struct {
	Services, Ports int
	// Err says why the pass failed; empty when it succeeded.
	Err string
}

// PoliciesResult is what the NetworkPolicy reconciler realised in its last pass: counts, or why it
// failed.
type PoliciesResult struct {
	Policies, Rules int
	// ClusterReport is what was realised of the ClusterNetworkPolicies (nil: they are not
	// realised), Cluster the list previous releases read beside it.
	ClusterReport *networkv1alpha1.ClusterNetworkPolicyReport
	Cluster       []networkv1alpha1.ClusterNetworkPolicyRealisation
	// Refused names the rules refused for their size ("namespace/name: ingress rule 1: why"); the
	// rest was realised.
	Refused []string
	// Err says why the pass failed; empty when it succeeded.
	Err string
}

// State shares the realised node network between the node's reconcilers. The node network
// reconciler is the only writer of the WindowsNodeNetwork's status: the others report through State.
type State struct {
	mu       sync.RWMutex
	realized *Realized
	routes   *RoutesResult
	services *ServicesResult
	policies *PoliciesResult
	// egressIPs are the egress IPs the egress reconciler realised (SetEgressIPs); nil until it reports.
	egressIPs []netip.Addr
	// egressAddresses are the addresses the egress reconciler may have on the bridge interface
	// (SetEgressAddresses).
	egressAddresses []netip.Addr
	// reports wakes the node network reconciler to write a changed RoutesResult into the status.
	reports chan event.GenericEvent
	// node is the name reports name.
	node string
	// published are the reports as of the last wake-up of the reconciler, which is what the status
	// shows (the *Result accessors): a count changed since is written with the next wake-up, not
	// with whatever else makes the reconciler write the status meanwhile (its own status write
	// comes back to it as an update of its WindowsNodeNetwork).
	published struct {
		routes   *RoutesResult
		services *ServicesResult
		policies *PoliciesResult
	}
	// lastReport is when the reconciler was last woken to write the status, countTimer the
	// pending wake-up of count changes held back (wakeCounts), countInterval the least time
	// between two wake-ups for counts (zero: CountReportInterval).
	lastReport    time.Time
	countTimer    *time.Timer
	countInterval time.Duration
	// subscribers are woken when the realised node network changes (see Subscribe).
	subscribers wakeups
	// previousRound tracks the flow owners' reports on the current bridge connection (see
	// FlowsSynced).
	previousRound previousRound
	// extraOwners are the flow owners beyond flowOwners (see AddFlowOwner).
	extraOwners []FlowOwner
	// policyIndex and policySubscribers: the NetworkPolicy reconciler's names for packet traces
	// (policyindex.go).
	policyIndex       *PolicyIndex
	policySubscribers wakeups
	// heldEgresses and heldEgressSubscribers: the Egresses whose flows the egress reconciler
	// installed, for packet traces (heldegress.go).
	heldEgresses          []HeldEgress
	heldEgressSubscribers wakeups
	// peers and peerSubscribers: the routes the remote route reconciler realised, for the egress
	// reconciler (peers.go).
	peers           map[string][]Peer
	peerSubscribers wakeups
	// frozen is set by Freeze: the realised bridge, and any realised later, sends nothing.
	frozen bool
}

// Freeze stops every change to the node's switch: the realised bridge's, and any bridge realised later
// (openflow.Bridge.Freeze). The agent calls it first when it is told to stop (SetupNodeNetwork).
func (s *State) Freeze() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.frozen = true
	if s.realized != nil && s.realized.Flows != nil {
		s.realized.Flows.Freeze()
	}
}

// NewState returns an empty State.
func NewState() *State {
	return &State{reports: make(chan event.GenericEvent, 1)}
}

// Realized returns the realised node network; false until the node network is Ready.
func (s *State) Realized() (Realized, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.realized == nil {
		return Realized{}, false
	}
	return *s.realized, true
}

func (s *State) setRealized(r *Realized) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.frozen && r != nil && r.Flows != nil {
		r.Flows.Freeze()
	}
	changed := !sameRealized(s.realized, r)
	s.realized = r
	if changed {
		s.subscribers.wake()
	}
}

// Subscribe returns a channel that receives a value whenever the realised node network changes: it
// becomes Ready, stops being Ready, or is realised again differently — another OpenFlow connection
// (the bridge was rebuilt or reconnected) or another pipeline model. Wake-ups are coalesced. The
// Pods' flows, installed on top of the node network, are resynced on it.
func (s *State) Subscribe() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.subscribers.add()
}

// sameRealized compares two realised node networks; the OpenFlow connections by identity.
func sameRealized(a, b *Realized) bool {
	if a == nil || b == nil {
		return a == b
	}
	if a.Flows != b.Flows {
		return false
	}
	x, y := *a, *b
	x.Flows, y.Flows = nil, nil
	return reflect.DeepEqual(x, y)
}

// SetRoutes records what the remote route reconciler installed; a change of the failed routes is
// written into the node's status at once, a change of the counts alone within CountReportInterval.
func (s *State) SetRoutes(r RoutesResult) {
	s.mu.Lock()
	urgent := s.routes == nil || !slices.Equal(s.routes.Failed, r.Failed)
	counts := !urgent && (s.routes.Desired != r.Desired || s.routes.Installed != r.Installed)
	s.routes = &r
	s.mu.Unlock()
	s.report(urgent, counts)
}

// CountReportInterval is the least time between two status writes that only change counts (routes,
// Services, policies and their rules). A count change after a quiet interval is written at once;
// the changes that follow within the interval are written together at its end. Without it every
// agent wrote its status once per Service, policy or Node added anywhere in the cluster: 5,000
// agents would write 5,000 statuses for each Service created. A change of what a condition says
// (a failure, a refusal, what is realised of ClusterNetworkPolicies, the egress IPs) is written at
// once.
const CountReportInterval = 5 * time.Second

// report wakes the node network reconciler for a reported change: at once when urgent, within
// CountReportInterval when only counts changed.
func (s *State) report(urgent, counts bool) {
	switch {
	case urgent:
		s.mu.RLock()
		node := s.node
		s.mu.RUnlock()
		s.wake(node)
	case counts:
		s.wakeCounts()
	}
}

// wakeCounts wakes the reconciler for a change of counts: at once when it was last woken
// CountReportInterval ago or more, else once at the end of that interval.
func (s *State) wakeCounts() {
	s.mu.Lock()
	if s.countTimer != nil {
		s.mu.Unlock()
		return // the held-back wake-up will write this change too
	}
	interval := s.countInterval
	if interval == 0 {
		interval = CountReportInterval
	}
	if wait := time.Until(s.lastReport.Add(interval)); wait > 0 {
		s.countTimer = time.AfterFunc(wait, func() {
			s.mu.Lock()
			s.countTimer = nil
			node := s.node
			s.mu.Unlock()
			s.wake(node)
		})
		s.mu.Unlock()
		return
	}
	node := s.node
	s.mu.Unlock()
	s.wake(node)
}

// wake publishes the reports and asks the node network reconciler to write them into the node's
// status.
func (s *State) wake(node string) {
	s.mu.Lock()
	s.published.routes, s.published.services, s.published.policies = s.routes, s.services, s.policies
	s.lastReport = time.Now()
	s.mu.Unlock()
	if node == "" {
		return
	}
	select {
	case s.reports <- event.GenericEvent{Object: &networkv1alpha1.WindowsNodeNetwork{ObjectMeta: metav1.ObjectMeta{Name: node}}}:
	default: // a wake-up is pending already
	}
}

// SetServices records what the Service reconciler realised; a change of its error is written into
// the node's status at once, a change of the counts alone within CountReportInterval.
func (s *State) SetServices(r ServicesResult) {
	s.mu.Lock()
	urgent := s.services == nil || s.services.Err != r.Err
	counts := !urgent && *s.services != r
	s.services = &r
	s.mu.Unlock()
	s.report(urgent, counts)
}

func (s *State) servicesResult() (ServicesResult, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.published.services == nil {
		return ServicesResult{}, false
	}
	return *s.published.services, true
}

// SetPolicies records what the NetworkPolicy reconciler realised; a change of its error, refusals or
// ClusterNetworkPolicy report is written into the node's status at once, a change of the counts
// alone within CountReportInterval.
func (s *State) SetPolicies(r PoliciesResult) {
	s.mu.Lock()
	urgent := s.policies == nil || s.policies.Err != r.Err || !slices.Equal(s.policies.Refused, r.Refused) ||
		!slices.Equal(s.policies.Cluster, r.Cluster) || !reflect.DeepEqual(s.policies.ClusterReport, r.ClusterReport)
	counts := !urgent && (s.policies.Policies != r.Policies || s.policies.Rules != r.Rules)
	s.policies = &r
	s.mu.Unlock()
	s.report(urgent, counts)
}

func (s *State) policiesResult() (PoliciesResult, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.published.policies == nil {
		return PoliciesResult{}, false
	}
	return *s.published.policies, true
}

// watchReports returns the source of status wake-ups for the node's reconciler.
func (s *State) watchReports(node string) <-chan event.GenericEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.node = node
	return s.reports
}

func (s *State) routesResult() (RoutesResult, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.published.routes == nil {
		return RoutesResult{}, false
	}
	return *s.published.routes, true
}

// SetEgressAddresses records the egress IPs the egress reconciler is about to put, or may still have,
// on the bridge interface: the node network leaves them out of Realized.BridgeAddresses, since they
// are not the node's own addresses (no NodePort, no hostPort on them). The reconciler sets them
// before it adds an address and after it removed one.
func (s *State) SetEgressAddresses(ips []netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.egressAddresses = slices.Clone(ips)
}

// egressAddressesOf returns what SetEgressAddresses recorded.
func (s *State) egressAddressesOf() []netip.Addr {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Clone(s.egressAddresses)
}

// SetEgressIPs records the egress IPs the egress reconciler realised on the node (on the bridge
// interface, their flows installed); a change is written into the node's status at once.
func (s *State) SetEgressIPs(ips []netip.Addr) {
	ips = slices.Clone(ips)
	slices.SortFunc(ips, netip.Addr.Compare)
	if ips == nil {
		ips = []netip.Addr{}
	}
	s.mu.Lock()
	changed := s.egressIPs == nil || !slices.Equal(s.egressIPs, ips)
	s.egressIPs = ips
	node := s.node
	s.mu.Unlock()
	if changed {
		s.wake(node)
	}
}

// EgressIPs returns the egress IPs the egress reconciler reported realised; false before it reports.
func (s *State) EgressIPs() ([]netip.Addr, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Clone(s.egressIPs), s.egressIPs != nil
}
