package hostnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"
)

// Ownership marks. A route carries winnet's mark when winnet created it as its own (Route.Owned);
// ReconcileRoutes deletes only routes with the mark, so routes of the host, DHCP, other agents and
// the administrator are never touched.
const (
	// LinuxRouteProtocol is the rtnetlink route protocol (rtm_protocol, "proto 241" in `ip route`)
	// of winnet's routes on Linux. It is unassigned in iproute2's rt_protos and unused by the
	// routing daemons and CNIs found on Kubernetes nodes (BIRD 12, babel 42, Calico 80, Open/R 99,
	// FRR 186-192); the kernel's own values are 0-4 and DHCP is 16.
	LinuxRouteProtocol = 241

	// WindowsOwnedMetricBase and WindowsOwnedMetricSpan give the band of route metrics that marks
	// winnet's routes on Windows: a route is winnet's when its Protocol is MIB_IPPROTO_NETMGMT
	// (the only protocol CreateIpForwardEntry2 accepts for routes it creates, so the protocol
	// alone cannot tell winnet's routes from the administrator's) and its metric lies in
	// [WindowsOwnedMetricBase, WindowsOwnedMetricBase+WindowsOwnedMetricSpan). An owned Route's
	// Metric is the offset inside the band, so it must be below WindowsOwnedMetricSpan; a route
	// that is not owned may not use a metric inside the band. The band stays below 9999, the
	// largest route metric route.exe and the NetTCPIP cmdlets accept, and away from the common
	// values (0, 1, 256).
	WindowsOwnedMetricBase = 5700
	WindowsOwnedMetricSpan = 100
)

// DefaultNeighborTimeout bounds Neighbor when Options.NeighborTimeout is zero.
const DefaultNeighborTimeout = 3 * time.Second

// ErrNotFound is wrapped by the errors of lookups (a link by name or address, a neighbour) that
// found nothing.
var ErrNotFound = errors.New("not found")

// Link is a network interface as the IP stack sees it.
type Link struct {
	// Name is the interface name on Linux and the interface alias (friendly name) on Windows.
	Name string
	// Index is the interface index (ifindex on Linux, IfIndex/NET_IFINDEX on Windows). Every
	// method that acts on a link takes it.
	Index int
	MAC   net.HardwareAddr
	MTU   int
	// Up reports whether the link is administratively up (IFF_UP) on Linux and operationally up
	// on Windows.
	Up bool
}

// Route is a unicast route in the main routing table.
type Route struct {
	// Dst is the destination prefix; 0.0.0.0/0 or ::/0 for a default route.
	Dst netip.Prefix
	// Gateway is the next hop; the zero Addr means the destination is on-link.
	Gateway netip.Addr
	// LinkIndex is the outgoing interface. In EnsureRoute zero lets the system choose it from the
	// gateway (Linux only); in ReconcileRoutes' desired set zero matches any interface.
	LinkIndex int
	// Metric is the route metric (priority). On Linux the kernel stores an IPv6 metric of 0 as
	// 1024, and so does this package. On Windows it is the route's metric offset, added to the
	// interface metric; for an owned route it is the offset inside winnet's metric band.
	Metric int
	// Owned reports, and for EnsureRoute decides, whether the route carries winnet's ownership
	// mark.
	Owned bool
	// OnLink, for EnsureRoute, says the gateway is reached directly on LinkIndex although no
	// address of the link covers it (a remote node's gateway behind the tunnel). Linux sets the
	// onlink flag; Windows reaches any next hop on the interface.
	OnLink bool
}

func (r Route) String() string {
	s := r.Dst.String()
	if r.Gateway.IsValid() {
		s += " via " + r.Gateway.String()
	}
	s += fmt.Sprintf(" dev %d metric %d", r.LinkIndex, r.Metric)
	if r.Owned {
		s += " owned"
	}
	return s
}

// validate checks what every platform needs of a route it is asked to create or delete.
func (r Route) validate() error {
	if !r.Dst.IsValid() {
		return fmt.Errorf("route %s: invalid destination", r)
	}
	if r.Gateway.IsValid() && r.Gateway.Unmap().Is4() != r.Dst.Addr().Unmap().Is4() {
		return fmt.Errorf("route %s: gateway and destination are of different IP families", r)
	}
	if r.Metric < 0 {
		return fmt.Errorf("route %s: negative metric", r)
	}
	return nil
}

// normalize returns r with Dst masked and both addresses unmapped, the form Routes returns.
func (r Route) normalize() Route {
	r.Dst = netip.PrefixFrom(r.Dst.Addr().Unmap(), r.Dst.Bits()-unmapBits(r.Dst.Addr())).Masked()
	if r.Gateway.IsValid() {
		r.Gateway = r.Gateway.Unmap()
	}
	return r
}

func unmapBits(a netip.Addr) int {
	if a.Is4In6() {
		return 96
	}
	return 0
}

// matches reports whether the route actual is the route desired: same destination, gateway and
// metric, and the same interface unless desired leaves it open (LinkIndex 0). Ownership is not
// compared.
func routeMatches(desired, actual Route) bool {
	return desired.Dst == actual.Dst &&
		desired.Gateway == actual.Gateway &&
		desired.Metric == actual.Metric &&
		(desired.LinkIndex == 0 || desired.LinkIndex == actual.LinkIndex)
}

// RouteFilter selects the routes Routes returns.
type RouteFilter struct {
	// LinkIndex selects the routes through one interface; zero selects all.
	LinkIndex int
	// OwnedOnly selects only the routes carrying winnet's ownership mark.
	OwnedOnly bool
}

// IPConfig is the IP configuration of an adapter: what HNS moves from the adapter to the
// management vNIC when it creates a Transparent network on it, and gives back when the network is
// deleted or the host reboots.
type IPConfig struct {
	// Addresses are the movable unicast addresses (see Movable) with their prefix lengths.
	Addresses []netip.Prefix `json:"addresses"`
	// Routes are the routes through the link (see Routes); their LinkIndex is the link's.
	Routes []Route `json:"routes,omitempty"`
	// DNSServers are the link's DNS servers; always empty on Linux, which keeps resolvers per
	// host, not per link.
	DNSServers []netip.Addr `json:"dnsServers,omitempty"`
	// DHCP reports that the IPv4 configuration comes from DHCP. On Linux an IPv4 address with a
	// finite valid lifetime (a lease) counts as DHCP.
	DHCP bool `json:"dhcp,omitempty"`
}

// Holds reports whether the configuration holds the address ip, and with which prefix.
func (c IPConfig) Holds(ip netip.Addr) (netip.Prefix, bool) {
	for _, a := range c.Addresses {
		if a.Addr() == ip {
			return a, true
		}
	}
	return netip.Prefix{}, false
}

// DHCPLeaseLifetime is the valid lifetime of the addresses ApplyIPConfig adds on Linux for a DHCP
// configuration: a lease's, not "forever", so that ReadIPConfig reads it as DHCP again.
const DHCPLeaseLifetime = 24 * time.Hour

// applyRoutes implements the platform-neutral part of ApplyIPConfig: routes without a gateway
// first, then the others, each through linkIndex.
func applyRoutes(ctx context.Context, h Interface, linkIndex int, routes []Route) error {
	sorted := slices.Clone(routes)
	slices.SortStableFunc(sorted, func(a, b Route) int {
		switch {
		case !a.Gateway.IsValid() && b.Gateway.IsValid():
			return -1
		case a.Gateway.IsValid() && !b.Gateway.IsValid():
			return 1
		}
		return 0
	})
	for _, r := range sorted {
		r.LinkIndex = linkIndex
		if err := h.EnsureRoute(ctx, r); err != nil {
			return fmt.Errorf("restoring route %s: %w", r, err)
		}
	}
	return nil
}

// Options configure New.
type Options struct {
	// NetNSPath, on Linux, is the network namespace to act in (such as /var/run/netns/node1); empty
	// means the namespace of the calling thread. Simulated nodes use it. Ignored on Windows.
	NetNSPath string
	// NeighborTimeout bounds how long Neighbor waits for address resolution when the context has
	// no earlier deadline; zero means DefaultNeighborTimeout.
	NeighborTimeout time.Duration
}

// New returns the Interface of this platform, acting on the network namespace (Linux) or
// compartment (Windows) of the calling thread.
func New(opts Options) (Interface, error) {
	if opts.NeighborTimeout == 0 {
		opts.NeighborTimeout = DefaultNeighborTimeout
	}
	if opts.NeighborTimeout < 0 {
		return nil, fmt.Errorf("invalid neighbour timeout %s", opts.NeighborTimeout)
	}
	return newPlatform(opts)
}

// Interface is the host's network plumbing, split by concern: Links (links and their addresses),
// Routing (routes and next hops), Adapters (an adapter's IP configuration), SwitchPorts and Watches.
// A consumer depends on the parts it uses; the node-network reconciler and the HNS simulator use
// all of it.
//
// Contract, on every platform:
//   - Ensure* creates the object or fixes it to match, and changes nothing when it already
//     matches; Set* likewise change nothing when the value is already right.
//   - Delete* of something absent is a no-op.
//   - ReconcileRoutes removes only routes carrying winnet's ownership mark (see
//     LinuxRouteProtocol, WindowsOwnedMetricBase); it never touches any other route.
//   - Lookups that find nothing return an error wrapping ErrNotFound.
//   - Addresses are netip.Prefix values: the address with the on-link prefix length
//     (10.0.0.5/24), never masked.
//
// On Linux the implementation acts on the network namespace of the calling OS thread: a caller
// that switched namespaces must hold runtime.LockOSThread.
type Interface interface {
	Links
	Routing
	Adapters
	SwitchPorts
	Watches
}

// Links reads and configures the host's links and their addresses. The contract of Interface holds.
type Links interface {
	// LinkByName returns the link with this name (Linux) or alias (Windows).
	LinkByName(ctx context.Context, name string) (Link, error)
	// LinkByAddress returns the link holding the unicast address ip, e.g. the uplink holding
	// the Node IP.
	LinkByAddress(ctx context.Context, ip netip.Addr) (Link, error)
	// Addresses returns the unicast addresses of a link, IPv4 and IPv6, link-local included.
	Addresses(ctx context.Context, linkIndex int) ([]netip.Prefix, error)
	// EnsureAddress puts the address on the link; the same IP with another prefix length on
	// that link is replaced. IPv6 addresses are added without duplicate address detection: the
	// agent only adds addresses it owns or moves.
	EnsureAddress(ctx context.Context, linkIndex int, addr netip.Prefix) error
	// EnsureSkipAsSourceAddress puts an address on the link that the host never picks as the
	// source of its own connections, only answers for (ARP) and receives on: an egress IP. addr must
	// be a host prefix (/32 or /128), so that it adds no on-link route. On Windows the address has
	// SkipAsSource set and goes through duplicate address detection, whose ARP probe and
	// announcement tell the segment's hosts and switches where the address now lives; a duplicate
	// (another host still holds it) is an error. On Linux, which has no SkipAsSource, a host prefix
	// outside the link's subnets is never chosen as a source over the link's own address in the
	// subnet (the node IP), which the kernel routes carry as their preferred source; and as the kernel
	// announces no address it is given, an IPv4 address new on the link is announced with a
	// gratuitous ARP (an ARP request for itself from itself) as Windows' detection announces it.
	EnsureSkipAsSourceAddress(ctx context.Context, linkIndex int, addr netip.Prefix) error
	// DeleteAddress removes the address (IP and prefix length) from the link.
	DeleteAddress(ctx context.Context, linkIndex int, addr netip.Prefix) error
	// SetMAC sets the link's hardware address. On Windows this is not available: the MAC of the
	// management vNIC is HNS's to set, see hostnet_windows.go.
	SetMAC(ctx context.Context, linkIndex int, mac net.HardwareAddr) error
	// SetMTU sets the link's MTU (on Windows the IPv4 and IPv6 NlMtu of the interface).
	SetMTU(ctx context.Context, linkIndex int, mtu int) error
	// SetUp brings the link administratively up.
	SetUp(ctx context.Context, linkIndex int) error
	// EnsureForwarding turns on IPv4 forwarding for the link: on Linux
	// net.ipv4.conf.<link>.forwarding and net.ipv4.ip_forward, on Windows the interface's
	// ForwardingEnabled. IPv6 forwarding is left alone (on Linux it would stop router
	// advertisements from configuring the host).
	EnsureForwarding(ctx context.Context, linkIndex int) error
	// RenameLink gives the link a new name (Linux) or alias (Windows), keeping its addresses and
	// routes: the agent renames the management vNIC HNS created, "vEthernet (<adapter>)", to the
	// bridge name so that OVS adopts it as the bridge's LOCAL port (Antrea PR 3067). On Linux,
	// where a link must be down to be renamed and going down drops its routes, the routes are put
	// back; on Windows it is MSFT_NetAdapter.Rename (WMI: iphlpapi has no call for it).
	RenameLink(ctx context.Context, linkIndex int, name string) error
}

// Routing reads and configures the main routing table's unicast routes and resolves their on-link
// next hops; only routes carrying winnet's ownership mark are ever removed by ReconcileRoutes. The contract of Interface holds.
type Routing interface {
	// Routes returns the unicast routes of the main table that were configured rather than
	// derived by the system from an address: on Linux routes of protocol "kernel" are left out,
	// on Windows routes of origin well-known or protocol local, and loopback routes. Multipath
	// routes (Linux) are left out.
	Routes(ctx context.Context, filter RouteFilter) ([]Route, error)
	// EnsureRoute makes the route exist, with winnet's mark when r.Owned: afterwards Routes
	// lists it. On Linux a route with the same destination and metric is replaced (the
	// kernel's identity of a route); on Windows, which needs r.LinkIndex, a route with the same
	// destination, interface and gateway gets r's metric and mark.
	EnsureRoute(ctx context.Context, r Route) error
	// EnsureRoutes is EnsureRoute for many routes at once, listing the routes once: installing
	// thousands of remote Pod subnet routes must not cost one listing each.
	EnsureRoutes(ctx context.Context, routes []Route) error
	// DeleteRoute deletes the routes matching r (destination, gateway, metric, and interface
	// unless r.LinkIndex is 0), owned or not. On Windows, where an owned route's Metric is an
	// offset in winnet's band, r.Owned must be the route's as Routes reports it.
	DeleteRoute(ctx context.Context, r Route) error
	// ReconcileRoutes deletes every route carrying winnet's mark that matches no route of
	// desired. It does not create the desired routes: EnsureRoute does.
	ReconcileRoutes(ctx context.Context, desired []Route) error
	// Neighbor returns the hardware address of the on-link neighbour ip, starting address
	// resolution (ARP / neighbour discovery) when it is not known and waiting for it within
	// the context and Options.NeighborTimeout. An ip that is not on-link is an error.
	Neighbor(ctx context.Context, ip netip.Addr) (net.HardwareAddr, error)
}

// Adapters reads and applies an adapter's IP configuration: what HNS moves from the uplink to the
// management vNIC, and gives back. The contract of Interface holds.
type Adapters interface {
	// ReadIPConfig returns the link's IP configuration as HNS moves it from an adapter to the
	// management vNIC: its movable addresses, its routes, its DNS servers and whether IPv4 comes
	// from DHCP. The agent records it before creating the HNS network.
	ReadIPConfig(ctx context.Context, linkIndex int) (IPConfig, error)
	// ApplyIPConfig gives the link the configuration: a DHCP configuration turns DHCP on (on
	// Linux, which has no DHCP client here, the addresses are added with a lease's finite
	// lifetime), a static one gets its addresses; then the routes and the DNS servers (Windows
	// only: Linux has no per-link resolvers). It is idempotent.
	ApplyIPConfig(ctx context.Context, linkIndex int, cfg IPConfig) error
}

// SwitchPorts marks links as ports of the virtual switch only. The contract of Interface holds.
type SwitchPorts interface {
	// SetSwitchPort makes the link a port of the virtual switch only (on), or a host interface
	// again (off). The host's IP stack neither forwards nor delivers what arrives on a switch port:
	// the switch does. On Windows the Hyper-V switch owns its ports and this changes nothing; on
	// Linux, where the userspace datapath reads the link beside the kernel, an nftables netdev
	// ingress chain (table "winnet") drops the kernel's copy.
	SetSwitchPort(ctx context.Context, linkIndex int, on bool) error
	// ReleaseSwitchPort drops the switch-port mark of an interface that is gone, or goes with its
	// port, without waiting: on Linux its chain is deleted in the background, together with the
	// other released chains, in one transaction. SetSwitchPort(on) for the name cancels it.
	ReleaseSwitchPort(ctx context.Context, name string) error
}

// Watches reports changes of the host's links, addresses and routes. The contract of Interface holds.
type Watches interface {
	// WatchLinks reports changes of the host's links until ctx ends: the channel it returns
	// receives a value when a link is added, changes or goes (several changes may give one
	// value; look again at what you wait for), and is closed when the watch ends — ctx ended or
	// the platform's notifications failed (watch again). On Linux it is rtnetlink's link group; on
	// Windows it fails with errors.ErrUnsupported, and callers poll.
	WatchLinks(ctx context.Context) (<-chan struct{}, error)
	// WatchAddresses reports drift of the host's addresses and routes until ctx ends, as WatchLinks
	// reports links: a value when a unicast address is added to or removed from a link, or a route
	// is removed (routes added are left out: winnet adds thousands, and a route someone added does
	// not take one of winnet's away). Only changes on the links whose indexes links returns count
	// (asked at every change; nil, or a nil result, counts every link), and changes the platform
	// reports without a link: a Pod's vNIC coming and going (its link-local address and routes)
	// must not wake a pass over the whole node. On Linux it is rtnetlink's address and route
	// groups, on Windows NotifyUnicastIpAddressChange and NotifyRouteChange2.
	WatchAddresses(ctx context.Context, links func() []int) (<-chan struct{}, error)
}

// reconcileRoutes implements ReconcileRoutes on top of Routes and DeleteRoute. norm puts a desired
// route in the form the platform reports it in (e.g. the IPv6 default metric on Linux).
func reconcileRoutes(ctx context.Context, h Interface, desired []Route, norm func(Route) Route) error {
	want := make([]Route, 0, len(desired))
	for _, r := range desired {
		if err := r.validate(); err != nil {
			return fmt.Errorf("reconciling routes: %w", err)
		}
		want = append(want, norm(r.normalize()))
	}
	owned, err := h.Routes(ctx, RouteFilter{OwnedOnly: true})
	if err != nil {
		return fmt.Errorf("reconciling routes: %w", err)
	}
	var errs []error
	for _, actual := range owned {
		if slices.ContainsFunc(want, func(d Route) bool { return routeMatches(d, actual) }) {
			continue
		}
		if err := h.DeleteRoute(ctx, actual); err != nil {
			errs = append(errs, fmt.Errorf("deleting stale route %s: %w", actual, err))
		}
	}
	return errors.Join(errs...)
}

// Movable reports whether an address belongs to an adapter's IP configuration as HNS moves it to
// the management vNIC (see IPConfig): every unicast address except link-local ones
// (169.254.0.0/16, fe80::/10), which belong to their link by definition and which the system
// configures on each link itself.
func Movable(addr netip.Prefix) bool {
	return addr.IsValid() && !addr.Addr().IsLinkLocalUnicast()
}

// watchedLink reports whether a change on the link of the index counts for a watcher of links
// (see Interface.WatchAddresses): every link when links is nil or returns nil, and a change the
// platform reports without a link (index 0).
func watchedLink(links func() []int, index int) bool {
	if links == nil || index == 0 {
		return true
	}
	watched := links()
	return watched == nil || slices.Contains(watched, index)
}

// LinkLister lists every link of the host (the support bundle's inventory). The platforms'
// implementations of Interface have it; test fakes need not.
type LinkLister interface {
	Links(ctx context.Context) ([]Link, error)
}
