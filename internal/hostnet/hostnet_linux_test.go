//go:build linux

package hostnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	. "github.com/onsi/gomega"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/winnet-io/winnet/test/hostcmd"
)

func TestLinkLookup(t *testing.T) {
	tests := []struct {
		name string
		// lookup finds a link; want is the name of the veth it must return, "" for ErrNotFound.
		lookup func(ctx context.Context, h Interface) (Link, error)
		want   string
	}{
		{
			name:   "by name",
			lookup: func(ctx context.Context, h Interface) (Link, error) { return h.LinkByName(ctx, "uplink0") },
			want:   "uplink0",
		},
		{
			name:   "by name, absent",
			lookup: func(ctx context.Context, h Interface) (Link, error) { return h.LinkByName(ctx, "nosuch0") },
		},
		{
			name: "by the IPv4 address it holds",
			lookup: func(ctx context.Context, h Interface) (Link, error) {
				return h.LinkByAddress(ctx, netip.MustParseAddr("192.168.50.10"))
			},
			want: "uplink0",
		},
		{
			name: "by a secondary address, on the other link",
			lookup: func(ctx context.Context, h Interface) (Link, error) {
				return h.LinkByAddress(ctx, netip.MustParseAddr("192.168.60.11"))
			},
			want: "other0",
		},
		{
			name: "by an IPv6 address",
			lookup: func(ctx context.Context, h Interface) (Link, error) {
				return h.LinkByAddress(ctx, netip.MustParseAddr("fd00:50::10"))
			},
			want: "uplink0",
		},
		{
			name: "by an address of the subnet that no link holds",
			lookup: func(ctx context.Context, h Interface) (Link, error) {
				return h.LinkByAddress(ctx, netip.MustParseAddr("192.168.50.99"))
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			enterNewNetNS(t)
			ctx := t.Context()
			addVeth(g, "uplink0", "uplink0p")
			addVeth(g, "other0", "other0p")
			for name, addrs := range map[string][]string{
				"uplink0": {"192.168.50.10/24", "fd00:50::10/64"},
				"other0":  {"192.168.60.10/24", "192.168.60.11/24"},
			} {
				l, err := netlink.LinkByName(name)
				g.Expect(err).NotTo(HaveOccurred())
				for _, a := range addrs {
					addr, err := netlink.ParseAddr(a)
					g.Expect(err).NotTo(HaveOccurred())
					g.Expect(netlink.AddrAdd(l, addr)).To(Succeed())
				}
			}
			h := newHost(g, Options{})

			got, err := tt.lookup(ctx, h)
			if tt.want == "" {
				g.Expect(errors.Is(err, ErrNotFound)).To(BeTrue(), "error %v wraps ErrNotFound", err)
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			nl, err := netlink.LinkByName(tt.want)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(Link{
				Name:  tt.want,
				Index: nl.Attrs().Index,
				MAC:   nl.Attrs().HardwareAddr,
				MTU:   nl.Attrs().MTU,
				Up:    true,
			}))
		})
	}
}

func TestEnsureAndDeleteAddress(t *testing.T) {
	p := netip.MustParsePrefix
	tests := []struct {
		name     string
		existing []string
		ensure   []netip.Prefix
		delete   []netip.Prefix
		// want is the set of addresses of the link afterwards, link-local IPv6 left out.
		want []netip.Prefix
	}{
		{
			name:   "ensure adds an IPv4 address",
			ensure: []netip.Prefix{p("10.20.0.5/24")},
			want:   []netip.Prefix{p("10.20.0.5/24")},
		},
		{
			name:   "ensure adds an IPv6 address, usable at once",
			ensure: []netip.Prefix{p("fd00:20::5/64")},
			want:   []netip.Prefix{p("fd00:20::5/64")},
		},
		{
			name:     "ensure of a present address keeps the others",
			existing: []string{"10.20.0.5/24", "10.20.0.6/24"},
			ensure:   []netip.Prefix{p("10.20.0.6/24")},
			want:     []netip.Prefix{p("10.20.0.5/24"), p("10.20.0.6/24")},
		},
		{
			name:     "ensure fixes the prefix length of the same IP",
			existing: []string{"10.20.0.5/16"},
			ensure:   []netip.Prefix{p("10.20.0.5/24")},
			want:     []netip.Prefix{p("10.20.0.5/24")},
		},
		{
			name:     "delete removes only that address",
			existing: []string{"10.20.0.5/24", "10.21.0.5/24", "fd00:20::5/64"},
			delete:   []netip.Prefix{p("10.21.0.5/24"), p("fd00:20::5/64")},
			want:     []netip.Prefix{p("10.20.0.5/24")},
		},
		{
			name:     "delete of an absent address, or of the IP with another prefix length, is a no-op",
			existing: []string{"10.20.0.5/24"},
			delete:   []netip.Prefix{p("10.20.0.9/24"), p("10.20.0.5/25")},
			want:     []netip.Prefix{p("10.20.0.5/24")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			enterNewNetNS(t)
			ctx := t.Context()
			l := addVeth(g, "eth0", "eth0p")
			for _, a := range tt.existing {
				addr, err := netlink.ParseAddr(a)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(netlink.AddrAdd(l, addr)).To(Succeed())
			}
			h := newHost(g, Options{})
			idx := l.Attrs().Index
			apply := func() {
				for _, a := range tt.ensure {
					g.Expect(h.EnsureAddress(ctx, idx, a)).To(Succeed())
				}
				for _, a := range tt.delete {
					g.Expect(h.DeleteAddress(ctx, idx, a)).To(Succeed())
				}
			}

			apply()
			got, err := h.Addresses(ctx, idx)
			g.Expect(err).NotTo(HaveOccurred())
			got = slices.DeleteFunc(got, func(a netip.Prefix) bool { return a.Addr().IsLinkLocalUnicast() })
			g.Expect(got).To(ConsistOf(tt.want))
			// The kernel agrees, and IPv6 addresses skipped duplicate address detection.
			kernel, err := netlink.AddrList(l, netlink.FAMILY_ALL)
			g.Expect(err).NotTo(HaveOccurred())
			for _, a := range kernel {
				if p, ok := toPrefix(a.IPNet); ok && slices.Contains(tt.ensure, p) {
					g.Expect(a.Flags&unix.IFA_F_TENTATIVE).To(BeZero(), "address %s is tentative", a.IPNet)
				}
			}

			// A second run changes nothing at all.
			settle(g)
			g.Expect(netlinkEvents(g, apply)).To(BeEmpty())
			again, err := h.Addresses(ctx, idx)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(slices.DeleteFunc(again, func(a netip.Prefix) bool { return a.Addr().IsLinkLocalUnicast() })).To(ConsistOf(tt.want))
		})
	}
}

func TestSetMACMTUUp(t *testing.T) {
	mac := net.HardwareAddr{0x02, 0x57, 0x4e, 0x00, 0x00, 0x01}
	tests := []struct {
		name string
		// down starts with the link down.
		down  bool
		set   func(ctx context.Context, h Interface, idx int) error
		check func(g *WithT, l netlink.Link)
	}{
		{
			name:  "MAC",
			set:   func(ctx context.Context, h Interface, idx int) error { return h.SetMAC(ctx, idx, mac) },
			check: func(g *WithT, l netlink.Link) { g.Expect(l.Attrs().HardwareAddr).To(Equal(mac)) },
		},
		{
			name:  "MAC of a link that is down",
			down:  true,
			set:   func(ctx context.Context, h Interface, idx int) error { return h.SetMAC(ctx, idx, mac) },
			check: func(g *WithT, l netlink.Link) { g.Expect(l.Attrs().HardwareAddr).To(Equal(mac)) },
		},
		{
			name:  "MTU",
			set:   func(ctx context.Context, h Interface, idx int) error { return h.SetMTU(ctx, idx, 1400) },
			check: func(g *WithT, l netlink.Link) { g.Expect(l.Attrs().MTU).To(Equal(1400)) },
		},
		{
			name:  "up",
			down:  true,
			set:   func(ctx context.Context, h Interface, idx int) error { return h.SetUp(ctx, idx) },
			check: func(g *WithT, l netlink.Link) { g.Expect(l.Attrs().Flags & net.FlagUp).NotTo(BeZero()) },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			enterNewNetNS(t)
			ctx := t.Context()
			l := addVeth(g, "eth0", "eth0p")
			if tt.down {
				g.Expect(netlink.LinkSetDown(l)).To(Succeed())
			}
			h := newHost(g, Options{})
			idx := l.Attrs().Index

			g.Expect(tt.set(ctx, h, idx)).To(Succeed())
			l, err := netlink.LinkByIndex(idx)
			g.Expect(err).NotTo(HaveOccurred())
			tt.check(g, l)
			link, err := h.LinkByName(ctx, "eth0")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(link.MAC).To(Equal(l.Attrs().HardwareAddr))
			g.Expect(link.MTU).To(Equal(l.Attrs().MTU))
			g.Expect(link.Up).To(Equal(l.Attrs().Flags&net.FlagUp != 0))

			settle(g)
			g.Expect(netlinkEvents(g, func() { g.Expect(tt.set(ctx, h, idx)).To(Succeed()) })).To(BeEmpty(), "setting the same value again changes nothing")
		})
	}
}

func TestEnsureForwarding(t *testing.T) {
	g := NewWithT(t)
	enterNewNetNS(t)
	ctx := t.Context()
	l := addVeth(g, "eth0", "eth0p")
	other := addVeth(g, "eth1", "eth1p")
	h := newHost(g, Options{})
	// Start with forwarding off whatever the namespace inherited from the host (turning
	// ip_forward off turns every interface's forwarding off).
	g.Expect(os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("0"), 0o644)).To(Succeed())
	g.Expect(readSysctl(g, "net/ipv4/ip_forward")).To(Equal("0"))
	g.Expect(readSysctl(g, "net/ipv4/conf/eth0/forwarding")).To(Equal("0"))
	g.Expect(readSysctl(g, "net/ipv4/conf/eth1/forwarding")).To(Equal("0"))

	g.Expect(h.EnsureForwarding(ctx, l.Attrs().Index)).To(Succeed())
	g.Expect(readSysctl(g, "net/ipv4/ip_forward")).To(Equal("1"))
	g.Expect(readSysctl(g, "net/ipv4/conf/eth0/forwarding")).To(Equal("1"))

	// An interface turned off again afterwards is turned on without touching the others.
	g.Expect(os.WriteFile("/proc/sys/net/ipv4/conf/eth1/forwarding", []byte("0"), 0o644)).To(Succeed())
	g.Expect(h.EnsureForwarding(ctx, l.Attrs().Index)).To(Succeed())
	g.Expect(readSysctl(g, "net/ipv4/conf/eth1/forwarding")).To(Equal("0"), "eth1 was not asked for")
	g.Expect(h.EnsureForwarding(ctx, other.Attrs().Index)).To(Succeed())
	g.Expect(readSysctl(g, "net/ipv4/conf/eth1/forwarding")).To(Equal("1"))
	g.Expect(readSysctl(g, "net/ipv4/conf/eth0/forwarding")).To(Equal("1"))
}

// routeSetup is a namespace with one veth holding 10.30.0.1/24 and fd00:30::1/64, and the kernel
// routes those addresses bring.
func routeSetup(t *testing.T) (*WithT, Interface, netlink.Link) {
	g := NewWithT(t)
	enterNewNetNS(t)
	l := addVeth(g, "eth0", "eth0p")
	for _, a := range []string{"10.30.0.1/24", "fd00:30::1/64"} {
		addr, err := netlink.ParseAddr(a)
		g.Expect(err).NotTo(HaveOccurred())
		addr.Flags = unix.IFA_F_NODAD
		g.Expect(netlink.AddrAdd(l, addr)).To(Succeed())
	}
	return g, newHost(g, Options{}), l
}

// kernelRoutesTo returns the main-table routes to dst as the kernel lists them.
func kernelRoutesTo(g *WithT, dst string) []netlink.Route {
	_, n, err := net.ParseCIDR(dst)
	g.Expect(err).NotTo(HaveOccurred())
	family := netlink.FAMILY_V4
	if n.IP.To4() == nil {
		family = netlink.FAMILY_V6
	}
	rs, err := netlink.RouteListFiltered(family, &netlink.Route{Table: unix.RT_TABLE_MAIN, Dst: n}, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_DST)
	g.Expect(err).NotTo(HaveOccurred())
	return rs
}

func TestEnsureRoute(t *testing.T) {
	p, a := netip.MustParsePrefix, netip.MustParseAddr
	tests := []struct {
		name string
		// before are routes created first with the raw netlink API (gateway, metric, protocol).
		before []netlink.Route
		route  Route
		// wantKernel is how many main-table routes to route.Dst the kernel holds afterwards.
		wantKernel int
	}{
		{
			name:       "owned IPv4 route via a gateway",
			route:      Route{Dst: p("10.40.0.0/16"), Gateway: a("10.30.0.2"), Owned: true},
			wantKernel: 1,
		},
		{
			name:       "owned IPv6 route, default metric",
			route:      Route{Dst: p("fd00:40::/64"), Gateway: a("fd00:30::2"), Owned: true},
			wantKernel: 1,
		},
		{
			name:       "on-link route without the mark, with a metric",
			route:      Route{Dst: p("10.41.0.0/24"), Metric: 50},
			wantKernel: 1,
		},
		{
			name:       "default route",
			route:      Route{Dst: p("0.0.0.0/0"), Gateway: a("10.30.0.254")},
			wantKernel: 1,
		},
		{
			name:       "a wrong gateway is fixed",
			before:     []netlink.Route{{Dst: mustIPNet("10.40.0.0/16"), Gw: net.ParseIP("10.30.0.9"), Protocol: LinuxRouteProtocol}},
			route:      Route{Dst: p("10.40.0.0/16"), Gateway: a("10.30.0.2"), Owned: true},
			wantKernel: 1,
		},
		{
			name:       "an unmarked route with the same destination and metric gets the mark",
			before:     []netlink.Route{{Dst: mustIPNet("10.40.0.0/16"), Gw: net.ParseIP("10.30.0.2"), Protocol: unix.RTPROT_BOOT}},
			route:      Route{Dst: p("10.40.0.0/16"), Gateway: a("10.30.0.2"), Owned: true},
			wantKernel: 1,
		},
		{
			name:       "a route to the same destination with another metric is left alone",
			before:     []netlink.Route{{Dst: mustIPNet("10.40.0.0/16"), Gw: net.ParseIP("10.30.0.9"), Priority: 300, Protocol: unix.RTPROT_BOOT}},
			route:      Route{Dst: p("10.40.0.0/16"), Gateway: a("10.30.0.2"), Metric: 100, Owned: true},
			wantKernel: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, h, l := routeSetup(t)
			ctx := t.Context()
			for _, r := range tt.before {
				r.LinkIndex = l.Attrs().Index
				g.Expect(netlink.RouteAdd(&r)).To(Succeed())
			}
			want := tt.route
			want.LinkIndex = l.Attrs().Index

			g.Expect(h.EnsureRoute(ctx, want)).To(Succeed())
			routes, err := h.Routes(ctx, RouteFilter{LinkIndex: l.Attrs().Index})
			g.Expect(err).NotTo(HaveOccurred())
			got := slices.DeleteFunc(routes, func(r Route) bool { return r.Dst != want.Dst || r.Metric != normalizeLinux(want).Metric })
			g.Expect(got).To(ConsistOf(normalizeLinux(want)))
			kernel := kernelRoutesTo(g, want.Dst.String())
			g.Expect(kernel).To(HaveLen(tt.wantKernel))
			for _, kr := range kernel {
				if kr.Priority == normalizeLinux(want).Metric {
					wantProto := netlink.RouteProtocol(unix.RTPROT_STATIC)
					if want.Owned {
						wantProto = LinuxRouteProtocol
					}
					g.Expect(kr.Protocol).To(Equal(wantProto))
				}
			}

			settle(g)
			g.Expect(netlinkEvents(g, func() { g.Expect(h.EnsureRoute(ctx, want)).To(Succeed()) })).To(BeEmpty(), "a second EnsureRoute changes nothing")
		})
	}
}

func mustIPNet(s string) *net.IPNet {
	_, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	return n
}

func TestReconcileAndDeleteRoutes(t *testing.T) {
	p, a := netip.MustParsePrefix, netip.MustParseAddr
	g, h, l := routeSetup(t)
	ctx := t.Context()
	idx := l.Attrs().Index
	keep := []Route{
		{Dst: p("10.50.0.0/16"), Gateway: a("10.30.0.2"), LinkIndex: idx, Owned: true},
		{Dst: p("fd00:50::/64"), Gateway: a("fd00:30::2"), LinkIndex: idx, Metric: 1024, Owned: true},
	}
	stale := []Route{
		{Dst: p("10.51.0.0/16"), Gateway: a("10.30.0.2"), LinkIndex: idx, Owned: true},
		// Same destination as a kept route, another metric: a different route.
		{Dst: p("10.50.0.0/16"), Gateway: a("10.30.0.3"), LinkIndex: idx, Metric: 7, Owned: true},
		{Dst: p("fd00:51::/64"), LinkIndex: idx, Metric: 1024, Owned: true},
	}
	for _, r := range slices.Concat(keep, stale) {
		g.Expect(h.EnsureRoute(ctx, r)).To(Succeed())
	}
	// Routes that are not winnet's: one made by someone else, one made through EnsureRoute without the mark.
	foreign := netlink.Route{LinkIndex: idx, Dst: mustIPNet("10.52.0.0/16"), Gw: net.ParseIP("10.30.0.2"), Protocol: unix.RTPROT_BOOT}
	g.Expect(netlink.RouteAdd(&foreign)).To(Succeed())
	unmarked := Route{Dst: p("10.53.0.0/16"), Gateway: a("10.30.0.2"), LinkIndex: idx}
	g.Expect(h.EnsureRoute(ctx, unmarked)).To(Succeed())
	before, err := h.Routes(ctx, RouteFilter{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(before).To(HaveLen(len(keep) + len(stale) + 2))

	owned, err := h.Routes(ctx, RouteFilter{OwnedOnly: true})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(owned).To(ConsistOf(slices.Concat(keep, stale)))

	// The desired set as a reconciler writes it: no interface, IPv6 metric left at zero.
	desired := []Route{
		{Dst: p("10.50.0.0/16"), Gateway: a("10.30.0.2"), Owned: true},
		{Dst: p("fd00:50::/64"), Gateway: a("fd00:30::2"), Owned: true},
	}
	g.Expect(h.ReconcileRoutes(ctx, desired)).To(Succeed())
	after, err := h.Routes(ctx, RouteFilter{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(after).To(ConsistOf(slices.Concat(keep, []Route{
		{Dst: p("10.52.0.0/16"), Gateway: a("10.30.0.2"), LinkIndex: idx},
		unmarked,
	})))
	// The kernel's own routes of the addresses are untouched.
	g.Expect(kernelRoutesTo(g, "10.30.0.0/24")).To(HaveLen(1))
	settle(g)
	g.Expect(netlinkEvents(g, func() { g.Expect(h.ReconcileRoutes(ctx, desired)).To(Succeed()) })).To(BeEmpty())

	// Reconciling to nothing removes every owned route and still nothing else.
	g.Expect(h.ReconcileRoutes(ctx, nil)).To(Succeed())
	owned, err = h.Routes(ctx, RouteFilter{OwnedOnly: true})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(owned).To(BeEmpty())
	g.Expect(kernelRoutesTo(g, "10.52.0.0/16")).To(HaveLen(1))

	// DeleteRoute removes a route whatever its mark; deleting it again is a no-op.
	g.Expect(h.DeleteRoute(ctx, unmarked)).To(Succeed())
	g.Expect(kernelRoutesTo(g, "10.53.0.0/16")).To(BeEmpty())
	g.Expect(netlinkEvents(g, func() { g.Expect(h.DeleteRoute(ctx, unmarked)).To(Succeed()) })).To(BeEmpty())
	// A route that differs only in metric is not the route.
	g.Expect(h.DeleteRoute(ctx, Route{Dst: p("10.52.0.0/16"), Gateway: a("10.30.0.2"), Metric: 5})).To(Succeed())
	g.Expect(kernelRoutesTo(g, "10.52.0.0/16")).To(HaveLen(1))
}

func TestNeighbor(t *testing.T) {
	tests := []struct {
		name string
		ip   netip.Addr
		// wantPeerMAC: the MAC of the peer's veth end; otherwise the error must contain wantErr.
		wantPeerMAC bool
		wantErr     string
		// wantNotFound: the error wraps ErrNotFound.
		wantNotFound bool
	}{
		{name: "IPv4 peer in another namespace", ip: netip.MustParseAddr("10.70.0.2"), wantPeerMAC: true},
		{name: "IPv6 peer in another namespace", ip: netip.MustParseAddr("fd00:70::2"), wantPeerMAC: true},
		{name: "nobody answers", ip: netip.MustParseAddr("10.70.0.99"), wantErr: "resolving neighbour 10.70.0.99", wantNotFound: true},
		{name: "not on-link", ip: netip.MustParseAddr("10.99.0.1"), wantErr: "not on-link"},
		{name: "a local address", ip: netip.MustParseAddr("10.70.0.1"), wantErr: "local address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			enterNewNetNS(t)
			ctx := t.Context()
			peerNS, peer := newPeerNetNS(t)
			// The kernel sends neighbour solicitations it starts on its own from the link's
			// link-local address: have it usable at once, as on a host that has been up for a
			// while, instead of after a second of duplicate address detection.
			g.Expect(os.WriteFile("/proc/sys/net/ipv6/conf/default/accept_dad", []byte("0"), 0o644)).To(Succeed())
			l := addVeth(g, "eth0", "eth0p")
			pl, err := netlink.LinkByName("eth0p")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(netlink.LinkSetNsFd(pl, int(peerNS.Fd()))).To(Succeed())
			pl, err = peer.LinkByName("eth0p")
			g.Expect(err).NotTo(HaveOccurred())
			for link, addrs := range map[netlink.Link][]string{l: {"10.70.0.1/24", "fd00:70::1/64"}, pl: {"10.70.0.2/24", "fd00:70::2/64"}} {
				h := &netlink.Handle{}
				if link == pl {
					h = peer
				}
				for _, s := range addrs {
					addr, err := netlink.ParseAddr(s)
					g.Expect(err).NotTo(HaveOccurred())
					addr.Flags = unix.IFA_F_NODAD
					g.Expect(h.AddrAdd(link, addr)).To(Succeed())
				}
			}
			g.Expect(peer.LinkSetUp(pl)).To(Succeed())
			g.Expect(netlink.RouteAdd(&netlink.Route{Dst: mustIPNet("10.99.0.0/16"), Gw: net.ParseIP("10.70.0.2"), LinkIndex: l.Attrs().Index})).To(Succeed())
			// Nothing is known about the neighbour yet: Neighbor has to resolve it.
			neighs, err := netlink.NeighList(l.Attrs().Index, netlink.FAMILY_ALL)
			g.Expect(err).NotTo(HaveOccurred())
			for _, n := range neighs {
				g.Expect(n.IP.Equal(tt.ip.AsSlice())).To(BeFalse(), "the neighbour table already holds %s", tt.ip)
			}
			h := newHost(g, Options{NeighborTimeout: 1500 * time.Millisecond})

			start := time.Now()
			mac, err := h.Neighbor(ctx, tt.ip)
			if !tt.wantPeerMAC {
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
				g.Expect(errors.Is(err, ErrNotFound)).To(Equal(tt.wantNotFound), "error %v", err)
				g.Expect(time.Since(start)).To(BeNumerically("<", 3*time.Second), "the timeout bounds the wait")
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(mac).To(Equal(pl.Attrs().HardwareAddr))
			again, err := h.Neighbor(ctx, tt.ip)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(again).To(Equal(mac))
		})
	}
}

// moveSetup is a host whose uplink up0 holds the IP configuration, a stand-in for the management
// vNIC (br0) and an unrelated link (other0) with a route of its own.
func moveSetup(t *testing.T) (g *WithT, h Interface, up, br, other int) {
	g = NewWithT(t)
	enterNewNetNS(t)
	ctx := t.Context()
	upLink := addVeth(g, "up0", "up0p")
	brLink := addVeth(g, "br0", "br0p")
	otherLink := addVeth(g, "other0", "other0p")
	up, br, other = upLink.Attrs().Index, brLink.Attrs().Index, otherLink.Attrs().Index
	for link, addrs := range map[netlink.Link][]string{
		upLink:    {"10.80.0.5/24", "10.80.0.6/24", "fd00:80::5/64"},
		otherLink: {"10.90.0.5/24"},
	} {
		for _, s := range addrs {
			addr, err := netlink.ParseAddr(s)
			g.Expect(err).NotTo(HaveOccurred())
			addr.Flags = unix.IFA_F_NODAD
			g.Expect(netlink.AddrAdd(link, addr)).To(Succeed())
		}
	}
	// Routes as the host's installer, DHCP client and administrator left them.
	for _, r := range []netlink.Route{
		{LinkIndex: up, Dst: mustIPNet("0.0.0.0/0"), Gw: net.ParseIP("10.80.0.1"), Priority: 100, Protocol: unix.RTPROT_DHCP},
		{LinkIndex: up, Dst: mustIPNet("10.81.0.0/16"), Gw: net.ParseIP("10.80.0.254"), Protocol: unix.RTPROT_BOOT},
		{LinkIndex: up, Dst: mustIPNet("10.82.0.0/24"), Scope: netlink.SCOPE_LINK, Protocol: unix.RTPROT_BOOT},
		{LinkIndex: up, Dst: mustIPNet("fd00:81::/64"), Gw: net.ParseIP("fd00:80::1"), Protocol: unix.RTPROT_BOOT},
		{LinkIndex: other, Dst: mustIPNet("10.91.0.0/16"), Gw: net.ParseIP("10.90.0.1"), Protocol: unix.RTPROT_BOOT},
	} {
		g.Expect(netlink.RouteAdd(&r)).To(Succeed())
	}
	h = newHost(g, Options{})
	// And one of winnet's own, e.g. a remote Pod CIDR routed before the bridge existed.
	g.Expect(h.EnsureRoute(ctx, Route{Dst: netip.MustParsePrefix("10.83.0.0/16"), Gateway: netip.MustParseAddr("10.80.0.254"), LinkIndex: up, Owned: true})).To(Succeed())
	settle(g)
	return g, h, up, br, other
}

// TestNetNSPath acts on another namespace from the test's own thread, as the agent of a simulated
// node does: links, addresses and forwarding change there and nowhere else.
func TestNetNSPath(t *testing.T) {
	requireRoot(t)
	g := NewWithT(t)
	name := fmt.Sprintf("hostnet-test-%d", os.Getpid())
	g.Expect(hostcmd.Command("ip", "netns", "add", name).Run()).To(Succeed())
	t.Cleanup(func() { _ = hostcmd.Command("ip", "netns", "del", name).Run() })
	path := "/var/run/netns/" + name
	other, err := ns.GetNS(path)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = other.Close() })
	g.Expect(hostcmd.Command("ip", "-n", name, "link", "add", "nsveth0", "type", "veth", "peer", "name", "nsveth1").Run()).To(Succeed())

	h := newHost(g, Options{NetNSPath: path})
	ctx := context.Background()
	link, err := h.LinkByName(ctx, "nsveth0")
	g.Expect(err).NotTo(HaveOccurred())
	_, err = netlink.LinkByName("nsveth0")
	g.Expect(err).To(HaveOccurred(), "the link lives in the other namespace only")

	addr := netip.MustParsePrefix("10.77.0.1/24")
	g.Expect(h.EnsureAddress(ctx, link.Index, addr)).To(Succeed())
	g.Expect(h.Addresses(ctx, link.Index)).To(ContainElement(addr))
	g.Expect(h.EnsureForwarding(ctx, link.Index)).To(Succeed())
	var inside string
	g.Expect(other.Do(func(ns.NetNS) error {
		b, err := os.ReadFile("/proc/sys/net/ipv4/conf/nsveth0/forwarding")
		inside = strings.TrimSpace(string(b))
		return err
	})).To(Succeed())
	g.Expect(inside).To(Equal("1"))
}

// TestSetSwitchPort checks that the host stops answering on a switch port and answers again once
// it is a host interface again; setting it twice changes nothing.
func TestSetSwitchPort(t *testing.T) {
	requireRoot(t)
	g := NewWithT(t)
	name := fmt.Sprintf("hostnet-sp-%d", os.Getpid())
	peer := name + "-p"
	for _, ns := range []string{name, peer} {
		g.Expect(hostcmd.Command("ip", "netns", "add", ns).Run()).To(Succeed())
		t.Cleanup(func() { _ = hostcmd.Command("ip", "netns", "del", ns).Run() })
	}
	run := func(ns string, args ...string) error {
		return hostcmd.Command("ip", append([]string{"netns", "exec", ns}, args...)...).Run()
	}
	g.Expect(run(name, "ip", "link", "add", "name", "sp0", "type", "veth", "peer", "name", "sp1", "netns", peer)).To(Succeed())
	g.Expect(run(name, "ip", "addr", "add", "10.78.0.1/24", "dev", "sp0")).To(Succeed())
	g.Expect(run(name, "ip", "link", "set", "sp0", "up")).To(Succeed())
	g.Expect(run(peer, "ip", "addr", "add", "10.78.0.2/24", "dev", "sp1")).To(Succeed())
	g.Expect(run(peer, "ip", "link", "set", "sp1", "up")).To(Succeed())
	ping := func() error { return run(peer, "ping", "-c", "1", "-W", "1", "10.78.0.1") }
	g.Expect(ping()).To(Succeed())

	h := newHost(g, Options{NetNSPath: "/var/run/netns/" + name})
	ctx := context.Background()
	link, err := h.LinkByName(ctx, "sp0")
	g.Expect(err).NotTo(HaveOccurred())
	for range 2 {
		g.Expect(h.SetSwitchPort(ctx, link.Index, true)).To(Succeed())
	}
	g.Expect(ping()).NotTo(Succeed(), "the host must not answer on a switch port")
	for range 2 {
		g.Expect(h.SetSwitchPort(ctx, link.Index, false)).To(Succeed())
	}
	g.Expect(ping()).To(Succeed(), "the host answers again once the link is its own")
}
