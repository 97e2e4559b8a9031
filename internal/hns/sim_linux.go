//go:build linux

package hns

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
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
}

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
	b := &vethBackend{host: host, net: hostNet, hostIPDelay: opts.HostIPDelay, netnsDir: dir, names: map[string]string{}, attachedAs: map[string]string{}}
	sim := newSim(opts.SimOptions, b, opts.StateFile)
	if opts.StateFile != "" {
		if err := loadLinuxSimState(sim.m, b, opts.StateFile); err != nil {
			_ = host.Close()
			return nil, err
		}
	}
	return sim, nil
}

// loadLinuxSimState loads the state file into the model, dropping attached endpoints whose host end is gone
// (their namespace was deleted, or the node rebooted), and writes the state back when it dropped some.
func loadLinuxSimState(m *simModel, b *vethBackend, path string) error {
	state, err := readSimState(path)
	if err != nil {
		return err
	}
	kept := state.Endpoints[:0:0]
	for _, ep := range state.Endpoints {
		hostName := LinuxInterfaceName(ep.Name)
		if ep.NamespaceID != "" {
			exists, err := b.hostLinkExists(hostName)
			if err != nil {
				return err
			}
			if !exists {
				continue
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

// vethBackend realises attached endpoints as veth pairs. The model calls it without its own lock held, one call
// at a time per endpoint, so that the kernel work of different endpoints overlaps; mu guards its maps.
type vethBackend struct {
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
	// attachedAs maps endpoint IDs (upper case) to the interface name of the container end inside its namespace.
	attachedAs map[string]string
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
	return filepath.Join(b.netnsDir, namespaceID), nil
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
	hostName := LinuxInterfaceName(ep.Name)
	if err := b.deleteHostEnd(hostName); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.names, hostName)
	delete(b.attachedAs, strings.ToUpper(ep.ID))
	return nil
}

// attachEndpoint creates the endpoint's pair with its container end inside the target namespace and configures
// that end; on failure it deletes the pair again.
func (b *vethBackend) attachEndpoint(_ context.Context, ep Endpoint, namespaceID string) error {
	target, err := b.openNetNS(namespaceID)
	if err != nil {
		return err
	}
	defer target.Close()
	hostName, peer := LinuxInterfaceName(ep.Name), peerName(ep.ID)

	err = b.host.Do(func(ns.NetNS) error {
		if _, err := netlink.LinkByName(hostName); err == nil {
			return fmt.Errorf("interface %q already exists in the host namespace", hostName)
		} else if !isLinkNotFound(err) {
			return fmt.Errorf("looking up interface %q: %w", hostName, err)
		}
		veth := &netlink.Veth{
			LinkAttrs:        netlink.LinkAttrs{Name: hostName},
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
	b.mu.Lock()
	defer b.mu.Unlock()
	b.attachedAs[strings.ToUpper(ep.ID)] = ifName
	return nil
}

// configureContainerEnd runs inside the target namespace: it names the interface, sets its MAC, address and
// default route, turns its transmit checksum offload off (see disableTxChecksum) and brings it up. It returns
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
	if err := netlink.LinkSetHardwareAddr(link, ep.MAC); err != nil {
		return ifName, fmt.Errorf("setting MAC %s: %w", ep.MAC, err)
	}
	if err := disableTxChecksum(ifName); err != nil {
		return ifName, err
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{
		IP:   net.IP(ep.IP.AsSlice()),
		Mask: net.CIDRMask(ep.PrefixLength, 32),
	}}
	if err := netlink.AddrReplace(link, addr); err != nil {
		return ifName, fmt.Errorf("adding address %s: %w", addr.IPNet, err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return ifName, fmt.Errorf("setting %q up: %w", ifName, err)
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
			return ifName, fmt.Errorf("adding default route via %s: %w", gw, err)
		}
	}
	return ifName, nil
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
	if err := b.deleteHostEnd(LinuxInterfaceName(ep.Name)); err != nil {
		return fmt.Errorf("detaching endpoint %q: %w", ep.Name, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.attachedAs, strings.ToUpper(ep.ID))
	return nil
}

// reboot deletes every pair the simulator knows of and forgets every endpoint.
func (b *vethBackend) reboot(_ context.Context) error {
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
	b.attachedAs = map[string]string{}
	return nil
}

func (b *vethBackend) close() error {
	return b.host.Close()
}
