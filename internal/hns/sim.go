package hns

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

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
	m.networks = nil
	m.endpoints = nil
	p := m.pending()
	m.mu.Unlock()
	return m.save(p)
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
}

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
	backend   simBackend
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

func (m *simModel) CreateTransparentNetwork(_ context.Context, spec NetworkSpec) (*Network, error) {
	if err := m.enter(OpCreateTransparentNetwork); err != nil {
		return nil, err
	}
	if err := validateNetworkSpec(spec); err != nil {
		return nil, err
	}
	m.mu.Lock()
	for _, n := range m.networks {
		if strings.EqualFold(n.AdapterName, spec.AdapterName) {
			err := fmt.Errorf("%w: HNS returned 0x80070057 (The parameter is incorrect); adapter %q is bound to network %q (%s)",
				ErrAdapterInUse, spec.AdapterName, n.Name, n.ID)
			m.mu.Unlock()
			return nil, err
		}
	}
	n := &simNetwork{Network: Network{
		ID:          newGUID(),
		Name:        spec.Name,
		AdapterName: spec.AdapterName,
		Subnet:      spec.Subnet.Masked(),
		Gateway:     spec.Gateway,
	}}
	m.networks = append(m.networks, n)
	created := copyNetwork(n)
	p := m.pending()
	m.mu.Unlock()
	if err := m.save(p); err != nil {
		return nil, err
	}
	return created, nil
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
		if m.backend != nil {
			if err := m.backend.deleteEndpoint(ctx, *ep); err != nil {
				return fmt.Errorf("deleting endpoint %q of the network: %w", ep.Name, err)
			}
		}
	}
	m.endpoints = kept
	for i, other := range m.networks {
		if other == n {
			m.networks = append(m.networks[:i:i], m.networks[i+1:]...)
			break
		}
	}
	return m.save(m.pending())
}

func (m *simModel) EnableOVSExtension(_ context.Context, networkID string) error {
	if err := m.enter(OpEnableOVSExtension); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.network(networkID)
	if n == nil {
		return fmt.Errorf("network %q: %w", networkID, ErrNotFound)
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
	if m.backend != nil {
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
	if m.backend != nil {
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
	if m.backend != nil {
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
	if m.backend != nil {
		if err := m.backend.detachEndpoint(ctx, ep, namespaceID); err != nil {
			return err
		}
	}
	return m.setNamespace(endpointID, "")
}
