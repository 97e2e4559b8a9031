//go:build linux

package hostnet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netns"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// netlinkHost implements Interface with rtnetlink and /proc/sys. Without Options.NetNSPath it keeps
// no sockets: every call opens its netlink socket in the network namespace of the calling thread.
// With it, netlink sockets are bound to that namespace and /proc/sys is written from a thread that
// enters it, so the caller's thread does not matter.
type netlinkHost struct {
	opts Options
	nl   *netlink.Handle
	// routeMessages counts the route requests EnsureRoutes and ReconcileRoutes wrote to the kernel.
	routeMessages atomic.Uint64
	// routeDumps counts the routing table listings (listRoutes).
	routeDumps atomic.Uint64
	// switchPorts batches concurrent SetSwitchPort calls into one nftables transaction.
	switchPorts switchPortBatcher
}

var _ Interface = (*netlinkHost)(nil)

func newPlatform(opts Options) (Interface, error) {
	h := &netlinkHost{opts: opts, nl: &netlink.Handle{}}
	if opts.NetNSPath != "" {
		target, err := netns.GetFromPath(opts.NetNSPath)
		if err != nil {
			return nil, fmt.Errorf("opening network namespace %s: %w", opts.NetNSPath, err)
		}
		defer target.Close()
		if h.nl, err = netlink.NewHandleAt(target); err != nil {
			return nil, fmt.Errorf("opening netlink in network namespace %s: %w", opts.NetNSPath, err)
		}
	}
	return h, nil
}

// inNetNS runs fn in the configured network namespace, or in the caller's when none is configured.
func (h *netlinkHost) inNetNS(fn func() error) error {
	if h.opts.NetNSPath == "" {
		return fn()
	}
	return ns.WithNetNSPath(h.opts.NetNSPath, func(ns.NetNS) error { return fn() })
}

// Neighbour states in which the kernel holds a usable hardware address.
const usableNeighStates = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY |
	netlink.NUD_PROBE | netlink.NUD_PERMANENT | netlink.NUD_NOARP

// dumpRetries bounds the retries of a netlink dump the kernel interrupted because the table
// changed while it was being read.
const dumpRetries = 5

// retryDump runs a netlink dump again while the kernel reports it interrupted.
func retryDump[T any](dump func() (T, error)) (T, error) {
	var v T
	var err error
	for range dumpRetries {
		v, err = dump()
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return v, err
		}
	}
	return v, err
}

func toLink(l netlink.Link) Link {
	a := l.Attrs()
	return Link{
		Name:  a.Name,
		Index: a.Index,
		MAC:   slices.Clone(a.HardwareAddr),
		MTU:   a.MTU,
		Up:    a.Flags&net.FlagUp != 0,
	}
}

func (h *netlinkHost) link(index int) (netlink.Link, error) {
	l, err := h.nl.LinkByIndex(index)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) || errors.Is(err, unix.ENODEV) {
			return nil, fmt.Errorf("link %d: %w", index, ErrNotFound)
		}
		return nil, fmt.Errorf("getting link %d: %w", index, err)
	}
	return l, nil
}

func (h *netlinkHost) LinkByName(_ context.Context, name string) (Link, error) {
	l, err := h.nl.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) || errors.Is(err, unix.ENODEV) {
			return Link{}, fmt.Errorf("link %q: %w", name, ErrNotFound)
		}
		return Link{}, fmt.Errorf("getting link %q: %w", name, err)
	}
	return toLink(l), nil
}

func (h *netlinkHost) LinkByAddress(_ context.Context, ip netip.Addr) (Link, error) {
	ip = ip.Unmap()
	addrs, err := retryDump(func() ([]netlink.Addr, error) { return h.nl.AddrList(nil, netlink.FAMILY_ALL) })
	if err != nil {
		return Link{}, fmt.Errorf("listing addresses to find %s: %w", ip, err)
	}
	for _, a := range addrs {
		if p, ok := toPrefix(a.IPNet); ok && p.Addr() == ip {
			l, err := h.link(a.LinkIndex)
			if err != nil {
				return Link{}, fmt.Errorf("finding the link holding %s: %w", ip, err)
			}
			return toLink(l), nil
		}
	}
	return Link{}, fmt.Errorf("link holding %s: %w", ip, ErrNotFound)
}

func toPrefix(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	ip, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ip = ip.Unmap()
	ones, bits := n.Mask.Size()
	if bits == 0 {
		return netip.Prefix{}, false
	}
	if bits == 8*net.IPv6len && ip.Is4() {
		ones -= 96
	}
	return netip.PrefixFrom(ip, ones), true
}

func toIPNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func (h *netlinkHost) addresses(l netlink.Link) ([]netip.Prefix, error) {
	addrs, err := retryDump(func() ([]netlink.Addr, error) { return h.nl.AddrList(l, netlink.FAMILY_ALL) })
	if err != nil {
		return nil, fmt.Errorf("listing addresses of %q: %w", l.Attrs().Name, err)
	}
	out := make([]netip.Prefix, 0, len(addrs))
	for _, a := range addrs {
		if p, ok := toPrefix(a.IPNet); ok {
			out = append(out, p)
		}
	}
	return out, nil
}

func (h *netlinkHost) Addresses(_ context.Context, linkIndex int) ([]netip.Prefix, error) {
	l, err := h.link(linkIndex)
	if err != nil {
		return nil, err
	}
	return h.addresses(l)
}

func validAddress(addr netip.Prefix) (netip.Prefix, error) {
	if !addr.IsValid() || addr.Addr().Is4In6() {
		return netip.Prefix{}, fmt.Errorf("invalid address %s", addr)
	}
	return addr, nil
}

func (h *netlinkHost) EnsureAddress(_ context.Context, linkIndex int, addr netip.Prefix) error {
	_, _, err := h.ensureAddress(linkIndex, addr)
	return err
}

// ensureAddress is EnsureAddress; it also returns the link and whether the address was new on it.
func (h *netlinkHost) ensureAddress(linkIndex int, addr netip.Prefix) (netlink.Link, bool, error) {
	addr, err := validAddress(addr)
	if err != nil {
		return nil, false, err
	}
	l, err := h.link(linkIndex)
	if err != nil {
		return nil, false, fmt.Errorf("adding address %s: %w", addr, err)
	}
	name := l.Attrs().Name
	existing, err := h.addresses(l)
	if err != nil {
		return nil, false, fmt.Errorf("adding address %s to %q: %w", addr, name, err)
	}
	added := !slices.Contains(existing, addr)
	if added {
		nl := &netlink.Addr{IPNet: toIPNet(addr)}
		if addr.Addr().Is6() {
			nl.Flags = unix.IFA_F_NODAD
		}
		if err := h.nl.AddrReplace(l, nl); err != nil {
			return nil, false, fmt.Errorf("adding address %s to %q: %w", addr, name, err)
		}
	}
	// The same IP with another prefix length is another address to the kernel: remove it now
	// that the right one is in place.
	for _, e := range existing {
		if e.Addr() == addr.Addr() && e.Bits() != addr.Bits() {
			if err := h.nl.AddrDel(l, &netlink.Addr{IPNet: toIPNet(e)}); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
				return nil, false, fmt.Errorf("replacing address %s of %q by %s: %w", e, name, addr, err)
			}
		}
	}
	return l, added, nil
}

func (h *netlinkHost) EnsureSkipAsSourceAddress(_ context.Context, linkIndex int, addr netip.Prefix) error {
	if !addr.IsValid() || !addr.IsSingleIP() {
		return fmt.Errorf("adding address %s that is never a source: it must be a host prefix (/32 or /128)", addr)
	}
	l, added, err := h.ensureAddress(linkIndex, addr)
	if err != nil || !added || !addr.Addr().Is4() {
		return err
	}
	// The kernel announces no address it is given; Windows' duplicate address detection does. Without
	// an announcement the segment's hosts keep sending to the address's previous holder until their
	// ARP entry expires (tens of seconds), so announce it as Windows does: a gratuitous ARP.
	if err := h.inNetNS(func() error { return sendGratuitousARP(linkIndex, l.Attrs().HardwareAddr, addr.Addr()) }); err != nil {
		return fmt.Errorf("announcing address %s on %q: %w", addr, l.Attrs().Name, err)
	}
	return nil
}

// sendGratuitousARP broadcasts, on the link, an ARP request for ip from ip (sender and target
// address alike, RFC 5227's announcement): hosts on the segment that have an entry for ip update it to
// mac (Linux does so whatever its arp_accept; it only creates no new entry).
func sendGratuitousARP(linkIndex int, mac net.HardwareAddr, ip netip.Addr) error {
	if len(mac) != 6 {
		return fmt.Errorf("link %d has no Ethernet address (%v)", linkIndex, mac)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ARP)))
	if err != nil {
		return fmt.Errorf("opening a packet socket: %w", err)
	}
	defer unix.Close(fd)
	broadcast := [8]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	to := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ARP), Ifindex: linkIndex, Halen: 6, Addr: broadcast}
	if err := unix.Sendto(fd, gratuitousARP(mac, ip), 0, to); err != nil {
		return fmt.Errorf("sending the gratuitous ARP: %w", err)
	}
	return nil
}

// gratuitousARP is the Ethernet frame of an ARP request for ip from (ip, mac), to every host.
func gratuitousARP(mac net.HardwareAddr, ip netip.Addr) []byte {
	a := ip.As4()
	f := make([]byte, 0, 42)
	f = append(f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff) // destination: broadcast
	f = append(f, mac...)                             // source
	f = append(f, 0x08, 0x06)                         // EtherType ARP
	f = append(f, 0x00, 0x01, 0x08, 0x00, 6, 4)       // Ethernet, IPv4, their lengths
	f = append(f, 0x00, 0x01)                         // request
	f = append(f, mac...)                             // sender hardware address
	f = append(f, a[:]...)                            // sender protocol address
	f = append(f, 0, 0, 0, 0, 0, 0)                   // target hardware address: unknown
	f = append(f, a[:]...)                            // target protocol address: the same
	return f
}

// htons is v in network byte order, as packet sockets take protocols.
func htons(v uint16) uint16 { return v<<8 | v>>8 }

func (h *netlinkHost) DeleteAddress(_ context.Context, linkIndex int, addr netip.Prefix) error {
	addr, err := validAddress(addr)
	if err != nil {
		return err
	}
	l, err := h.link(linkIndex)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting address %s: %w", addr, err)
	}
	name := l.Attrs().Name
	existing, err := h.addresses(l)
	if err != nil {
		return fmt.Errorf("deleting address %s from %q: %w", addr, name, err)
	}
	if !slices.Contains(existing, addr) {
		return nil
	}
	// Deleting a primary IPv4 address also deletes its secondaries unless
	// net.ipv4.conf.<link>.promote_secondaries is set; callers deleting several see those as absent.
	if err := h.nl.AddrDel(l, &netlink.Addr{IPNet: toIPNet(addr)}); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
		return fmt.Errorf("deleting address %s from %q: %w", addr, name, err)
	}
	return nil
}

func (h *netlinkHost) SetMAC(_ context.Context, linkIndex int, mac net.HardwareAddr) error {
	l, err := h.link(linkIndex)
	if err != nil {
		return fmt.Errorf("setting MAC %s: %w", mac, err)
	}
	a := l.Attrs()
	if bytes.Equal(a.HardwareAddr, mac) {
		return nil
	}
	err = h.nl.LinkSetHardwareAddr(l, mac)
	if errors.Is(err, unix.EBUSY) && a.Flags&net.FlagUp != 0 {
		// Drivers without live address change need the link down for a moment.
		if err = h.nl.LinkSetDown(l); err == nil {
			err = h.nl.LinkSetHardwareAddr(l, mac)
			if upErr := h.nl.LinkSetUp(l); err == nil {
				err = upErr
			}
		}
	}
	if err != nil {
		return fmt.Errorf("setting MAC of %q to %s: %w", a.Name, mac, err)
	}
	return nil
}

func (h *netlinkHost) SetMTU(_ context.Context, linkIndex int, mtu int) error {
	if mtu <= 0 {
		return fmt.Errorf("setting MTU of link %d: invalid MTU %d", linkIndex, mtu)
	}
	l, err := h.link(linkIndex)
	if err != nil {
		return fmt.Errorf("setting MTU %d: %w", mtu, err)
	}
	if l.Attrs().MTU == mtu {
		return nil
	}
	if err := h.nl.LinkSetMTU(l, mtu); err != nil {
		return fmt.Errorf("setting MTU of %q to %d: %w", l.Attrs().Name, mtu, err)
	}
	return nil
}

func (h *netlinkHost) SetUp(_ context.Context, linkIndex int) error {
	l, err := h.link(linkIndex)
	if err != nil {
		return fmt.Errorf("setting link up: %w", err)
	}
	if l.Attrs().Flags&net.FlagUp != 0 {
		return nil
	}
	if err := h.nl.LinkSetUp(l); err != nil {
		return fmt.Errorf("setting %q up: %w", l.Attrs().Name, err)
	}
	return nil
}

// ensureSysctl writes value to /proc/sys/<key> unless it already holds it. /proc/sys/net shows
// the network namespace of the calling thread.
func ensureSysctl(key, value string) error {
	path := filepath.Join("/proc/sys", key)
	cur, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	if strings.TrimSpace(string(cur)) == value {
		return nil
	}
	if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
		return fmt.Errorf("writing %q to %s: %w", value, path, err)
	}
	return nil
}

func (h *netlinkHost) EnsureForwarding(_ context.Context, linkIndex int) error {
	l, err := h.link(linkIndex)
	if err != nil {
		return fmt.Errorf("enabling forwarding: %w", err)
	}
	name := l.Attrs().Name
	// ip_forward first: turning it on resets every interface's forwarding to 1, turning it on
	// after the interface would be harmless, but this order leaves the interface's value last.
	if err := h.inNetNS(func() error { return ensureSysctl("net/ipv4/ip_forward", "1") }); err != nil {
		return fmt.Errorf("enabling IPv4 forwarding for %q: %w", name, err)
	}
	if err := h.inNetNS(func() error { return ensureSysctl(filepath.Join("net/ipv4/conf", name, "forwarding"), "1") }); err != nil {
		return fmt.Errorf("enabling IPv4 forwarding for %q: %w", name, err)
	}
	// Pod traffic SNATed in OpenFlow reaches the host through the gateway with the host's own
	// address as source; Linux drops such packets unless the interface accepts local sources.
	if err := h.inNetNS(func() error { return ensureSysctl(filepath.Join("net/ipv4/conf", name, "accept_local"), "1") }); err != nil {
		return fmt.Errorf("accepting local sources on %q: %w", name, err)
	}
	return nil
}

// kernelRoute is a route as Routes reports it together with the netlink route it came from, so
// that a delete names the exact kernel route (protocol, scope, table and all).
type kernelRoute struct {
	Route
	raw netlink.Route
}

// normalizeLinux puts a route in the form the kernel reports it in.
func normalizeLinux(r Route) Route {
	if r.Dst.Addr().Is6() && r.Metric == 0 {
		r.Metric = 1024 // IP6_RT_PRIO_USER, what the kernel stores for an IPv6 route without one
	}
	return r
}

// listRoutes lists the configured unicast routes of the main table, optionally only those to dst
// (when valid), each with the netlink route it came from (what DeleteRoute deletes).
func (h *netlinkHost) listRoutes(filter RouteFilter, dst netip.Prefix) ([]kernelRoute, error) {
	return collectRoutes(h, filter, dst, func(raw netlink.Route, r Route) kernelRoute { return kernelRoute{Route: r, raw: raw} })
}

// collectRoutes lists the configured unicast routes of the main table that filter and dst (when
// valid) select, each converted by as as the dump decodes it: a listing of 5,000 node routes kept
// as netlink routes (some 400 bytes each, twice over while the slices grew) was the largest
// allocation of an idle agent, whose drift checks list its routes every ResyncPeriod (bench-scale,
// issue 64). A dump the kernel interrupted (the table changed meanwhile) is read again from the
// start.
func collectRoutes[T any](h *netlinkHost, filter RouteFilter, dst netip.Prefix, as func(netlink.Route, Route) T) ([]T, error) {
	nf := &netlink.Route{Table: unix.RT_TABLE_MAIN}
	mask := netlink.RT_FILTER_TABLE
	family := netlink.FAMILY_ALL
	if filter.LinkIndex != 0 {
		nf.LinkIndex = filter.LinkIndex
		mask |= netlink.RT_FILTER_OIF
	}
	if filter.OwnedOnly {
		nf.Protocol = LinuxRouteProtocol
		mask |= netlink.RT_FILTER_PROTOCOL
	}
	if dst.IsValid() {
		nf.Dst = toIPNet(dst)
		mask |= netlink.RT_FILTER_DST
		family = netlink.FAMILY_V4
		if dst.Addr().Is6() {
			family = netlink.FAMILY_V6
		}
	}
	h.routeDumps.Add(1)
	var out []T
	var err error
	for range dumpRetries {
		out = out[:0]
		err = h.nl.RouteListFilteredIter(family, nf, mask, func(r netlink.Route) bool {
			if r.Type != unix.RTN_UNICAST || r.Protocol == unix.RTPROT_KERNEL || len(r.MultiPath) > 0 {
				return true
			}
			if route, ok := fromKernel(r); ok {
				out = append(out, as(r, route))
			}
			return true
		})
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("listing routes: %w", err)
	}
	return out, nil
}

// fromKernel is a kernel route as a Route (its destination masked, its gateway unmapped, owned when
// it carries winnet's protocol); false when it has no destination.
func fromKernel(r netlink.Route) (Route, bool) {
	d, ok := toPrefix(r.Dst)
	if !ok {
		return Route{}, false
	}
	route := Route{Dst: d.Masked(), LinkIndex: r.LinkIndex, Metric: r.Priority, Owned: r.Protocol == LinuxRouteProtocol}
	if gw, ok := netip.AddrFromSlice(r.Gw); ok {
		route.Gateway = gw.Unmap()
	}
	return route, true
}

func (h *netlinkHost) Routes(_ context.Context, filter RouteFilter) ([]Route, error) {
	return collectRoutes(h, filter, netip.Prefix{}, func(_ netlink.Route, r Route) Route { return r })
}

func (h *netlinkHost) EnsureRoute(ctx context.Context, r Route) error {
	return h.EnsureRoutes(ctx, []Route{r})
}

func (h *netlinkHost) EnsureRoutes(ctx context.Context, routes []Route) error {
	if len(routes) == 0 {
		return nil
	}
	want := make([]Route, len(routes))
	for i, r := range routes {
		if err := r.validate(); err != nil {
			return fmt.Errorf("ensuring route: %w", err)
		}
		want[i] = normalizeLinux(r.normalize())
	}
	if len(want) <= fewRoutes {
		if missing, ok := h.lookUpRoutes(want); ok {
			return h.replaceRoutes(ctx, missing)
		}
	}
	// One listing for all: a dump per route would make installing n routes cost n dumps.
	existing, err := h.listRoutes(RouteFilter{}, netip.Prefix{})
	if err != nil {
		return fmt.Errorf("ensuring routes: %w", err)
	}
	byDst := map[netip.Prefix][]Route{}
	for _, e := range existing {
		byDst[e.Dst] = append(byDst[e.Dst], e.Route)
	}
	var missing []Route
	for _, r := range want {
		if !slices.ContainsFunc(byDst[r.Dst], func(e Route) bool { return routeMatches(r, e) && e.Owned == r.Owned }) {
			missing = append(missing, r)
		}
	}
	// Batched: one netlink round trip per route would make installing thousands of routes
	// cost thousands of round trips.
	return h.replaceRoutes(ctx, missing)
}

// fewRoutes is the most routes EnsureRoutes looks up one by one rather than listing the routing
// table: the kernel dumps a whole table even for a listing filtered by destination, so a node that
// adds one route to a table of 5,000 (a Node joining a large cluster) read all 5,000 (bench-scale,
// issue 64).
const fewRoutes = 4

// lookUpRoutes returns the routes of want the main table does not hold as wanted, asking the kernel
// for each the table entry a lookup of its destination matches (RTM_F_FIB_MATCH, as `ip route get
// fibmatch`). That answers only when it is conclusive: the route itself, a less specific route of
// the main table (ours would have been preferred) or no route at all. ok is false when it is not (a
// default route, whose address the local table answers; an entry of another table, a more specific
// one, or another route to the same prefix, which may hide ours) or a lookup failed otherwise: the
// caller then lists the table.
func (h *netlinkHost) lookUpRoutes(want []Route) (missing []Route, ok bool) {
	for _, r := range want {
		if r.Dst.Bits() == 0 {
			return nil, false
		}
		found, err := h.nl.RouteGetWithOptions(r.Dst.Addr().AsSlice(), &netlink.RouteGetOptions{FIBMatch: true})
		if errors.Is(err, unix.ENETUNREACH) || errors.Is(err, unix.EHOSTUNREACH) {
			missing = append(missing, r)
			continue
		}
		if err != nil || len(found) != 1 {
			return nil, false
		}
		present, conclusive := fibMatchIs(found[0], r)
		if !conclusive {
			return nil, false
		}
		if !present {
			missing = append(missing, r)
		}
	}
	return missing, true
}

// fibMatchIs reports whether k, the entry a lookup of r's destination matched, is r (the main
// table's unicast route, owned as r is), and whether that answer is conclusive.
func fibMatchIs(k netlink.Route, r Route) (present, conclusive bool) {
	actual, ok := fromKernel(k)
	if k.Table != unix.RT_TABLE_MAIN || !ok || actual.Dst.Bits() > r.Dst.Bits() {
		return false, false
	}
	if actual.Dst.Bits() < r.Dst.Bits() {
		return false, true
	}
	if k.Type == unix.RTN_UNICAST && len(k.MultiPath) == 0 && actual.Owned == r.Owned && routeMatches(r, actual) {
		return true, true
	}
	return false, false
}

func (h *netlinkHost) DeleteRoute(_ context.Context, r Route) error {
	if err := r.validate(); err != nil {
		return fmt.Errorf("deleting route: %w", err)
	}
	r = normalizeLinux(r.normalize())
	existing, err := h.listRoutes(RouteFilter{}, r.Dst)
	if err != nil {
		return fmt.Errorf("deleting route %s: %w", r, err)
	}
	for _, e := range existing {
		if !routeMatches(r, e.Route) {
			continue
		}
		if err := h.nl.RouteDel(&e.raw); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("deleting route %s: %w", e.Route, err)
		}
	}
	return nil
}

// ReconcileRoutes lists winnet's routes once and deletes the stale ones in batches: thousands of
// stale routes (a node that left a large cluster) must not cost a listing and a round trip each.
func (h *netlinkHost) ReconcileRoutes(ctx context.Context, desired []Route) error {
	want := map[netip.Prefix][]Route{}
	for _, r := range desired {
		if err := r.validate(); err != nil {
			return fmt.Errorf("reconciling routes: %w", err)
		}
		r = normalizeLinux(r.normalize())
		want[r.Dst] = append(want[r.Dst], r)
	}
	owned, err := h.listRoutes(RouteFilter{OwnedOnly: true}, netip.Prefix{})
	if err != nil {
		return fmt.Errorf("reconciling routes: %w", err)
	}
	stale := slices.DeleteFunc(owned, func(actual kernelRoute) bool {
		return slices.ContainsFunc(want[actual.Dst], func(d Route) bool { return routeMatches(d, actual.Route) })
	})
	return h.deleteStaleRoutes(ctx, stale)
}

func (h *netlinkHost) Neighbor(ctx context.Context, ip netip.Addr) (net.HardwareAddr, error) {
	ip = ip.Unmap()
	if !ip.IsValid() {
		return nil, fmt.Errorf("resolving neighbour: invalid address")
	}
	ctx, cancel := context.WithTimeout(ctx, h.opts.NeighborTimeout)
	defer cancel()

	routes, err := h.nl.RouteGet(ip.AsSlice())
	if err != nil {
		return nil, fmt.Errorf("resolving neighbour %s: looking up its route: %w", ip, err)
	}
	if len(routes) == 0 {
		return nil, fmt.Errorf("resolving neighbour %s: no route: %w", ip, ErrNotFound)
	}
	rt := routes[0]
	switch {
	case rt.Type == unix.RTN_LOCAL:
		return nil, fmt.Errorf("resolving neighbour %s: it is a local address", ip)
	case rt.Gw != nil:
		return nil, fmt.Errorf("resolving neighbour %s: it is not on-link (routed via %s)", ip, rt.Gw)
	case rt.LinkIndex == 0:
		return nil, fmt.Errorf("resolving neighbour %s: its route has no interface", ip)
	}
	family := netlink.FAMILY_V4
	if ip.Is6() {
		family = netlink.FAMILY_V6
	}

	const poll, retrigger = 20 * time.Millisecond, time.Second
	var lastTrigger time.Time
	state := "absent"
	ticker := time.NewTicker(poll)
	defer ticker.Stop()
	for {
		neighs, err := retryDump(func() ([]netlink.Neigh, error) { return h.nl.NeighList(rt.LinkIndex, family) })
		if err != nil {
			return nil, fmt.Errorf("resolving neighbour %s: listing neighbours of link %d: %w", ip, rt.LinkIndex, err)
		}
		var n *netlink.Neigh
		for i := range neighs {
			if a, ok := netip.AddrFromSlice(neighs[i].IP); ok && a.Unmap() == ip {
				n = &neighs[i]
				break
			}
		}
		if n != nil {
			state = neighStateString(n.State)
			if n.State&usableNeighStates != 0 && len(n.HardwareAddr) > 0 {
				return slices.Clone(n.HardwareAddr), nil
			}
		}
		if time.Since(lastTrigger) >= retrigger || (n != nil && n.State&netlink.NUD_FAILED != 0) {
			// NTF_USE makes the kernel start resolution as if a packet were waiting for it
			// (neigh_event_send), creating the entry when absent.
			err := h.nl.NeighSet(&netlink.Neigh{
				LinkIndex: rt.LinkIndex,
				Family:    family,
				IP:        ip.AsSlice(),
				Flags:     netlink.NTF_USE,
			})
			if err != nil {
				return nil, fmt.Errorf("resolving neighbour %s: starting resolution on link %d: %w", ip, rt.LinkIndex, err)
			}
			lastTrigger = time.Now()
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("resolving neighbour %s on link %d (state %s): %w", ip, rt.LinkIndex, state, errors.Join(ErrNotFound, ctx.Err()))
		case <-ticker.C:
		}
	}
}

func neighStateString(s int) string {
	names := []struct {
		bit  int
		name string
	}{
		{netlink.NUD_INCOMPLETE, "incomplete"}, {netlink.NUD_REACHABLE, "reachable"},
		{netlink.NUD_STALE, "stale"}, {netlink.NUD_DELAY, "delay"}, {netlink.NUD_PROBE, "probe"},
		{netlink.NUD_FAILED, "failed"}, {netlink.NUD_NOARP, "noarp"}, {netlink.NUD_PERMANENT, "permanent"},
	}
	var out []string
	for _, n := range names {
		if s&n.bit != 0 {
			out = append(out, n.name)
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ",")
}

// Links lists every link of the namespace.
func (h *netlinkHost) Links(context.Context) ([]Link, error) {
	ls, err := retryDump(h.nl.LinkList)
	if err != nil {
		return nil, fmt.Errorf("listing links: %w", err)
	}
	out := make([]Link, 0, len(ls))
	for _, l := range ls {
		out = append(out, toLink(l))
	}
	return out, nil
}
