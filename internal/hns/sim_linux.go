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

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
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
	// restart of the agent. Endpoints whose veth pair is gone from the host namespace are dropped at load.
	// Deleting the file (with the veths, which a reboot of the node removes) simulates a reboot.
	StateFile string
}

// NewLinuxSim returns a simulator whose endpoints are real veth pairs. The host end, in the host namespace, is
// named LinuxInterfaceName(endpoint name) and is up; it is where the OVS port of the same name is attached. The
// other end stays in the host namespace under a name derived from the endpoint ID until AttachEndpoint moves it
// into the network namespace given as namespace ID (an absolute path, or a name under NetNSDir), names it eth0
// (eth1, ... when taken) and configures the endpoint's MAC, IP and default route via its gateway there.
// DetachEndpoint moves it back; DeleteEndpoint and DeleteNetwork delete the pair; Reboot deletes every pair the
// simulator created (loaded from the state file or created since). Close the simulator to release the host
// namespace handle.
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
	b := &vethBackend{host: host, netnsDir: dir, created: map[string]string{}, attachedAs: map[string]string{}}
	sim := newSim(opts.SimOptions, b, opts.StateFile)
	if opts.StateFile != "" {
		if err := loadLinuxSimState(sim.m, b, opts.StateFile); err != nil {
			_ = host.Close()
			return nil, err
		}
	}
	return sim, nil
}

// loadLinuxSimState loads the state file into the model, keeping only endpoints whose host end still exists,
// and writes the state back when it dropped some.
func loadLinuxSimState(m *simModel, b *vethBackend, path string) error {
	state, err := readSimState(path)
	if err != nil {
		return err
	}
	kept := state.Endpoints[:0:0]
	for _, ep := range state.Endpoints {
		hostName := LinuxInterfaceName(ep.Name)
		exists, err := b.hostLinkExists(hostName)
		if err != nil {
			return err
		}
		if exists {
			kept = append(kept, ep)
			b.created[hostName] = ep.ID
		}
	}
	dropped := len(kept) != len(state.Endpoints)
	state.Endpoints = kept
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.restore(state); err != nil {
		return fmt.Errorf("loading HNS simulator state %s: %w", path, err)
	}
	if dropped {
		return m.persist()
	}
	return nil
}

// vethBackend is called by simModel with the model's lock held, which also guards its maps.
type vethBackend struct {
	host     ns.NetNS
	netnsDir string
	// created maps the host-end names of the pairs this simulator created to their endpoint IDs.
	created map[string]string
	// attachedAs maps endpoint IDs to the interface name of the container end inside its namespace.
	attachedAs map[string]string
}

var _ simBackend = (*vethBackend)(nil)

// peerName is the name of the container end while it is in the host namespace: "hnsc" and 11 hex digits of the
// SHA-256 of the endpoint ID.
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

func (b *vethBackend) createEndpoint(_ context.Context, ep Endpoint) error {
	hostName, peer := LinuxInterfaceName(ep.Name), peerName(ep.ID)
	err := b.host.Do(func(ns.NetNS) error {
		if _, err := netlink.LinkByName(hostName); err == nil {
			return fmt.Errorf("interface %q already exists in the host namespace", hostName)
		} else if !isLinkNotFound(err) {
			return fmt.Errorf("looking up interface %q: %w", hostName, err)
		}
		veth := &netlink.Veth{
			LinkAttrs:        netlink.LinkAttrs{Name: hostName},
			PeerName:         peer,
			PeerHardwareAddr: ep.MAC,
		}
		if err := netlink.LinkAdd(veth); err != nil {
			return fmt.Errorf("creating veth pair %q/%q: %w", hostName, peer, err)
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
	b.created[hostName] = ep.ID
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
	delete(b.created, hostName)
	delete(b.attachedAs, strings.ToUpper(ep.ID))
	return nil
}

func (b *vethBackend) attachEndpoint(_ context.Context, ep Endpoint, namespaceID string) error {
	target, err := b.openNetNS(namespaceID)
	if err != nil {
		return err
	}
	defer target.Close()
	peer := peerName(ep.ID)

	err = b.host.Do(func(ns.NetNS) error {
		link, err := netlink.LinkByName(peer)
		if err != nil {
			return fmt.Errorf("looking up the container end %q of endpoint %q: %w", peer, ep.Name, err)
		}
		if err := netlink.LinkSetNsFd(link, int(target.Fd())); err != nil {
			return fmt.Errorf("moving %q into network namespace %q: %w", peer, target.Path(), err)
		}
		return nil
	})
	if err != nil {
		return err
	}

	var ifName string
	err = target.Do(func(ns.NetNS) error {
		var err error
		ifName, err = configureContainerEnd(peer, ep)
		return err
	})
	if err != nil {
		// Put the container end back so that the endpoint stays consistent with the model (not attached).
		if back := b.moveBack(target, peer, ifName); back != nil {
			err = errors.Join(err, back)
		}
		return fmt.Errorf("configuring endpoint %q in network namespace %q: %w", ep.Name, target.Path(), err)
	}
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

// moveBack moves the container end, named ifName inside target, back into the host namespace as peer. Moving an
// interface between namespaces clears its addresses and routes.
func (b *vethBackend) moveBack(target ns.NetNS, peer, ifName string) error {
	return target.Do(func(ns.NetNS) error {
		link, err := netlink.LinkByName(ifName)
		if isLinkNotFound(err) {
			return nil // deleted with its peer
		}
		if err != nil {
			return fmt.Errorf("looking up %q: %w", ifName, err)
		}
		if err := netlink.LinkSetDown(link); err != nil {
			return fmt.Errorf("setting %q down: %w", ifName, err)
		}
		if ifName != peer {
			if err := netlink.LinkSetName(link, peer); err != nil {
				return fmt.Errorf("renaming %q to %q: %w", ifName, peer, err)
			}
		}
		if err := netlink.LinkSetNsFd(link, int(b.host.Fd())); err != nil {
			return fmt.Errorf("moving %q back to the host namespace: %w", peer, err)
		}
		return nil
	})
}

func (b *vethBackend) detachEndpoint(_ context.Context, ep Endpoint, namespaceID string) error {
	target, err := b.openNetNS(namespaceID)
	if errors.Is(err, ErrNotFound) {
		return nil // the namespace is gone and the pair with it
	}
	if err != nil {
		return err
	}
	defer target.Close()
	key := strings.ToUpper(ep.ID)
	ifName, ok := b.attachedAs[key]
	if !ok {
		ifName = "eth0"
	}
	if err := b.moveBack(target, peerName(ep.ID), ifName); err != nil {
		return fmt.Errorf("detaching endpoint %q from network namespace %q: %w", ep.Name, target.Path(), err)
	}
	delete(b.attachedAs, key)
	return nil
}

func (b *vethBackend) reboot(_ context.Context) error {
	names := make([]string, 0, len(b.created))
	for name := range b.created {
		names = append(names, name)
	}
	sort.Strings(names)
	var errs []error
	for _, name := range names {
		if err := b.deleteHostEnd(name); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(b.created, name)
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
