//go:build linux

package service

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/winnet-io/winnet/controllers/nodenetwork"
	"github.com/winnet-io/winnet/internal/hostnet"
	"github.com/winnet-io/winnet/internal/pipeline"
	"github.com/winnet-io/winnet/test/hostcmd"
)

// countingHost is the real host network (netlink in a namespace of the test's) counting how often
// the routes are listed.
type countingHost struct {
	hostnet.Routing
	listings int
}

func (h *countingHost) Routes(ctx context.Context, f hostnet.RouteFilter) ([]hostnet.Route, error) {
	h.listings++
	return h.Routing.Routes(ctx, f)
}

// gatewayNamespace makes a network namespace (named prefix and a random number, deleted at the test's
// end) with a gateway link gw0 holding the Pod subnet's first address, as a node's gateway does, and
// returns its name, the real host network in it and the gateway link.
func gatewayNamespace(t *testing.T, prefix string) (string, hostnet.Routing, hostnet.Link) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root (a network namespace with a veth): run it as root, as make test does")
	}
	ns := fmt.Sprintf("%s-%d", prefix, rand.IntN(1<<30))
	run := func(args ...string) {
		t.Helper()
		if out, err := hostcmd.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", args, err, out)
		}
	}
	run("ip", "netns", "add", ns)
	t.Cleanup(func() { _ = hostcmd.Command("ip", "netns", "del", ns).Run() })
	run("ip", "-n", ns, "link", "add", "gw0", "type", "veth", "peer", "name", "gw0p")
	run("ip", "-n", ns, "link", "set", "gw0", "up")
	run("ip", "-n", ns, "link", "set", "gw0p", "up")
	run("ip", "-n", ns, "addr", "add", "10.244.1.1/24", "dev", "gw0")
	real, err := hostnet.New(hostnet.Options{NetNSPath: "/run/netns/" + ns})
	if err != nil {
		t.Fatal(err)
	}
	gw, err := real.LinkByName(context.Background(), "gw0")
	if err != nil {
		t.Fatal(err)
	}
	return ns, real, gw
}

// serviceRoutes lists the destinations of the host's routes through pipeline.ServiceNextHop on the
// gateway, sorted.
func serviceRoutes(t *testing.T, h hostnet.Routing, gw hostnet.Link) []string {
	t.Helper()
	routes, err := h.Routes(context.Background(), hostnet.RouteFilter{LinkIndex: gw.Index})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, rt := range routes {
		if rt.Gateway == pipeline.ServiceNextHop {
			out = append(out, rt.Dst.String())
		}
	}
	slices.Sort(out)
	return out
}

// TestHostRoutesReadBackOncePerResync: the ClusterIP routes follow the Services on every pass, but
// the host's routes are listed only once per resync period (a pass among 10,000 Services must not
// list 10,000 routes); the read-back repairs a route deleted behind the agent's back.
func TestHostRoutesReadBackOncePerResync(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	_, real, gw := gatewayNamespace(t, "wn-svcroutes")
	host := &countingHost{Routing: real}
	rz := nodenetwork.Realized{GatewayLinkIndex: gw.Index}
	clock := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	r := &Reconciler{Net: host, Clock: clock}
	const resync = 10 * time.Second

	a, b, c := netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("10.96.0.11"), netip.MustParseAddr("10.96.0.12")
	routed := func() []string { t.Helper(); return serviceRoutes(t, real, gw) }
	route := func(ip netip.Addr) hostnet.Route {
		return hostnet.Route{Dst: netip.PrefixFrom(ip, 32), Gateway: pipeline.ServiceNextHop, LinkIndex: gw.Index, OnLink: true}
	}
	// A route through the next hop that no Service wants, left by an earlier agent.
	g.Expect(real.EnsureRoutes(ctx, []hostnet.Route{route(c)})).To(Succeed())

	g.Expect(r.syncHostRoutes(ctx, rz, []netip.Addr{a, b}, resync)).To(Succeed())
	g.Expect(routed()).To(Equal([]string{"10.96.0.10/32", "10.96.0.11/32"}), "the first pass reads the host back: the leftover goes")
	g.Expect(host.listings).To(Equal(1))

	g.Expect(real.DeleteRoute(ctx, route(a))).To(Succeed()) // behind the agent's back
	clock.SetTime(clock.Now().Add(resync / 2))
	g.Expect(r.syncHostRoutes(ctx, rz, []netip.Addr{a, b, c}, resync)).To(Succeed())
	g.Expect(routed()).To(Equal([]string{"10.96.0.11/32", "10.96.0.12/32"}), "within the period a pass adds what its Services added")
	g.Expect(host.listings).To(Equal(1), "within the period a pass does not list the host's routes")

	g.Expect(r.syncHostRoutes(ctx, rz, []netip.Addr{a, c}, resync)).To(Succeed())
	g.Expect(routed()).To(Equal([]string{"10.96.0.12/32"}), "and removes what its Services removed")
	g.Expect(host.listings).To(Equal(1))

	clock.SetTime(clock.Now().Add(resync))
	g.Expect(r.syncHostRoutes(ctx, rz, []netip.Addr{a, c}, resync)).To(Succeed())
	g.Expect(routed()).To(Equal([]string{"10.96.0.10/32", "10.96.0.12/32"}), "the read-back repairs the deleted route")
	g.Expect(host.listings).To(Equal(2))
}

// TestServiceCIDRRoutes: with the spec's Service CIDRs known, the host has one route per CIDR and
// none per ClusterIP inside it (10,000 Services are not 10,000 routes); a ClusterIP outside them
// still gets its own. An earlier agent's per-ClusterIP routes are replaced, the CIDR's route first;
// without Service CIDRs every ClusterIP is routed as before.
func TestServiceCIDRRoutes(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns, real, gw := gatewayNamespace(t, "wn-svccidr")
	routed := func() []string { t.Helper(); return serviceRoutes(t, real, gw) }
	a, b, outside := netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("10.100.3.7"), netip.MustParseAddr("10.200.0.5")
	clock := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	const resync = 10 * time.Second

	// An agent without Service CIDRs (or an earlier release) routed each ClusterIP.
	old := &Reconciler{Net: real, Clock: clock}
	g.Expect(old.syncHostRoutes(ctx, nodenetwork.Realized{GatewayLinkIndex: gw.Index}, []netip.Addr{a, b, outside}, resync)).To(Succeed())
	g.Expect(routed()).To(Equal([]string{"10.100.3.7/32", "10.200.0.5/32", "10.96.0.10/32"}))

	rz := nodenetwork.Realized{GatewayLinkIndex: gw.Index, ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")}}
	r := &Reconciler{Net: real, Clock: clock, clusterIPs: map[netip.Addr]int{}}
	g.Expect(r.syncHostRoutes(ctx, rz, []netip.Addr{a, b, outside}, resync)).To(Succeed())
	g.Expect(routed()).To(Equal([]string{"10.200.0.5/32", "10.96.0.0/12"}), "one route for the CIDR, one for the ClusterIP outside it")

	// Services come and go inside the CIDR: no route changes; outside it, its route follows.
	for _, ip := range []netip.Addr{a, b, outside} {
		r.clusterIPs[ip] = 1
	}
	c, outside2 := netip.MustParseAddr("10.96.5.5"), netip.MustParseAddr("10.201.0.9")
	g.Expect(r.routeClusterIP(ctx, rz, netip.Addr{}, c)).To(Succeed())
	g.Expect(r.routeClusterIP(ctx, rz, a, netip.Addr{})).To(Succeed())
	g.Expect(r.routeClusterIP(ctx, rz, outside, outside2)).To(Succeed())
	g.Expect(routed()).To(Equal([]string{"10.201.0.9/32", "10.96.0.0/12"}))

	// The host reaches a ClusterIP through the CIDR's route, into the gateway.
	out, err := hostcmd.Command("ip", "-n", ns, "route", "get", c.String()).CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "%s", out)
	g.Expect(string(out)).To(ContainSubstring("via 169.254.0.253 dev gw0"))

	// The spec loses its Service CIDRs: every ClusterIP is routed again, the CIDR's route goes.
	clock.SetTime(clock.Now().Add(resync))
	g.Expect(r.syncHostRoutes(ctx, nodenetwork.Realized{GatewayLinkIndex: gw.Index}, []netip.Addr{b, c, outside2}, resync)).To(Succeed())
	g.Expect(routed()).To(Equal([]string{"10.100.3.7/32", "10.201.0.9/32", "10.96.5.5/32"}))
}
