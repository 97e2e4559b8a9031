// Package ipam gives Pods their addresses with host-local's own allocator and on-disk store,
// run inside the agent instead of as a plugin process per call. It is the agent's side only: the
// CNI shim does not link it, which keeps the shim that kubelet runs for every call small and quick
// to start.
package ipam

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/plugins/ipam/host-local/backend/disk"
)

// Plugin is the CNI IPAM plugin whose allocator and on-disk format the agent uses.
const Plugin = "host-local"

// ipamNetwork names host-local's directory of allocations under the data directory, as the
// network name "winnet" does when host-local runs as a plugin.
const ipamNetwork = "winnet"

// Options configure HostLocal.
type Options struct {
	// DataDir is host-local's data directory: it keeps one file per allocated address in
	// DataDir/winnet.
	DataDir string
}

// HostLocal allocates Pod addresses from the node's Pod CIDR as host-local does, in the agent
// rather than by running the plugin once per call: host-local's disk store itself
// (github.com/containernetworking/plugins, plugins/ipam/host-local/backend/disk) and its
// allocator's order (backend/allocator, restated in allocate below: round robin after the last
// reserved address, the gateway — the first address of the Pod CIDR — never handed out). The files
// are host-local's: DataDir/winnet/<ip> holding "<container ID>\r\n<ifname>", last_reserved_ip.0,
// and the lock file host-local holds (flock; LockFileEx on Windows) around every change. A
// host-local process working on the same directory (an agent of an earlier version, a CNI DEL
// without the agent, an operator) and this allocator exclude each other and read each other's
// allocations.
//
// Every call opens the store anew, as host-local does: the lock is then taken on a descriptor of its
// own, which excludes the agent's other calls as it excludes other processes.
type HostLocal struct {
	dataDir string
}

// Allocation is one address host-local handed out.
type Allocation struct {
	IP          netip.Addr
	ContainerID string
	IfName      string
}

// New returns the allocator of opts.DataDir.
func New(opts Options) (*HostLocal, error) {
	if opts.DataDir == "" {
		return nil, errors.New("IPAM needs a data directory")
	}
	return &HostLocal{dataDir: opts.DataDir}, nil
}

// Request identifies one allocation: the container it is for and the Pod CIDR it comes from.
type Request struct {
	ContainerID string
	IfName      string
	// Subnet is the node's Pod CIDR.
	Subnet netip.Prefix
	// Gateway is never allocated; invalid means the first address of Subnet.
	Gateway netip.Addr
	// Preferred, when valid, is tried first: the address the Pod had before its sandbox was made
	// again. It is taken only if it is in the range and free; otherwise the allocation goes on as
	// host-local's does.
	Preferred netip.Addr
}

// Allocate returns an address for the container from the Pod CIDR, with the Pod CIDR's prefix
// length. An allocation still held for the same container and interface (an ADD that failed
// half-way in a previous agent) is released and made again. The error of a failed allocation is a
// *types.Error.
func (i *HostLocal) Allocate(_ context.Context, req Request) (netip.Prefix, error) {
	r, err := rangeOf(req.Subnet, req.Gateway)
	if err != nil {
		return netip.Prefix{}, err
	}
	store, err := i.open()
	if err != nil {
		return netip.Prefix{}, err
	}
	defer store.Close()
	if err := store.Lock(); err != nil {
		return netip.Prefix{}, hostLocalError(err, "locking the IPAM store")
	}
	defer func() { _ = store.Unlock() }()
	ip, err := r.allocate(store, req.ContainerID, req.IfName, req.Preferred)
	if err != nil {
		return netip.Prefix{}, hostLocalError(err, "allocating an address from %s for container %s", req.Subnet, req.ContainerID)
	}
	return netip.PrefixFrom(ip, req.Subnet.Bits()), nil
}

// Release gives back the container's address; releasing an address that is not allocated succeeds.
// It needs no Pod CIDR: host-local releases by container ID and interface name.
func (i *HostLocal) Release(_ context.Context, req Request) error {
	store, err := i.open()
	if err != nil {
		return err
	}
	defer store.Close()
	if err := store.Lock(); err != nil {
		return hostLocalError(err, "locking the IPAM store")
	}
	defer func() { _ = store.Unlock() }()
	if err := store.ReleaseByID(req.ContainerID, req.IfName); err != nil {
		return hostLocalError(err, "releasing the address of container %s", req.ContainerID)
	}
	return nil
}

// open opens host-local's store of the network (creating its directory and lock file if needed),
// as host-local does on every call, so that a directory removed meanwhile (winnet-agent reset) is
// made again with its lock.
func (i *HostLocal) open() (*disk.Store, error) {
	store, err := disk.New(ipamNetwork, i.dataDir)
	if err != nil {
		return nil, types.NewError(types.ErrIOFailure, fmt.Sprintf("opening the IPAM store in %s: %v", filepath.Join(i.dataDir, ipamNetwork), err), "")
	}
	return store, nil
}

// Allocations lists the addresses host-local has handed out, read from its data directory.
func (i *HostLocal) Allocations() ([]Allocation, error) {
	dir := filepath.Join(i.dataDir, ipamNetwork)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing IPAM allocations in %s: %w", dir, err)
	}
	var out []Allocation
	for _, e := range entries {
		// On Windows host-local writes an IPv6 address's colons as underscores.
		ip, err := netip.ParseAddr(strings.ReplaceAll(e.Name(), "_", ":"))
		if err != nil || e.IsDir() {
			continue // host-local's lock and last-reserved files
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			continue // released meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("reading IPAM allocation %s: %w", e.Name(), err)
		}
		id, ifName, _ := strings.Cut(string(b), disk.LineBreak)
		out = append(out, Allocation{IP: ip, ContainerID: strings.TrimSpace(id), IfName: strings.TrimSpace(ifName)})
	}
	return out, nil
}

// ipRange is host-local's range for a configuration whose only range is the Pod CIDR (its
// allocator.Range after Canonicalize): from the first address after the network address to the
// last before the broadcast address, the gateway excluded.
type ipRange struct {
	subnet     netip.Prefix
	start, end netip.Addr
	gateway    netip.Addr
}

// rangeID is host-local's index of the configuration's only range: last_reserved_ip.0.
const rangeID = "0"

func rangeOf(subnet netip.Prefix, gateway netip.Addr) (ipRange, error) {
	if !subnet.IsValid() || !subnet.Addr().Is4() {
		return ipRange{}, types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("IPAM needs an IPv4 Pod CIDR, got %q", subnet), "")
	}
	if subnet.Bits() > 30 {
		return ipRange{}, types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("the Pod CIDR %s is too small to allocate from", subnet), "")
	}
	subnet = subnet.Masked()
	if !gateway.IsValid() {
		gateway = subnet.Addr().Next()
	}
	if !subnet.Contains(gateway) {
		return ipRange{}, types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("gateway %s is outside the Pod CIDR %s", gateway, subnet), "")
	}
	last := subnet.Addr().As4()
	for b := subnet.Bits(); b < 32; b++ {
		last[b/8] |= 0x80 >> (b % 8)
	}
	return ipRange{subnet: subnet, start: subnet.Addr().Next(), end: netip.AddrFrom4(last).Prev(), gateway: gateway}, nil
}

func (r ipRange) contains(a netip.Addr) bool {
	return a.IsValid() && r.start.Compare(a) <= 0 && a.Compare(r.end) <= 0
}

// allocate is host-local's allocator.IPAllocator.Get without a requested address, on its store
// locked by the caller: a container and interface hold one address of the range (an earlier one is
// released first, where host-local refuses a duplicate allocation: the agent makes an allocation
// only for a new attachment); then round robin, from the address after the last one reserved (or
// the start of the range) to the end, around from the start, the gateway skipped, each address
// tried once; the first one free is reserved. A preferred address in the range is tried before
// them.
func (r ipRange) allocate(store *disk.Store, id, ifName string, preferred netip.Addr) (netip.Addr, error) {
	for _, held := range store.GetByID(id, ifName) {
		if a, ok := netip.AddrFromSlice(held); ok && r.contains(a.Unmap()) {
			if err := store.ReleaseByID(id, ifName); err != nil {
				return netip.Addr{}, fmt.Errorf("releasing %s, held by the same container: %w", a.Unmap(), err)
			}
			break
		}
	}
	if preferred.IsValid() && r.contains(preferred.Unmap()) && preferred.Unmap() != r.gateway {
		reserved, err := store.Reserve(id, ifName, net.IP(preferred.Unmap().AsSlice()), rangeID)
		if err != nil {
			return netip.Addr{}, err
		}
		if reserved {
			return preferred.Unmap(), nil
		}
	}
	next := r.start
	if last, err := store.LastReservedIP(rangeID); err == nil {
		// An unreadable or foreign last address only loses the round robin once, as in host-local.
		if a, ok := netip.AddrFromSlice(last); ok && r.contains(a.Unmap()) {
			next = r.after(a.Unmap())
		}
	}
	for first := next; ; {
		if next != r.gateway {
			reserved, err := store.Reserve(id, ifName, net.IP(next.AsSlice()), rangeID)
			if err != nil {
				return netip.Addr{}, err
			}
			if reserved {
				return next, nil
			}
		}
		if next = r.after(next); next == first {
			return netip.Addr{}, fmt.Errorf("no IP addresses available in range set: %s-%s", r.start, r.end)
		}
	}
}

// after is the address that follows a in the range, the start after the end.
func (r ipRange) after(a netip.Addr) netip.Addr {
	if a == r.end {
		return r.start
	}
	return a.Next()
}

// hostLocalError is a failure of host-local's allocator as host-local reports it (CNI code 999,
// as its plugin does), its message prefixed with what was being done.
func hostLocalError(err error, format string, args ...any) error {
	return types.NewError(types.ErrInternal, fmt.Sprintf("%s: %s: %v", fmt.Sprintf(format, args...), Plugin, err), "")
}
