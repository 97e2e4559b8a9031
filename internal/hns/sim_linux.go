//go:build linux

package hns

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"

	"github.com/winnet-io/winnet/internal/hostnet"
	"github.com/winnet-io/winnet/internal/keyed"
)

// DefaultNetNSDir is where named network namespaces live (ip netns).
const DefaultNetNSDir = "/var/run/netns"

// LinuxSimOptions configure the Linux-backed simulator.
type LinuxSimOptions struct {
	SimOptions
	// HostNetNS is the path of the network namespace that plays the Windows host: the host ends of the
	// endpoints' veth pairs live there. Empty: the network namespace of the thread calling NewLinuxSim.
	HostNetNS string
	// NetNSDir resolves namespace IDs that are names rather than absolute paths. Default DefaultNetNSDir.
	NetNSDir string
	// StateFile, optional, is a JSON file the simulator loads at start and rewrites atomically after every
	// change, so that its networks, endpoints and attachments outlive the process, as HNS state outlives a
	// restart of the agent. Attached endpoints whose veth pair is gone from the host namespace are dropped at load.
	// Deleting the file (with the veths, which a reboot of the node removes) simulates a reboot.
	StateFile string
	// HostIPDelay is how long the simulated HNS takes, after it created a network, to put the adapter's IP
	// configuration on the management vNIC: Windows moves it asynchronously, with a short loss of
	// connectivity, so an agent that does not wait for the host IP on the vNIC (and enables the OVS extension
	// too early) is caught. Zero moves it before CreateTransparentNetwork returns.
	HostIPDelay time.Duration
	// Log receives what the simulator repairs as it loads its state (the zero Logger discards it).
	Log logr.Logger
	// SandboxDir, when set, makes endpoint vNICs appear as they do with containerd on Windows: only when the
	// runtime starts the sandbox, after CNI ADD returned (containerd issue 4851; Antrea PR 6019). The runtime
	// (a test harness) starts a sandbox with StartSandbox(SandboxDir, namespace ID); the simulator then
	// realises every endpoint attached to that namespace, and realises at once those attached to a started
	// one. Empty: an endpoint's vNIC appears when it is attached.
	SandboxDir string
	// Containerd, with SandboxDir, is the socket of the containerd whose task events start and stop the
	// sandboxes (ContainerdSandboxes): a node with a real kubelet and containerd. Empty: a harness starts them.
	Containerd string
}

// StartSandbox tells the simulators that watch dir (LinuxSimOptions.SandboxDir) that the runtime started the
// sandbox of the network namespace: its endpoints' vNICs appear. It is how a harness playing containerd
// starts a sandbox after CNI ADD returned, from any process.
func StartSandbox(dir, namespaceID string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("starting sandbox %s: %w", namespaceID, err)
	}
	if err := os.WriteFile(filepath.Join(dir, sandboxFileName(namespaceID)), nil, 0o644); err != nil {
		return fmt.Errorf("starting sandbox %s: %w", namespaceID, err)
	}
	return nil
}

// StopSandbox forgets that the sandbox of the namespace was started (its namespace is gone).
func StopSandbox(dir, namespaceID string) error {
	err := os.Remove(filepath.Join(dir, sandboxFileName(namespaceID)))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("stopping sandbox %s: %w", namespaceID, err)
	}
	return nil
}

// sandboxFileName is the file marking a started sandbox: the namespace ID, upper case (GUIDs compare
// case-insensitively), with path separators replaced.
func sandboxFileName(namespaceID string) string {
	return strings.ToUpper(strings.ReplaceAll(namespaceID, "/", "_"))
}

// A simulator learns of the sandboxes the runtime starts from inotify on the sandbox directory, as
// HNS learns of a container start from the compute service rather than by looking; it looks again
// every sandboxRescan as a safety net, every sandboxRetry while a sandbox's vNICs failed to appear,
// and every sandboxRetry throughout when it cannot watch the directory.
const (
	sandboxRescan = time.Second
	sandboxRetry  = 5 * time.Millisecond
)

// NewLinuxSim returns a simulator whose attached endpoints are real veth pairs. As on Windows, where an
// endpoint's vNIC appears on the Hyper-V switch when the endpoint is attached to a namespace, an endpoint that is
// attached to none exists only in the simulator's state. AttachEndpoint creates the pair in one step: the host
// end, in the host namespace, is named LinuxInterfaceName(endpoint name) and is up (it is where the OVS port of the
// same name is attached); the container end is created inside the network namespace given as namespace ID (an
// absolute path, or a name under NetNSDir), named eth0 (eth1, ... when taken) and configured with the endpoint's
// MAC, IP and default route via its gateway. Creating it there, rather than moving it in, spares the kernel a
// namespace move, which waits for an RCU grace period (tens of milliseconds) under the RTNL lock.
// DetachEndpoint, DeleteEndpoint and DeleteNetwork delete the pair; Reboot deletes every pair the simulator
// created (loaded from the state file or created since). Endpoint names are unique: their host ends share the
// host namespace. Close the simulator to release the host namespace handle.
func NewLinuxSim(opts LinuxSimOptions) (*Sim, error) {
	var (
		host ns.NetNS
		err  error
	)
	if opts.HostNetNS == "" {
		host, err = ns.GetCurrentNS()
	} else {
		host, err = ns.GetNS(opts.HostNetNS)
	}
	if err != nil {
		return nil, fmt.Errorf("opening the host network namespace %q: %w", opts.HostNetNS, err)
	}
	dir := opts.NetNSDir
	if dir == "" {
		dir = DefaultNetNSDir
	}
	hostNet, err := hostnet.New(hostnet.Options{NetNSPath: opts.HostNetNS})
	if err != nil {
		_ = host.Close()
		return nil, fmt.Errorf("opening the host network of the HNS simulator: %w", err)
	}
	b := &vethBackend{log: opts.Log, host: host, net: hostNet, hostIPDelay: opts.HostIPDelay, netnsDir: dir, sandboxDir: opts.SandboxDir,
		names: map[string]string{}, attachedAs: map[string]string{}, hostNames: map[string]string{}, resolvConfs: map[string]string{}}
	sim := newSim(opts.SimOptions, b, opts.StateFile)
	if opts.StateFile != "" {
		if err := loadLinuxSimState(sim.m, b, opts.StateFile); err != nil {
			_ = host.Close()
			return nil, err
		}
	}
	if opts.SandboxDir != "" {
		b.stopWatch = make(chan struct{})
		b.watchDone = make(chan struct{})
		go sim.watchSandboxes(b)
		if opts.Containerd != "" {
			ctx, cancel := context.WithCancel(context.Background())
			b.containerdCancel, b.containerdDone = cancel, make(chan struct{})
			go func() {
				defer close(b.containerdDone)
				ContainerdSandboxes{Address: opts.Containerd, SandboxDir: opts.SandboxDir, Log: opts.Log.WithName("containerd")}.Run(ctx)
			}()
		}
	}
	return sim, nil
}

// watchSandboxes realises the endpoints of the sandboxes the runtime starts, until the simulator is closed.
func (s *Sim) watchSandboxes(b *vethBackend) {
	defer close(b.watchDone)
	// seen holds the modification time of each start marker handled: a sandbox started again (a new
	// marker of the same name) is handled again.
	seen := map[string]time.Time{}
	var (
		events <-chan fsnotify.Event
		errs   <-chan error
	)
	if w, err := watchDir(b.sandboxDir); err != nil {
		b.log.Error(err, "Watching the sandbox directory failed; looking for started sandboxes every "+sandboxRetry.String())
	} else {
		defer w.Close()
		events, errs = w.Events, w.Errors
	}
	wait := time.Duration(0)
	for {
		timer := time.NewTimer(wait)
		select {
		case <-b.stopWatch:
			timer.Stop()
			return
		case <-events:
			drain(events) // one scan sees them all
		case err := <-errs: // the kernel's queue overflowed: a scan finds what was missed
			b.log.Info("Watching the sandbox directory lost events; looking again", "reason", err.Error())
		case <-timer.C:
		}
		timer.Stop()
		failed := s.scanSandboxes(b, seen)
		switch {
		case failed || events == nil:
			wait = sandboxRetry
		default:
			wait = sandboxRescan
		}
	}
}

// drain takes the events already queued.
func drain(events <-chan fsnotify.Event) {
	for {
		select {
		case <-events:
		default:
			return
		}
	}
}

// watchDir watches the directory, made if missing, with inotify.
func watchDir(dir string) (*fsnotify.Watcher, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	if err := w.Add(dir); err != nil {
		_ = w.Close()
		return nil, err
	}
	return w, nil
}

// scanSandboxes realises the endpoints of every sandbox started (again) since the last scan; it
// reports whether one failed. seen holds the modification time of each start marker handled: a
// sandbox started again (a new marker of the same name) is handled again.
func (s *Sim) scanSandboxes(b *vethBackend, seen map[string]time.Time) (failed bool) {
	entries, err := os.ReadDir(b.sandboxDir)
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	present := map[string]bool{}
	for _, e := range entries {
		present[e.Name()] = true
		info, err := e.Info()
		if err != nil {
			continue
		}
		if at, ok := seen[e.Name()]; ok && at.Equal(info.ModTime()) {
			continue
		}
		if err := s.startSandbox(context.Background(), e.Name()); err != nil {
			failed = true
			continue
		}
		seen[e.Name()] = info.ModTime()
	}
	for name := range seen {
		if !present[name] {
			delete(seen, name)
		}
	}
	return failed
}

// startSandbox realises the vNIC of every endpoint attached to the namespace that has none yet.
func (s *Sim) startSandbox(ctx context.Context, fileName string) error {
	m := s.m
	m.all.RLock()
	defer m.all.RUnlock()
	m.mu.Lock()
	var eps []Endpoint
	for _, ep := range m.endpoints {
		if ep.NamespaceID != "" && sandboxFileName(ep.NamespaceID) == fileName {
			eps = append(eps, *copyEndpoint(ep))
		}
	}
	m.mu.Unlock()
	b := m.backend.(*vethBackend)
	var errs []error
	for _, ep := range eps {
		func() {
			defer m.endpointLocks.Lock(strings.ToUpper(ep.ID))()
			cur, ok := m.endpointCopy(ep.ID)
			if !ok || !sameID(cur.NamespaceID, ep.NamespaceID) || b.realised(ep.ID) {
				return
			}
			errs = append(errs, b.realise(ctx, cur, cur.NamespaceID))
		}()
	}
	return errors.Join(errs...)
}

// loadLinuxSimState loads the state file into the model, dropping attached endpoints whose host end is gone
// (their namespace was deleted, or the node rebooted), and writes the state back when it dropped some.
func loadLinuxSimState(m *simModel, b *vethBackend, path string) error {
	state, err := readSimState(path)
	if err != nil {
		return err
	}
	// Another stack's networks are HNS state only (sim_foreign.go): their endpoints have no veth pair.
	foreign := map[string]bool{}
	for _, n := range state.Networks {
		if n.Type != "" && n.Type != Transparent {
			foreign[strings.ToUpper(n.ID)] = true
		}
	}
	kept := state.Endpoints[:0:0]
	for _, ep := range state.Endpoints {
		if foreign[strings.ToUpper(ep.NetworkID)] {
			kept = append(kept, ep)
			continue
		}
		hostName := LinuxInterfaceName(ep.Name)
		if ep.NamespaceID != "" {
			exists, err := b.hostLinkExists(hostName)
			if err != nil {
				return err
			}
			switch {
			case exists:
				e, err := ep.endpoint()
				if err != nil {
					return fmt.Errorf("loading HNS simulator state %s: %w", path, err)
				}
				b.finishRealise(*e)
			case b.sandboxStarted(ep.NamespaceID):
				continue // the vNIC went with the Pod's namespace
			}
		}
		kept = append(kept, ep)
		b.names[hostName] = strings.ToUpper(ep.ID)
	}
	dropped := len(kept) != len(state.Endpoints)
	state.Endpoints = kept
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.restore(state); err != nil {
		return fmt.Errorf("loading HNS simulator state %s: %w", path, err)
	}
	if dropped {
		return m.save(m.pending())
	}
	return nil
}

// finishRealise completes the vNIC of an attached endpoint whose host end exists, as the simulator
// loads its state. On Windows HNS is a service of its own (hns, with vmcompute starting the
// container), so a crash of the agent never leaves a vNIC half made; here the simulator runs in the
// agent's process, and a kill -9 can cut realise between creating the pair and configuring its
// container end (an interface down, without its name or address: the Pod is unreachable for good).
// So it finishes what it began, as HNS would have; when it cannot, it deletes the pair and the
// sandbox watcher realises the vNIC again. It runs before the simulator serves any call.
func (b *vethBackend) finishRealise(ep Endpoint) {
	err := b.configureRealised(ep)
	if err == nil {
		b.attachedAs[strings.ToUpper(ep.ID)] = "" // realised; its container end's name is not needed
		return
	}
	b.log.Info("An endpoint's vNIC was left half made; making it again", "endpoint", ep.Name, "reason", err.Error())
	if err := b.deleteHostEnd(LinuxInterfaceName(ep.Name)); err != nil {
		b.log.Error(err, "Deleting an endpoint's half-made vNIC failed", "endpoint", ep.Name)
	}
}

// configureRealised configures the container end of the endpoint's pair, found by its MAC (the pair
// is created with it), whatever step realise reached, and writes its resolver configuration.
func (b *vethBackend) configureRealised(ep Endpoint) error {
	target, err := b.openNetNS(ep.NamespaceID)
	if err != nil {
		return err
	}
	defer target.Close()
	err = target.Do(func(ns.NetNS) error {
		links, err := netlink.LinkList()
		if err != nil {
			return fmt.Errorf("listing interfaces: %w", err)
		}
		for _, l := range links {
			if !bytes.Equal(l.Attrs().HardwareAddr, ep.MAC) {
				continue
			}
			if name := l.Attrs().Name; name != peerName(ep.ID) {
				return configureLink(l, name, ep) // renamed already
			}
			_, err := configureContainerEnd(l.Attrs().Name, ep)
			return err
		}
		return fmt.Errorf("no interface with the endpoint's MAC %s in %s", ep.MAC, target.Path())
	})
	if err != nil {
		return err
	}
	return b.writeResolvConf(ep, target.Path())
}

// vethBackend realises attached endpoints as veth pairs. The model calls it without its own lock held, one call
// at a time per endpoint, so that the kernel work of different endpoints overlaps; mu guards its maps.
type vethBackend struct {
	log  logr.Logger
	host ns.NetNS
	// net acts on the host namespace: the management vNIC and the adapters live there.
	net hostnet.Interface
	// hostIPDelay delays the move of the host's IP configuration to a new management vNIC.
	hostIPDelay time.Duration
	netnsDir    string
	// namespaces serialises configuring container ends per target namespace.
	namespaces keyed.Mutex

	mu sync.Mutex
	// names maps the host-end name of every endpoint the simulator knows to the endpoint's ID (upper case), pair
	// or not: two endpoints cannot share a host end.
	names map[string]string
	// attachedAs maps endpoint IDs (upper case) to the interface name of the container end inside its namespace:
	// the endpoints whose vNIC is realised.
	attachedAs map[string]string
	// hostNames maps endpoint IDs (upper case) to the name of their realised host end when it is not
	// LinuxInterfaceName(endpoint name): the trap (see realise).
	hostNames map[string]string
	// resolvConfs maps endpoint IDs (upper case) to the resolver configuration their vNIC wrote.
	resolvConfs map[string]string
	// sandboxDir is LinuxSimOptions.SandboxDir; stopWatch and watchDone stop its watcher.
	sandboxDir string
	// containerdCancel and containerdDone stop the containerd sandbox source (LinuxSimOptions.Containerd).
	containerdCancel context.CancelFunc
	containerdDone   chan struct{}
	stopWatch        chan struct{}
	watchDone        chan struct{}
}

// realised reports whether the endpoint's vNIC exists.
func (b *vethBackend) realised(endpointID string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.attachedAs[strings.ToUpper(endpointID)]
	return ok
}

// sandboxStarted reports whether the runtime started the sandbox of the namespace (always, without a
// SandboxDir).
func (b *vethBackend) sandboxStarted(namespaceID string) bool {
	if b.sandboxDir == "" {
		return true
	}
	_, err := os.Stat(filepath.Join(b.sandboxDir, sandboxFileName(namespaceID)))
	return err == nil
}

// hostEndName is the name of the endpoint's realised host end.
func (b *vethBackend) hostEndName(ep Endpoint) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if name, ok := b.hostNames[strings.ToUpper(ep.ID)]; ok {
		return name
	}
	return LinuxInterfaceName(ep.Name)
}

var _ simBackend = (*vethBackend)(nil)

// peerName is the name the container end is created with inside the Pod's namespace, before it is renamed to
// eth0 (or the next free ethN): "hnsc" and 11 hex digits of the SHA-256 of the endpoint ID.
func peerName(endpointID string) string {
	sum := sha256.Sum256([]byte(strings.ToUpper(endpointID)))
	return "hnsc" + hex.EncodeToString(sum[:])[:11]
}

// hostLinkExists reports whether an interface of this name exists in the host namespace.
func (b *vethBackend) hostLinkExists(name string) (bool, error) {
	var exists bool
	err := b.host.Do(func(ns.NetNS) error {
		_, err := netlink.LinkByName(name)
		switch {
		case err == nil:
			exists = true
		case !isLinkNotFound(err):
			return fmt.Errorf("looking up interface %q: %w", name, err)
		}
		return nil
	})
	return exists, err
}

func isLinkNotFound(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf)
}

func (b *vethBackend) netnsPath(namespaceID string) (string, error) {
	if filepath.IsAbs(namespaceID) {
		return namespaceID, nil
	}
	if namespaceID == "" || strings.ContainsRune(namespaceID, '/') || namespaceID == "." || namespaceID == ".." {
		return "", fmt.Errorf("namespace ID %q is neither an absolute path nor a network namespace name", namespaceID)
	}
	path := filepath.Join(b.netnsDir, namespaceID)
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	// HCN namespace IDs are GUIDs, compared case-insensitively.
	entries, err := os.ReadDir(b.netnsDir)
	if err == nil {
		for _, e := range entries {
			if strings.EqualFold(e.Name(), namespaceID) {
				return filepath.Join(b.netnsDir, e.Name()), nil
			}
		}
	}
	return path, nil
}

// openNetNS opens the namespace; a namespace that does not exist is ErrNotFound.
func (b *vethBackend) openNetNS(namespaceID string) (ns.NetNS, error) {
	path, err := b.netnsPath(namespaceID)
	if err != nil {
		return nil, err
	}
	target, err := ns.GetNS(path)
	if err != nil {
		var notExist ns.NSPathNotExistErr
		if errors.As(err, &notExist) {
			return nil, fmt.Errorf("network namespace %q: %w", path, ErrNotFound)
		}
		return nil, fmt.Errorf("opening network namespace %q: %w", path, err)
	}
	return target, nil
}

// createEndpoint reserves the endpoint's host-end name; the pair is created when the endpoint is attached.
func (b *vethBackend) createEndpoint(_ context.Context, ep Endpoint) error {
	hostName := LinuxInterfaceName(ep.Name)
	b.mu.Lock()
	defer b.mu.Unlock()
	if other, taken := b.names[hostName]; taken {
		return fmt.Errorf("interface %q already exists in the host namespace: it is endpoint %s's", hostName, other)
	}
	exists, err := b.hostLinkExists(hostName)
	if err != nil {
		return err
	}
	if exists {
		return fmt.Errorf("interface %q already exists in the host namespace", hostName)
	}
	b.names[hostName] = strings.ToUpper(ep.ID)
	return nil
}

// deleteHostEnd deletes a pair by its host end; deleting it deletes the other end wherever it is.
func (b *vethBackend) deleteHostEnd(hostName string) error {
	return b.host.Do(func(ns.NetNS) error {
		link, err := netlink.LinkByName(hostName)
		if isLinkNotFound(err) {
			return nil // gone already, e.g. with the Pod's namespace
		}
		if err != nil {
			return fmt.Errorf("looking up interface %q: %w", hostName, err)
		}
		if err := netlink.LinkDel(link); err != nil && !isLinkNotFound(err) {
			return fmt.Errorf("deleting interface %q: %w", hostName, err)
		}
		return nil
	})
}

func (b *vethBackend) deleteEndpoint(_ context.Context, ep Endpoint) error {
	if err := b.unrealise(ep); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.names, LinuxInterfaceName(ep.Name))
	return nil
}

// unrealise deletes the endpoint's vNIC, if it has one.
func (b *vethBackend) unrealise(ep Endpoint) error {
	if err := b.deleteHostEnd(b.hostEndName(ep)); err != nil {
		return err
	}
	b.removeResolvConf(ep)
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.attachedAs, strings.ToUpper(ep.ID))
	delete(b.hostNames, strings.ToUpper(ep.ID))
	return nil
}

// attachEndpoint records the attachment; the endpoint's vNIC appears now if the namespace's sandbox runs, or
// when the runtime starts it (see LinuxSimOptions.SandboxDir). The namespace must exist either way.
func (b *vethBackend) attachEndpoint(ctx context.Context, ep Endpoint, namespaceID string) error {
	if !b.sandboxStarted(namespaceID) {
		target, err := b.openNetNS(namespaceID)
		if err != nil {
			return err
		}
		return target.Close()
	}
	return b.realise(ctx, ep, namespaceID)
}

// realise creates the endpoint's pair with its container end inside the target namespace and configures that
// end; on failure it deletes the pair again.
//
// The trap of OVS on Windows (Antrea PR 5947): an OVS port of type internal created before the endpoint's
// vNIC exists makes OVS create a vNIC of its own under the port's name. Here OVS's netdev datapath creates a tap
// of that name; the endpoint's vNIC then cannot take the name, gets another one, and the port OVS has carries
// none of the Pod's traffic.
func (b *vethBackend) realise(_ context.Context, ep Endpoint, namespaceID string) error {
	target, err := b.openNetNS(namespaceID)
	if err != nil {
		return err
	}
	defer target.Close()
	hostName, peer := LinuxInterfaceName(ep.Name), peerName(ep.ID)

	err = b.host.Do(func(ns.NetNS) error {
		if _, err := netlink.LinkByName(hostName); err == nil {
			hostName = trappedName(ep.ID) // OVS made an interface of this name: the trap
		} else if !isLinkNotFound(err) {
			return fmt.Errorf("looking up interface %q: %w", hostName, err)
		}
		// The host end is born up: OVS may open it (it watches for the device of a port it could not
		// open) between its creation and a later "set up", remember it as down, and set it down again
		// when it closes it.
		veth := &netlink.Veth{
			LinkAttrs:        netlink.LinkAttrs{Name: hostName, Flags: net.FlagUp},
			PeerName:         peer,
			PeerHardwareAddr: ep.MAC,
			PeerNamespace:    netlink.NsFd(int(target.Fd())),
		}
		if err := netlink.LinkAdd(veth); err != nil {
			return fmt.Errorf("creating veth pair %q/%q in network namespace %q: %w", hostName, peer, target.Path(), err)
		}
		if err := netlink.LinkSetUp(veth); err != nil {
			_ = netlink.LinkDel(veth)
			return fmt.Errorf("setting %q up: %w", hostName, err)
		}
		return nil
	})
	if err != nil {
		return err
	}

	var ifName string
	unlock := b.namespaces.Lock(target.Path()) // two endpoints attached to one namespace take distinct names
	err = target.Do(func(ns.NetNS) error {
		var err error
		ifName, err = configureContainerEnd(peer, ep)
		return err
	})
	unlock()
	if err != nil {
		if del := b.deleteHostEnd(hostName); del != nil {
			err = errors.Join(err, del)
		}
		return fmt.Errorf("configuring endpoint %q in network namespace %q: %w", ep.Name, target.Path(), err)
	}
	if err := b.writeResolvConf(ep, target.Path()); err != nil {
		_ = b.deleteHostEnd(hostName)
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.attachedAs[strings.ToUpper(ep.ID)] = ifName
	if hostName != LinuxInterfaceName(ep.Name) {
		b.hostNames[strings.ToUpper(ep.ID)] = hostName
	}
	return nil
}

// trappedName is the host end's name of an endpoint whose name OVS took: "hnst" and 11 hex digits of the
// SHA-256 of the endpoint ID.
func trappedName(endpointID string) string {
	sum := sha256.Sum256([]byte("trap:" + strings.ToUpper(endpointID)))
	return "hnst" + hex.EncodeToString(sum[:])[:11]
}

// configureContainerEnd runs inside the target namespace: it names the interface, sets its MAC, address and
// default route, turns its transmit checksum offload off (see DisableTxChecksum) and brings it up. It returns
// the name the interface has, also on failure.
func configureContainerEnd(peer string, ep Endpoint) (string, error) {
	link, err := netlink.LinkByName(peer)
	if err != nil {
		return peer, fmt.Errorf("looking up %q: %w", peer, err)
	}
	ifName, err := freeIfName()
	if err != nil {
		return peer, err
	}
	if err := netlink.LinkSetName(link, ifName); err != nil {
		return peer, fmt.Errorf("renaming %q to %q: %w", peer, ifName, err)
	}
	return ifName, configureLink(link, ifName, ep)
}

// configureLink gives the renamed container end ifName its MAC, address and default route, turns
// its transmit checksum offload off and brings it up; each step may have been done already.
func configureLink(link netlink.Link, ifName string, ep Endpoint) error {
	if err := netlink.LinkSetHardwareAddr(link, ep.MAC); err != nil {
		return fmt.Errorf("setting MAC %s: %w", ep.MAC, err)
	}
	if err := DisableTxChecksum(ifName); err != nil {
		return err
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{
		IP:   net.IP(ep.IP.AsSlice()),
		Mask: net.CIDRMask(ep.PrefixLength, 32),
	}}
	if err := netlink.AddrReplace(link, addr); err != nil {
		return fmt.Errorf("adding address %s: %w", addr.IPNet, err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("setting %q up: %w", ifName, err)
	}
	if lo, err := netlink.LinkByName("lo"); err == nil {
		_ = netlink.LinkSetUp(lo) // a fresh namespace has lo down; Windows compartments have loopback
	}
	if ep.Gateway.IsValid() {
		gw := net.IP(ep.Gateway.AsSlice())
		route := &netlink.Route{LinkIndex: link.Attrs().Index, Gw: gw, Dst: nil}
		if !addr.IPNet.Contains(gw) {
			route.Flags = int(netlink.FLAG_ONLINK)
		}
		if err := netlink.RouteReplace(route); err != nil {
			return fmt.Errorf("adding default route via %s: %w", gw, err)
		}
	}
	return nil
}

// freeIfName returns the first of eth0, eth1, ... that no interface of the current namespace uses.
func freeIfName() (string, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return "", fmt.Errorf("listing interfaces: %w", err)
	}
	used := map[string]bool{}
	for _, l := range links {
		used[l.Attrs().Name] = true
	}
	for i := 0; ; i++ {
		if name := fmt.Sprintf("eth%d", i); !used[name] {
			return name, nil
		}
	}
}

// detachEndpoint deletes the endpoint's pair: a detached endpoint has no vNIC.
func (b *vethBackend) detachEndpoint(_ context.Context, ep Endpoint, _ string) error {
	if err := b.unrealise(ep); err != nil {
		return fmt.Errorf("detaching endpoint %q: %w", ep.Name, err)
	}
	return nil
}

// reboot deletes every pair the simulator knows of and forgets every endpoint and started sandbox: a reboot
// ends every sandbox, and the runtime makes new ones.
func (b *vethBackend) reboot(_ context.Context) error {
	if b.sandboxDir != "" {
		if entries, err := os.ReadDir(b.sandboxDir); err == nil {
			for _, e := range entries {
				_ = os.Remove(filepath.Join(b.sandboxDir, e.Name()))
			}
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	names := make([]string, 0, len(b.names))
	for name := range b.names {
		names = append(names, name)
	}
	sort.Strings(names)
	var errs []error
	for _, name := range names {
		if err := b.deleteHostEnd(name); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(b.names, name)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	for id, name := range b.hostNames {
		if err := b.deleteHostEnd(name); err != nil {
			return err
		}
		delete(b.hostNames, id)
	}
	b.attachedAs = map[string]string{}
	return nil
}

func (b *vethBackend) close() error {
	if b.containerdCancel != nil {
		b.containerdCancel()
		<-b.containerdDone
		b.containerdCancel = nil
	}
	if b.stopWatch != nil {
		close(b.stopWatch)
		<-b.watchDone
		b.stopWatch = nil
	}
	return b.host.Close()
}
