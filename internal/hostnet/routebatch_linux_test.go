//go:build linux

package hostnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/winnet-io/winnet/test/hostcmd"
)

// namedNetNS creates a network namespace under /var/run/netns, as a simulated node has, holding
// the veth eth0 (10.30.0.1/24, fd00:30::1/64, up) and returns its path and a netlink handle in it.
func namedNetNS(tb testing.TB) (string, *netlink.Handle) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Fatalf("the hostnet tests need root to create network namespaces and routes")
	}
	name := fmt.Sprintf("hostnet-batch-%d-%d", os.Getpid(), time.Now().UnixNano())
	run := func(args ...string) {
		tb.Helper()
		if out, err := hostcmd.Command("ip", args...).CombinedOutput(); err != nil {
			tb.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	run("netns", "add", name)
	tb.Cleanup(func() { _ = hostcmd.Command("ip", "netns", "del", name).Run() })
	run("-n", name, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0p")
	run("-n", name, "link", "set", "eth0", "up")
	run("-n", name, "link", "set", "eth0p", "up")
	run("-n", name, "addr", "add", "10.30.0.1/24", "dev", "eth0")
	run("-n", name, "addr", "add", "fd00:30::1/64", "dev", "eth0", "nodad")
	path := "/var/run/netns/" + name
	target, err := netns.GetFromPath(path)
	if err != nil {
		tb.Fatalf("opening %s: %v", path, err)
	}
	defer target.Close()
	h, err := netlink.NewHandleAt(target)
	if err != nil {
		tb.Fatalf("opening netlink in %s: %v", path, err)
	}
	tb.Cleanup(h.Close)
	return path, h
}

// manyRoutes returns n distinct routes through link, varied as the reconcilers make them: owned
// routes to remote Pod subnets via an on-link gateway outside the link's subnet, and every few
// routes one via a gateway of the subnet, one without a gateway, and IPv6 ones, with and
// without a metric.
func manyRoutes(n, link int) []Route {
	routes := make([]Route, n)
	for i := range routes {
		hi, lo := byte(i>>8), byte(i)
		r := Route{
			Dst:       netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 128 + hi, lo, 0}), 24),
			Gateway:   netip.AddrFrom4([4]byte{100, 64 + hi, lo, 1}),
			LinkIndex: link,
			Owned:     true,
			OnLink:    true,
		}
		switch i % 7 {
		case 1:
			r.Gateway, r.OnLink, r.Metric = netip.MustParseAddr("10.30.0.2"), false, 100
		case 2:
			r.Gateway, r.OnLink, r.Owned = netip.Addr{}, false, false
		case 3:
			r.Dst = netip.PrefixFrom(netip.AddrFrom16([16]byte{0xfd, 0x01, 0, hi, 0, lo}), 64)
			r.Gateway, r.OnLink = netip.MustParseAddr("fd00:30::2"), false
		case 4:
			r.Dst = netip.PrefixFrom(netip.AddrFrom16([16]byte{0xfd, 0x02, 0, hi, 0, lo}), 64)
			r.Gateway, r.Metric = netip.Addr{}, 300
		}
		routes[i] = r
	}
	return routes
}

// wantKernelRoute is the kernel's view of r as EnsureRoutes must install it.
func wantKernelRoute(r Route) netlink.Route {
	r = normalizeLinux(r)
	k := netlink.Route{
		Dst: toIPNet(r.Dst), LinkIndex: r.LinkIndex, Priority: r.Metric, Table: unix.RT_TABLE_MAIN,
		Type: unix.RTN_UNICAST, Protocol: unix.RTPROT_STATIC, Scope: netlink.SCOPE_UNIVERSE,
	}
	if r.Owned {
		k.Protocol = LinuxRouteProtocol
	}
	if r.Gateway.IsValid() {
		k.Gw = r.Gateway.AsSlice()
		if r.OnLink {
			k.Flags = int(netlink.FLAG_ONLINK)
		}
	} else if r.Dst.Addr().Is4() {
		// IPv6 has no route scopes: the kernel reports every IPv6 route as universe.
		k.Scope = netlink.SCOPE_LINK
	}
	return k
}

// sortedStrings prints routes and sorts them: comparing thousands of routes with ConsistOf
// takes minutes.
func sortedStrings[T any](rs []T) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = fmt.Sprintf("%+v", r)
	}
	slices.Sort(out)
	return out
}

// kernelRouteKey is the part of a kernel route EnsureRoutes sets, printable for comparison.
func kernelRouteKey(k netlink.Route) string {
	return fmt.Sprintf("%s gw=%s dev=%d metric=%d table=%d type=%d proto=%d scope=%d onlink=%t",
		k.Dst, net.IP(k.Gw), k.LinkIndex, k.Priority, k.Table, k.Type, k.Protocol, k.Scope, k.Flags&int(netlink.FLAG_ONLINK) != 0)
}

// TestEnsureRoutesBatched installs thousands of routes in another namespace, as a simulated node's
// agent does, and checks every attribute of every route in the kernel, that a second call sends
// nothing, that only missing routes are sent, and that ReconcileRoutes deletes exactly the stale
// ones.
func TestEnsureRoutesBatched(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	path, nlh := namedNetNS(t)
	hi, err := New(Options{NetNSPath: path})
	g.Expect(err).NotTo(HaveOccurred())
	h := hi.(*netlinkHost)
	link, err := h.LinkByName(ctx, "eth0")
	g.Expect(err).NotTo(HaveOccurred())
	routes := manyRoutes(3000, link.Index)

	g.Expect(h.EnsureRoutes(ctx, routes)).To(Succeed())
	g.Expect(h.routeMessages.Load()).To(BeEquivalentTo(len(routes)))

	want := make([]Route, len(routes))
	wantKernel := make([]string, len(routes))
	for i, r := range routes {
		want[i] = normalizeLinux(r)
		want[i].OnLink = false // Routes does not report it; the kernel check below does
		wantKernel[i] = kernelRouteKey(wantKernelRoute(r))
	}
	got, err := h.Routes(ctx, RouteFilter{LinkIndex: link.Index})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sortedStrings(got)).To(Equal(sortedStrings(want)))
	raw, err := nlh.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	g.Expect(err).NotTo(HaveOccurred())
	var gotKernel []string
	for _, k := range raw {
		if k.Protocol != unix.RTPROT_KERNEL && k.Dst != nil && !k.Dst.IP.IsLinkLocalUnicast() && !k.Dst.IP.IsMulticast() {
			gotKernel = append(gotKernel, kernelRouteKey(k))
		}
	}
	g.Expect(sortedStrings(gotKernel)).To(Equal(sortedStrings(wantKernel)))
	// iproute2 sees them too: owned ones with winnet's protocol number.
	out, err := hostcmd.Command("ip", "-n", strings.TrimPrefix(path, "/var/run/netns/"), "route", "show", "proto", "241").Output()
	g.Expect(err).NotTo(HaveOccurred())
	out6, err := hostcmd.Command("ip", "-6", "-n", strings.TrimPrefix(path, "/var/run/netns/"), "route", "show", "proto", "241").Output()
	g.Expect(err).NotTo(HaveOccurred())
	owned := len(slices.DeleteFunc(slices.Clone(routes), func(r Route) bool { return !r.Owned }))
	g.Expect(strings.Count(string(out)+string(out6), "\n")).To(Equal(owned))

	sent := h.routeMessages.Load()
	g.Expect(h.EnsureRoutes(ctx, routes)).To(Succeed())
	g.Expect(h.routeMessages.Load()).To(Equal(sent), "a second EnsureRoutes sends nothing")

	// A few routes are looked up one by one rather than by a listing of the 3,000 (a Node joining
	// a large cluster adds one): present ones (a metric, a route not winnet's, IPv6 with and without
	// a gateway) send nothing, a missing one is sent, and the table is not listed for them.
	dumps := h.routeDumps.Load()
	g.Expect(h.EnsureRoutes(ctx, routes[8:12])).To(Succeed())
	g.Expect(h.routeMessages.Load()).To(Equal(sent), "present routes looked up")
	gone := wantKernelRoute(routes[10])
	g.Expect(nlh.RouteDel(&gone)).To(Succeed())
	g.Expect(h.EnsureRoute(ctx, routes[10])).To(Succeed())
	g.Expect(h.routeMessages.Load()-sent).To(BeEquivalentTo(1), "the missing route sent")
	g.Expect(h.routeDumps.Load()).To(Equal(dumps), "no listing for a few routes")
	// Another route to the same prefix may hide ours: the table is listed then.
	other := wantKernelRoute(routes[12])
	other.Gw = net.ParseIP("100.64.98.98")
	g.Expect(nlh.RouteReplace(&other)).To(Succeed())
	g.Expect(h.EnsureRoute(ctx, routes[12])).To(Succeed())
	g.Expect(h.routeMessages.Load()-sent).To(BeEquivalentTo(2), "the replaced route sent again")
	g.Expect(h.routeDumps.Load()).To(Equal(dumps+1), "a listing for an inconclusive lookup")
	got, err = h.Routes(ctx, RouteFilter{LinkIndex: link.Index})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sortedStrings(got)).To(Equal(sortedStrings(want)))
	sent = h.routeMessages.Load()

	// Routes deleted behind winnet's back, and one with a wrong gateway, are the only ones sent again.
	for _, r := range routes[:5] {
		k := wantKernelRoute(r)
		g.Expect(nlh.RouteDel(&k)).To(Succeed())
	}
	wrong := wantKernelRoute(routes[7])
	wrong.Gw = net.ParseIP("100.64.99.99")
	g.Expect(nlh.RouteReplace(&wrong)).To(Succeed())
	g.Expect(h.EnsureRoutes(ctx, routes)).To(Succeed())
	g.Expect(h.routeMessages.Load() - sent).To(BeEquivalentTo(6))
	got, err = h.Routes(ctx, RouteFilter{LinkIndex: link.Index})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sortedStrings(got)).To(Equal(sortedStrings(want)))

	// Reconciling to the first half, as a reconciler writes it (no interface, IPv6 metric left at
	// zero), deletes exactly the owned routes of the second half, in batches.
	var desired, wantAfter []Route
	stale := 0
	for i, r := range routes {
		switch {
		case i < len(routes)/2:
			d := r
			d.LinkIndex, d.OnLink = 0, false
			desired = append(desired, d)
			wantAfter = append(wantAfter, want[i])
		case !r.Owned:
			wantAfter = append(wantAfter, want[i])
		default:
			stale++
		}
	}
	sent = h.routeMessages.Load()
	g.Expect(h.ReconcileRoutes(ctx, desired)).To(Succeed())
	g.Expect(h.routeMessages.Load() - sent).To(BeEquivalentTo(stale))
	got, err = h.Routes(ctx, RouteFilter{LinkIndex: link.Index})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sortedStrings(got)).To(Equal(sortedStrings(wantAfter)))
	sent = h.routeMessages.Load()
	g.Expect(h.ReconcileRoutes(ctx, desired)).To(Succeed())
	g.Expect(h.routeMessages.Load()).To(Equal(sent), "a second ReconcileRoutes sends nothing")
}

// TestEnsureRoutesRefused checks that routes the kernel refuses in the middle of batches are
// each named in the error, and that every other route of their batches is installed.
func TestEnsureRoutesRefused(t *testing.T) {
	g, hi, l := routeSetup(t)
	ctx := t.Context()
	h := hi.(*netlinkHost)
	routes := manyRoutes(400, l.Attrs().Index)
	noLink := routes[150]
	noLink.LinkIndex = 9999
	unreachable := routes[260]
	unreachable.Gateway, unreachable.OnLink = netip.MustParseAddr("192.0.2.1"), false
	routes[150], routes[260] = noLink, unreachable

	err := h.EnsureRoutes(ctx, routes)
	g.Expect(err).To(HaveOccurred())
	g.Expect(errors.Is(err, unix.ENODEV)).To(BeTrue(), "error %v wraps ENODEV", err)
	g.Expect(errors.Is(err, unix.ENETUNREACH)).To(BeTrue(), "error %v wraps ENETUNREACH", err)
	g.Expect(strings.Split(err.Error(), "\n")).To(ConsistOf(
		fmt.Sprintf("adding route %s: %s", normalizeLinux(noLink), unix.ENODEV),
		fmt.Sprintf("adding route %s: %s", normalizeLinux(unreachable), unix.ENETUNREACH),
	))
	g.Expect(h.routeMessages.Load()).To(BeEquivalentTo(len(routes)))

	installed := slices.Delete(slices.Clone(routes), 260, 261)
	installed = slices.Delete(installed, 150, 151)
	want := make([]Route, len(installed))
	for i, r := range installed {
		want[i] = normalizeLinux(r)
		want[i].OnLink = false
	}
	got, err := h.Routes(ctx, RouteFilter{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sortedStrings(got)).To(Equal(sortedStrings(want)))

	// A cancelled context stops before sending anything.
	g.Expect(h.ReconcileRoutes(ctx, nil)).To(Succeed())
	sent := h.routeMessages.Load()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	g.Expect(h.EnsureRoutes(cancelled, installed)).To(MatchError(context.Canceled))
	g.Expect(h.routeMessages.Load()).To(Equal(sent))
}

// replaceOneByOne installs routes with one RouteReplace request each, as EnsureRoutes did before
// it batched them: the reference of BenchmarkEnsureRoutes5000.
func replaceOneByOne(h *netlink.Handle, routes []Route) error {
	for _, r := range routes {
		k := wantKernelRoute(r)
		if err := h.RouteReplace(&k); err != nil {
			return fmt.Errorf("adding route %s: %w", r, err)
		}
	}
	return nil
}

// remoteNodeRoutes returns n owned routes through link as a node's agent installs them in tunnel
// mode: one remote Pod subnet each, via that node's gateway, on-link.
func remoteNodeRoutes(n, link int) []Route {
	routes := make([]Route, n)
	for i := range routes {
		hi, lo := byte(i>>8), byte(i)
		routes[i] = Route{
			Dst:       netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 128 + hi, lo, 0}), 24),
			Gateway:   netip.AddrFrom4([4]byte{10, 128 + hi, lo, 1}),
			LinkIndex: link,
			Owned:     true,
			OnLink:    true,
		}
	}
	return routes
}

// BenchmarkEnsureRoutes5000 installs 5,000 remote-node routes in a fresh namespace's main table
// with EnsureRoutes, and with one RouteReplace per route as the reference, in the same run; it
// reports both times per 5,000 routes and their ratio (speedup). "tunnel" are the agent's
// routes, each via its own gateway; "mixed" are manyRoutes, with fewer distinct gateways (the
// kernel's fib_info hash leaves the gateway out, so each distinct gateway costs a walk of all
// the others).
func BenchmarkEnsureRoutes5000(b *testing.B) {
	for _, shape := range []struct {
		name   string
		routes func(n, link int) []Route
	}{{"tunnel", remoteNodeRoutes}, {"mixed", manyRoutes}} {
		b.Run(shape.name, func(b *testing.B) { benchmarkEnsureRoutes(b, shape.routes(5000, 0)) })
	}
}

func benchmarkEnsureRoutes(b *testing.B, routes []Route) {
	hi, link, nlh, path := benchHost(b)
	for i := range routes {
		routes[i].LinkIndex = link.Index
	}
	flush := func() {
		b.StopTimer()
		defer b.StartTimer()
		for _, family := range []string{"-4", "-6"} {
			for _, proto := range []string{"241", "static"} {
				out, err := hostcmd.Command("ip", family, "-n", strings.TrimPrefix(path, "/var/run/netns/"), "route", "flush", "proto", proto).CombinedOutput()
				if err != nil {
					b.Fatalf("flushing routes: %v: %s", err, out)
				}
			}
		}
	}
	var batched, oneByOne time.Duration
	for b.Loop() {
		flush()
		start := time.Now()
		if err := hi.EnsureRoutes(b.Context(), routes); err != nil {
			b.Fatal(err)
		}
		batched += time.Since(start)
		flush()
		start = time.Now()
		if err := replaceOneByOne(nlh, routes); err != nil {
			b.Fatal(err)
		}
		oneByOne += time.Since(start)
	}
	b.ReportMetric(float64(batched.Milliseconds())/float64(b.N), "batched-ms/op")
	b.ReportMetric(float64(oneByOne.Milliseconds())/float64(b.N), "per-route-ms/op")
	b.ReportMetric(float64(oneByOne)/float64(batched), "speedup")
}

// benchHost is a host on a fresh network namespace, its link eth0, a netlink handle in the
// namespace and the namespace's path.
func benchHost(b *testing.B) (Interface, Link, *netlink.Handle, string) {
	path, nlh := namedNetNS(b)
	hi, err := New(Options{NetNSPath: path})
	if err != nil {
		b.Fatal(err)
	}
	link, err := hi.LinkByName(b.Context(), "eth0")
	if err != nil {
		b.Fatal(err)
	}
	return hi, link, nlh, path
}

// BenchmarkReconcileRoutes5000 deletes 5,000 stale tunnel routes with ReconcileRoutes, and with
// the generic reconcileRoutes (one DeleteRoute, so one listing and one request, per route) as the
// reference, in the same run; it reports both times and their ratio (speedup).
func BenchmarkReconcileRoutes5000(b *testing.B) {
	hi, link, _, _ := benchHost(b)
	routes := remoteNodeRoutes(5000, link.Index)
	install := func() {
		b.StopTimer()
		defer b.StartTimer()
		if err := hi.EnsureRoutes(b.Context(), routes); err != nil {
			b.Fatal(err)
		}
	}
	var batched, oneByOne time.Duration
	for b.Loop() {
		install()
		start := time.Now()
		if err := hi.ReconcileRoutes(b.Context(), nil); err != nil {
			b.Fatal(err)
		}
		batched += time.Since(start)
		install()
		start = time.Now()
		if err := reconcileRoutes(b.Context(), hi, nil, normalizeLinux); err != nil {
			b.Fatal(err)
		}
		oneByOne += time.Since(start)
	}
	b.ReportMetric(float64(batched.Milliseconds())/float64(b.N), "batched-ms/op")
	b.ReportMetric(float64(oneByOne.Milliseconds())/float64(b.N), "per-route-ms/op")
	b.ReportMetric(float64(oneByOne)/float64(batched), "speedup")
}

// BenchmarkRoutes5000 lists 5,000 owned routes with Routes (the routes decoded one at a time as the
// dump is read) and, as the reference in the same run, as Routes listed them before (netlink's
// RouteListFiltered: every route kept as a netlink route in a growing slice, then converted); it
// reports the bytes each allocates per listing and their ratio. The agent's drift checks list its
// routes every ResyncPeriod: at 5,000 Nodes the listing was the largest allocation of an idle
// agent (bench-scale, issue 64).
func BenchmarkRoutes5000(b *testing.B) {
	hi, link, nlh, _ := benchHost(b)
	if err := hi.EnsureRoutes(b.Context(), remoteNodeRoutes(5000, link.Index)); err != nil {
		b.Fatal(err)
	}
	filter := &netlink.Route{Table: unix.RT_TABLE_MAIN, Protocol: LinuxRouteProtocol}
	reference := func() ([]Route, error) {
		raw, err := nlh.RouteListFiltered(netlink.FAMILY_ALL, filter, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
		if err != nil {
			return nil, err
		}
		krs := make([]kernelRoute, 0, len(raw))
		for _, r := range raw {
			if route, ok := fromKernel(r); ok && r.Type == unix.RTN_UNICAST {
				krs = append(krs, kernelRoute{Route: route, raw: r})
			}
		}
		out := make([]Route, len(krs))
		for i, kr := range krs {
			out[i] = kr.Route
		}
		return out, nil
	}
	allocated := func(list func() ([]Route, error)) uint64 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		got, err := list()
		runtime.ReadMemStats(&after)
		if err != nil {
			b.Fatal(err)
		}
		if len(got) != 5000 {
			b.Fatalf("listed %d routes, want 5000", len(got))
		}
		return after.TotalAlloc - before.TotalAlloc
	}
	var iterated, sliced uint64
	for b.Loop() {
		iterated += allocated(func() ([]Route, error) { return hi.Routes(b.Context(), RouteFilter{OwnedOnly: true}) })
		sliced += allocated(reference)
	}
	b.ReportMetric(float64(iterated)/float64(b.N)/(1<<20), "routes-MB/op")
	b.ReportMetric(float64(sliced)/float64(b.N)/(1<<20), "reference-MB/op")
	b.ReportMetric(float64(sliced)/float64(iterated), "ratio")
}
