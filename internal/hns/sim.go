package hns

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/winnet-io/winnet/internal/hostnet"
	"github.com/winnet-io/winnet/internal/keyed"
)

// Op names an Interface operation, for fault injection and call counting in the simulator.
type Op string

// The operations of Interface.
const (
	OpGetNetworkByName         Op = "GetNetworkByName"
	OpCreateTransparentNetwork Op = "CreateTransparentNetwork"
	OpDeleteNetwork            Op = "DeleteNetwork"
	OpEnableOVSExtension       Op = "EnableOVSExtension"
	OpOVSExtensionEnabled      Op = "OVSExtensionEnabled"
	OpCreateEndpoint           Op = "CreateEndpoint"
	OpGetEndpointByName        Op = "GetEndpointByName"
	OpListEndpoints            Op = "ListEndpoints"
	OpDeleteEndpoint           Op = "DeleteEndpoint"
	OpAttachEndpoint           Op = "AttachEndpoint"
	OpDetachEndpoint           Op = "DetachEndpoint"
	// Inventory (sim_foreign.go).
	OpListNetworks       Op = "ListNetworks"
	OpListLoadBalancers  Op = "ListLoadBalancers"
	OpDeleteLoadBalancer Op = "DeleteLoadBalancer"
)

// SimOptions configure a simulator.
type SimOptions struct {
	// Timeouts bound every call exactly as they bound the real HNS client.
	Timeouts Timeouts
	// Latency is added to every call (SetLatency overrides it per operation).
	Latency time.Duration
}

// Sim is an HNS simulator that reproduces the documented behaviour of HNS: GUID IDs, one network per adapter
// (a second one fails with ErrAdapterInUse, as HNS fails with 0x57), nothing survives Reboot, deletes of
// something absent succeed. With a state file (LinuxSimOptions.StateFile) the state also survives the process,
// as HNS state survives a restart of the agent. Faults are injected per operation: errors for the next N calls, latency, and calls
// that hang until released. Calls go through the same timeout wrapper as the real client. The in-memory
// simulator (NewSim) keeps only state; the Linux-backed one (NewLinuxSim) also realises endpoints as veth pairs.
// Sim is safe for concurrent use.
type Sim struct {
	*bounded
	m *simModel
}

var _ Interface = (*Sim)(nil)

// NewSim returns an in-memory simulator.
func NewSim(opts SimOptions) *Sim {
	return newSim(opts, nil, "")
}

func newSim(opts SimOptions, backend simBackend, stateFile string) *Sim {
	m := &simModel{
		backend:        backend,
		stateFile:      stateFile,
		defaultLatency: opts.Latency,
		latency:        map[Op]time.Duration{},
		failures:       map[Op]*injectedFailure{},
		hangs:          map[Op]*hang{},
		calls:          map[Op]int{},
	}
	return &Sim{bounded: newBounded(m, opts.Timeouts), m: m}
}

// FailNext makes the next n calls of op fail with err (a generic injected error when err is nil), after any
// latency and hang. It replaces an earlier injection for op.
func (s *Sim) FailNext(op Op, n int, err error) {
	if err == nil {
		err = fmt.Errorf("injected failure of %s", op)
	}
	s.m.fmu.Lock()
	defer s.m.fmu.Unlock()
	s.m.failures[op] = &injectedFailure{remaining: n, err: err}
}

// SetLatency makes every call of op take at least d, overriding SimOptions.Latency for op.
func (s *Sim) SetLatency(op Op, d time.Duration) {
	s.m.fmu.Lock()
	defer s.m.fmu.Unlock()
	s.m.latency[op] = d
}

// Hang makes every call of op that starts from now on block, as HNS deletes are known to, until release is
// called. Blocked calls ignore their context, like real HNS calls; the timeout wrapper returns ErrTimeout to the
// caller while the call stays blocked, and completes it (mutating state) once released. release is idempotent.
func (s *Sim) Hang(op Op) (release func()) {
	h := &hang{ch: make(chan struct{})}
	s.m.fmu.Lock()
	s.m.hangs[op] = h
	s.m.fmu.Unlock()
	return func() {
		h.once.Do(func() { close(h.ch) })
		s.m.fmu.Lock()
		defer s.m.fmu.Unlock()
		if s.m.hangs[op] == h {
			delete(s.m.hangs, op)
		}
	}
}

// Calls returns how many calls of op reached the simulator, including those that failed, hung or timed out.
func (s *Sim) Calls(op Op) int {
	s.m.fmu.Lock()
	defer s.m.fmu.Unlock()
	return s.m.calls[op]
}

// Reboot simulates a host reboot: every network and endpoint vanishes and with the networks the OVS extension
// state (the Hyper-V switches are gone). The Linux-backed simulator also deletes every veth pair it created.
// Injected faults stay in place.
func (s *Sim) Reboot(ctx context.Context) error {
	m := s.m
	m.all.Lock()
	defer m.all.Unlock()
	if m.backend != nil {
		if err := m.backend.reboot(ctx); err != nil {
			return fmt.Errorf("rebooting the HNS simulator: %w", err)
		}
	}
	m.mu.Lock()
	networks := m.networks
	m.mu.Unlock()
	// Windows boots with the adapters configured as they were before HNS bound them: the switches and their
	// management vNICs are gone, the adapters have their own addresses, routes and DNS servers again.
	for _, n := range networks {
		if m.backend != nil && n.realised() {
			if err := m.backend.deleteNetwork(ctx, n); err != nil {
				return fmt.Errorf("rebooting the HNS simulator: %w", err)
			}
		}
	}
	m.mu.Lock()
	for _, n := range networks {
		m.giveBackDNS(n)
	}
	m.networks = nil
	m.endpoints = nil
	m.loadBalancers = nil
	p := m.pending()
	m.mu.Unlock()
	return m.save(p)
}

// DisableOVSExtension disables the OVS extension on a network that stays, as an administrator, a Windows update
// or a reinstall of Open vSwitch can: HNS keeps the network and its endpoints, the switch stops forwarding
// through OVS until the extension is enabled again.
func (s *Sim) DisableOVSExtension(networkID string) error {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.network(networkID)
	if n == nil {
		return fmt.Errorf("network %q: %w", networkID, ErrNotFound)
	}
	n.ovsExtension = false
	return m.save(m.pending())
}

// SetAdapterDNS sets the DNS servers of a host adapter. HNS moves them to the management vNIC with the rest of
// the adapter's IP configuration; Linux has no per-link resolvers, so the simulator keeps them itself.
func (s *Sim) SetAdapterDNS(adapter string, servers []netip.Addr) error {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.adapterDNS == nil {
		m.adapterDNS = map[string][]netip.Addr{}
	}
	m.adapterDNS[adapter] = slices.Clone(servers)
	return m.save(m.pending())
}

// AdapterDNS returns the DNS servers the adapter has now: none while a network holds it.
func (s *Sim) AdapterDNS(adapter string) []netip.Addr {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	return slices.Clone(s.m.adapterDNS[adapter])
}

// ManagementVNICDNS returns the DNS servers of the network's management vNIC.
func (s *Sim) ManagementVNICDNS(networkID string) []netip.Addr {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	if n := s.m.network(networkID); n != nil {
		return slices.Clone(n.dns)
	}
	return nil
}

// ManagementVNICIndex returns the interface index of the network's management vNIC in the Linux-backed
// simulator (0 in memory, or for a network that does not exist): the vNIC keeps it when the agent renames it.
func (s *Sim) ManagementVNICIndex(networkID string) int {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	if n := s.m.network(networkID); n != nil {
		return n.vnicIndex
	}
	return 0
}

// OrderViolations lists the calls made against the order HNS requires, in the order they were made: enabling
// the OVS extension before the host's IPv4 address is on the management vNIC (Microsoft: enabling the extension
// before the vNIC is configured can break DHCP; Antrea waits for the IP before it enables it).
func (s *Sim) OrderViolations() []string {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	return slices.Clone(s.m.violations)
}

// Close releases every hung call and the resources of the back-end. It does not delete state.
func (s *Sim) Close() error {
	s.m.fmu.Lock()
	hangs := s.m.hangs
	s.m.hangs = map[Op]*hang{}
	s.m.fmu.Unlock()
	for _, h := range hangs {
		h.once.Do(func() { close(h.ch) })
	}
	if s.m.backend != nil {
		return s.m.backend.close()
	}
	return nil
}

// LinuxInterfaceName is the name of the host end of an endpoint's veth pair in the Linux-backed simulator, and
// so the name of the OVS port attached to it: the endpoint name itself when it fits in the 15 bytes Linux allows
// (IFNAMSIZ-1), otherwise its first 6 bytes, "-", and the first 8 hex digits of the SHA-256 of the whole name,
// which keeps names stable and distinct.
func LinuxInterfaceName(endpointName string) string {
	const maxLen = 15
	if len(endpointName) <= maxLen {
		return endpointName
	}
	sum := sha256.Sum256([]byte(endpointName))
	return endpointName[:6] + "-" + hex.EncodeToString(sum[:])[:8]
}

// simBackend realises endpoints outside the in-memory model (the Linux-backed simulator). The model calls it
// before changing its own state, with the endpoint's lock held but not the lock of the whole state, so that the
// back-ends of different endpoints work at once; an error leaves the model unchanged.
type simBackend interface {
	// createNetwork creates the network's management vNIC and moves the adapter's IP configuration to it; it
	// records the vNIC's name and index and the adapter's configuration in n.
	createNetwork(ctx context.Context, n *simNetwork) error
	// deleteNetwork deletes the management vNIC, whatever it is named now, releases the adapter from the
	// switch and gives it its configuration back.
	deleteNetwork(ctx context.Context, n *simNetwork) error
	// linkIndex returns the index of the host link of this name, 0 when there is none.
	linkIndex(ctx context.Context, name string) (int, error)
	// vnicHoldsHostIP reports whether the management vNIC holds the adapter's IPv4 addresses.
	vnicHoldsHostIP(ctx context.Context, n *simNetwork) (bool, error)
	createEndpoint(ctx context.Context, ep Endpoint) error
	deleteEndpoint(ctx context.Context, ep Endpoint) error
	attachEndpoint(ctx context.Context, ep Endpoint, namespaceID string) error
	detachEndpoint(ctx context.Context, ep Endpoint, namespaceID string) error
	reboot(ctx context.Context) error
	close() error
}

type injectedFailure struct {
	remaining int
	err       error
}

type hang struct {
	ch   chan struct{}
	once sync.Once
}

type simNetwork struct {
	Network
	ovsExtension bool
	// vnicIndex is the interface index of the management vNIC (Linux-backed simulator only): the agent renames
	// the vNIC, HNS still knows it.
	vnicIndex int
	// adapterConfig is the adapter's IP configuration as HNS took it to the vNIC, given back with the network.
	adapterConfig hostnet.IPConfig
	// dns are the vNIC's DNS servers, taken from the adapter.
	dns []netip.Addr
	// netType is the network's type; empty is Transparent (the only type the back-end realises).
	netType NetworkType
	// remoteSubnets and hostRoute are the policies of another stack's network (sim_foreign.go).
	remoteSubnets []RemoteSubnetPolicy
	hostRoute     bool
}

// realised reports whether the back-end realises the network and its endpoints: only Transparent
// networks, winnet's. Another stack's network is HNS state only (sim_foreign.go).
func (n *simNetwork) realised() bool { return n.netType == "" || n.netType == Transparent }

// simModel is the raw, unbounded implementation behind Sim.
type simModel struct {
	// fmu guards fault injection and counters; it is never held while a call waits.
	fmu            sync.Mutex
	defaultLatency time.Duration
	latency        map[Op]time.Duration
	failures       map[Op]*injectedFailure
	hangs          map[Op]*hang
	calls          map[Op]int

	// all is held for reading by every call on one endpoint and for writing by calls on many (DeleteNetwork,
	// Reboot), which so never run beside the back-end's work on one of them.
	all sync.RWMutex
	// endpointLocks serialises calls on one endpoint (keyed by its upper-case ID, or by its name while it is
	// being created) while the back-end works on it.
	endpointLocks keyed.Mutex
	// mu guards the HNS state. It is held only to read and change the state, never while the back-end works:
	// calls on different endpoints overlap, as HNS serves concurrent calls.
	mu        sync.Mutex
	networks  []*simNetwork
	endpoints []*Endpoint
	// loadBalancers are kube-proxy's, seeded (sim_foreign.go): winnet makes none.
	loadBalancers []*LoadBalancer
	backend       simBackend
	// adapterDNS holds the DNS servers of host adapters (see SetAdapterDNS).
	adapterDNS map[string][]netip.Addr
	// violations records calls made out of the order HNS requires (see OrderViolations).
	violations []string
	// stateFile, when set, receives the state after every mutation (see pending and save).
	stateFile string
	// version counts mutations and latest is the newest state to save; saveMu orders writes of the state
	// file, which skip states no newer than the one written last (saved).
	version  uint64
	latestMu sync.Mutex
	latest   *pendingState
	saveMu   sync.Mutex
	saved    uint64
}

var _ Interface = (*simModel)(nil)

// enter counts the call, then applies latency, hang and injected failure for op.
func (m *simModel) enter(op Op) error {
	m.fmu.Lock()
	m.calls[op]++
	latency, ok := m.latency[op]
	if !ok {
		latency = m.defaultLatency
	}
	var blockOn chan struct{}
	if h := m.hangs[op]; h != nil {
		blockOn = h.ch
	}
	var err error
	if f := m.failures[op]; f != nil && f.remaining > 0 {
		f.remaining--
		err = f.err
	}
	m.fmu.Unlock()

	if latency > 0 {
		time.Sleep(latency) // HNS does not honour cancellation; neither does the simulator
	}
	if blockOn != nil {
		<-blockOn
	}
	return err
}

func sameID(a, b string) bool { return strings.EqualFold(a, b) }

func newGUID() string { return strings.ToUpper(uuid.NewString()) }

// newHNSMAC returns a MAC in the Hyper-V range 00-15-5D, as HNS allocates them.
func newHNSMAC() (net.HardwareAddr, error) {
	mac := net.HardwareAddr{0x00, 0x15, 0x5d, 0, 0, 0}
	if _, err := rand.Read(mac[3:]); err != nil {
		return nil, fmt.Errorf("generating a MAC address: %w", err)
	}
	return mac, nil
}

func (m *simModel) network(id string) *simNetwork {
	for _, n := range m.networks {
		if sameID(n.ID, id) {
			return n
		}
	}
	return nil
}

func (m *simModel) endpoint(id string) *Endpoint {
	for _, ep := range m.endpoints {
		if sameID(ep.ID, id) {
			return ep
		}
	}
	return nil
}

func copyEndpoint(ep *Endpoint) *Endpoint {
	c := *ep
	c.MAC = append(net.HardwareAddr(nil), ep.MAC...)
	c.DNS.Search, c.DNS.Servers, c.DNS.Options = slices.Clone(ep.DNS.Search), slices.Clone(ep.DNS.Servers), slices.Clone(ep.DNS.Options)
	return &c
}

func copyNetwork(n *simNetwork) *Network {
	c := n.Network
	return &c
}

func (m *simModel) GetNetworkByName(_ context.Context, name string) (*Network, error) {
	if err := m.enter(OpGetNetworkByName); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, n := range m.networks {
		if n.Name == name {
			return copyNetwork(n), nil
		}
	}
	return nil, fmt.Errorf("network %q: %w", name, ErrNotFound)
}

func validateNetworkSpec(spec NetworkSpec) error {
	switch {
	case spec.Name == "":
		return errors.New("network name is empty")
	case spec.AdapterName == "":
		return errors.New("adapter name is empty")
	case !spec.Subnet.IsValid() || !spec.Subnet.Addr().Is4():
		return fmt.Errorf("subnet %q is not an IPv4 prefix", spec.Subnet)
	case !spec.Gateway.IsValid() || !spec.Subnet.Masked().Contains(spec.Gateway):
		return fmt.Errorf("gateway %q is not in subnet %s", spec.Gateway, spec.Subnet.Masked())
	case spec.SourceMAC != nil && len(spec.SourceMAC) != 6:
		return fmt.Errorf("source MAC %q is not a 48-bit MAC", spec.SourceMAC)
	}
	return nil
}

func (m *simModel) CreateTransparentNetwork(ctx context.Context, spec NetworkSpec) (*Network, error) {
	if err := m.enter(OpCreateTransparentNetwork); err != nil {
		return nil, err
	}
	if err := validateNetworkSpec(spec); err != nil {
		return nil, err
	}
	m.all.Lock() // creating the switch takes the adapter: no other network call runs meanwhile
	defer m.all.Unlock()
	adapterIndex := 0
	if m.backend != nil {
		var err error
		if adapterIndex, err = m.backend.linkIndex(ctx, spec.AdapterName); err != nil {
			return nil, err
		}
		if adapterIndex == 0 {
			return nil, fmt.Errorf("network adapter %q: %w", spec.AdapterName, ErrNotFound)
		}
	}
	m.mu.Lock()
	for _, n := range m.networks {
		// HNS fails with 0x57 both for an adapter another network's switch is bound to and for the management
		// vNIC of another network, which is what the adapter holding the node IP is after that network took it
		// (Antrea issues #2013 and #2213).
		bound := strings.EqualFold(n.AdapterName, spec.AdapterName)
		isVNIC := strings.EqualFold(n.ManagementVNIC, spec.AdapterName) || (adapterIndex != 0 && n.vnicIndex == adapterIndex)
		if bound || isVNIC {
			what := "is bound to"
			if isVNIC {
				what = "is the management vNIC of"
			}
			err := fmt.Errorf("%w: HNS returned 0x80070057 (The parameter is incorrect); adapter %q %s network %q (%s)",
				ErrAdapterInUse, spec.AdapterName, what, n.Name, n.ID)
			m.mu.Unlock()
			return nil, err
		}
	}
	m.mu.Unlock()
	n := &simNetwork{Network: Network{
		ID:             newGUID(),
		Name:           spec.Name,
		AdapterName:    spec.AdapterName,
		Subnet:         spec.Subnet.Masked(),
		Gateway:        spec.Gateway,
		ManagementVNIC: WindowsManagementVNICName(spec.AdapterName),
	}}
	if m.backend != nil {
		if err := m.backend.createNetwork(ctx, n); err != nil {
			return nil, fmt.Errorf("creating the Hyper-V switch of network %q on %q: %w", spec.Name, spec.AdapterName, err)
		}
	}
	m.mu.Lock()
	n.dns = m.adapterDNS[spec.AdapterName]
	delete(m.adapterDNS, spec.AdapterName)
	m.networks = append(m.networks, n)
	created := copyNetwork(n)
	p := m.pending()
	m.mu.Unlock()
	if err := m.save(p); err != nil {
		return nil, err
	}
	return created, nil
}

// giveBackDNS returns the vNIC's DNS servers to the adapter; the caller holds m.mu.
func (m *simModel) giveBackDNS(n *simNetwork) {
	if len(n.dns) == 0 {
		return
	}
	if m.adapterDNS == nil {
		m.adapterDNS = map[string][]netip.Addr{}
	}
	m.adapterDNS[n.AdapterName] = n.dns
}

func (m *simModel) DeleteNetwork(ctx context.Context, networkID string) error {
	if err := m.enter(OpDeleteNetwork); err != nil {
		return err
	}
	m.all.Lock() // no call on one of its endpoints runs meanwhile
	defer m.all.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.network(networkID)
	if n == nil {
		return nil
	}
	kept := m.endpoints[:0:0]
	for _, ep := range m.endpoints {
		if !sameID(ep.NetworkID, n.ID) {
			kept = append(kept, ep)
			continue
		}
		if m.backend != nil && n.realised() {
			if err := m.backend.deleteEndpoint(ctx, *ep); err != nil {
				return fmt.Errorf("deleting endpoint %q of the network: %w", ep.Name, err)
			}
		}
	}
	m.endpoints = kept
	if m.backend != nil && n.realised() {
		// HNS removes the switch and its management vNIC and gives the adapter its configuration back.
		if err := m.backend.deleteNetwork(ctx, n); err != nil {
			return fmt.Errorf("deleting the Hyper-V switch of network %q: %w", n.Name, err)
		}
	}
	m.giveBackDNS(n)
	for i, other := range m.networks {
		if other == n {
			m.networks = append(m.networks[:i:i], m.networks[i+1:]...)
			break
		}
	}
	return m.save(m.pending())
}

func (m *simModel) EnableOVSExtension(ctx context.Context, networkID string) error {
	if err := m.enter(OpEnableOVSExtension); err != nil {
		return err
	}
	m.all.RLock()
	defer m.all.RUnlock()
	m.mu.Lock()
	n := m.network(networkID)
	if n == nil {
		m.mu.Unlock()
		return fmt.Errorf("network %q: %w", networkID, ErrNotFound)
	}
	probe := *n
	m.mu.Unlock()
	holds := true
	if m.backend != nil && !probe.ovsExtension {
		var err error
		if holds, err = m.backend.vnicHoldsHostIP(ctx, &probe); err != nil {
			return err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if n = m.network(networkID); n == nil {
		return fmt.Errorf("network %q: %w", networkID, ErrNotFound)
	}
	if !holds {
		m.violations = append(m.violations, fmt.Sprintf("the OVS extension of network %q was enabled before the host IP was on its management vNIC", n.Name))
	}
	n.ovsExtension = true
	return m.save(m.pending())
}

func (m *simModel) OVSExtensionEnabled(_ context.Context, networkID string) (bool, error) {
	if err := m.enter(OpOVSExtensionEnabled); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.network(networkID)
	if n == nil {
		return false, fmt.Errorf("network %q: %w", networkID, ErrNotFound)
	}
	return n.ovsExtension, nil
}

func (m *simModel) CreateEndpoint(ctx context.Context, spec EndpointSpec) (*Endpoint, error) {
	if err := m.enter(OpCreateEndpoint); err != nil {
		return nil, err
	}
	if spec.Name == "" {
		return nil, errors.New("endpoint name is empty")
	}
	m.all.RLock()
	defer m.all.RUnlock()
	defer m.endpointLocks.Lock("name:" + spec.Name)()
	ep, err := m.newEndpoint(spec)
	if err != nil {
		return nil, err
	}
	if m.backend != nil && m.realisedNetwork(ep.NetworkID) {
		if err := m.backend.createEndpoint(ctx, *ep); err != nil {
			return nil, err
		}
	}
	m.mu.Lock()
	m.endpoints = append(m.endpoints, ep)
	created := copyEndpoint(ep)
	p := m.pending()
	m.mu.Unlock()
	if err := m.save(p); err != nil {
		return nil, err
	}
	return created, nil
}

// newEndpoint validates spec against its network and returns the endpoint it describes, not yet added.
func (m *simModel) newEndpoint(spec EndpointSpec) (*Endpoint, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.network(spec.NetworkID)
	if n == nil {
		return nil, fmt.Errorf("network %q: %w", spec.NetworkID, ErrNotFound)
	}
	if !spec.IP.IsValid() || !spec.IP.Is4() || !n.Subnet.Contains(spec.IP) {
		return nil, fmt.Errorf("IP %q is not an IPv4 address in the network's subnet %s", spec.IP, n.Subnet)
	}
	ep := &Endpoint{
		ID:           newGUID(),
		Name:         spec.Name,
		NetworkID:    n.ID,
		IP:           spec.IP,
		PrefixLength: spec.PrefixLength,
		MAC:          append(net.HardwareAddr(nil), spec.MAC...),
		Gateway:      spec.Gateway,
		DNS:          spec.DNS,
	}
	if ep.PrefixLength == 0 {
		ep.PrefixLength = n.Subnet.Bits()
	}
	if ep.PrefixLength < 1 || ep.PrefixLength > 32 {
		return nil, fmt.Errorf("prefix length %d is out of range", ep.PrefixLength)
	}
	if !ep.Gateway.IsValid() {
		ep.Gateway = n.Gateway
	}
	if !ep.Gateway.Is4() {
		return nil, fmt.Errorf("gateway %q is not an IPv4 address", ep.Gateway)
	}
	if len(ep.MAC) == 0 {
		mac, err := newHNSMAC()
		if err != nil {
			return nil, err
		}
		ep.MAC = mac
	}
	if len(ep.MAC) != 6 {
		return nil, fmt.Errorf("MAC %q is not a 48-bit MAC", ep.MAC)
	}
	return ep, nil
}

func (m *simModel) GetEndpointByName(_ context.Context, name string) (*Endpoint, error) {
	if err := m.enter(OpGetEndpointByName); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, ep := range m.endpoints {
		if ep.Name == name {
			return copyEndpoint(ep), nil
		}
	}
	return nil, fmt.Errorf("endpoint %q: %w", name, ErrNotFound)
}

func (m *simModel) ListEndpoints(_ context.Context, networkID string) ([]Endpoint, error) {
	if err := m.enter(OpListEndpoints); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var eps []Endpoint
	for _, ep := range m.endpoints {
		if sameID(ep.NetworkID, networkID) {
			eps = append(eps, *copyEndpoint(ep))
		}
	}
	return eps, nil
}

func (m *simModel) DeleteEndpoint(ctx context.Context, endpointID string) error {
	if err := m.enter(OpDeleteEndpoint); err != nil {
		return err
	}
	m.all.RLock()
	defer m.all.RUnlock()
	defer m.endpointLocks.Lock(strings.ToUpper(endpointID))()
	ep, ok := m.endpointCopy(endpointID)
	if !ok {
		return nil
	}
	if m.backend != nil && m.realisedNetwork(ep.NetworkID) {
		if err := m.backend.deleteEndpoint(ctx, ep); err != nil {
			return err
		}
	}
	m.mu.Lock()
	for i, other := range m.endpoints {
		if sameID(other.ID, endpointID) {
			m.endpoints = append(m.endpoints[:i:i], m.endpoints[i+1:]...)
			break
		}
	}
	p := m.pending()
	m.mu.Unlock()
	return m.save(p)
}

// realisedNetwork reports whether the back-end realises the endpoints of the network (see
// simNetwork.realised); a network that is gone was not another stack's.
func (m *simModel) realisedNetwork(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.network(id)
	return n == nil || n.realised()
}

// endpointCopy returns a copy of the endpoint, if it exists.
func (m *simModel) endpointCopy(id string) (Endpoint, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ep := m.endpoint(id)
	if ep == nil {
		return Endpoint{}, false
	}
	return *copyEndpoint(ep), true
}

// setNamespace records the endpoint's namespace and saves the state; the caller holds the endpoint's lock, so
// the endpoint still exists.
func (m *simModel) setNamespace(id, namespaceID string) error {
	m.mu.Lock()
	if ep := m.endpoint(id); ep != nil {
		ep.NamespaceID = namespaceID
	}
	p := m.pending()
	m.mu.Unlock()
	return m.save(p)
}

func (m *simModel) AttachEndpoint(ctx context.Context, endpointID, namespaceID string) error {
	if err := m.enter(OpAttachEndpoint); err != nil {
		return err
	}
	if namespaceID == "" {
		return errors.New("namespace ID is empty")
	}
	m.all.RLock()
	defer m.all.RUnlock()
	defer m.endpointLocks.Lock(strings.ToUpper(endpointID))()
	ep, ok := m.endpointCopy(endpointID)
	switch {
	case !ok:
		return fmt.Errorf("endpoint %q: %w", endpointID, ErrNotFound)
	case sameID(ep.NamespaceID, namespaceID):
		return nil
	case ep.NamespaceID != "":
		return fmt.Errorf("endpoint %q is already attached to namespace %q", endpointID, ep.NamespaceID)
	}
	if m.backend != nil && m.realisedNetwork(ep.NetworkID) {
		if err := m.backend.attachEndpoint(ctx, ep, namespaceID); err != nil {
			return err
		}
	}
	return m.setNamespace(endpointID, namespaceID)
}

func (m *simModel) DetachEndpoint(ctx context.Context, endpointID, namespaceID string) error {
	if err := m.enter(OpDetachEndpoint); err != nil {
		return err
	}
	m.all.RLock()
	defer m.all.RUnlock()
	defer m.endpointLocks.Lock(strings.ToUpper(endpointID))()
	ep, ok := m.endpointCopy(endpointID)
	if !ok || ep.NamespaceID == "" || !sameID(ep.NamespaceID, namespaceID) {
		return nil
	}
	if m.backend != nil && m.realisedNetwork(ep.NetworkID) {
		if err := m.backend.detachEndpoint(ctx, ep, namespaceID); err != nil {
			return err
		}
	}
	return m.setNamespace(endpointID, "")
}
