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

// TestHostRoutesReadBackOncePerResync: the ClusterIP routes follow the Services on every pass, but
// the host's routes are listed only once per resync period (a pass among 10,000 Services must not
// list 10,000 routes); the read-back repairs a route deleted behind the agent's back.
func TestHostRoutesReadBackOncePerResync(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root (a network namespace with a veth): run it as root, as make test does")
	}
	g := NewWithT(t)
	ctx := context.Background()
	ns := fmt.Sprintf("wn-svcroutes-%d", rand.IntN(1<<30))
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
	run("ip", "-n", ns, "addr", "add", "10.244.1.1/24", "dev", "gw0") // the gateway holds the Pod subnet's first address
	real, err := hostnet.New(hostnet.Options{NetNSPath: "/run/netns/" + ns})
	g.Expect(err).NotTo(HaveOccurred())
	host := &countingHost{Routing: real}
	gw, err := real.LinkByName(ctx, "gw0")
	g.Expect(err).NotTo(HaveOccurred())
	rz := nodenetwork.Realized{GatewayLinkIndex: gw.Index}
	clock := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	r := &Reconciler{Net: host, Clock: clock}
	const resync = 10 * time.Second

	a, b, c := netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("10.96.0.11"), netip.MustParseAddr("10.96.0.12")
	routed := func() []string {
		t.Helper()
		routes, err := real.Routes(ctx, hostnet.RouteFilter{LinkIndex: gw.Index})
		g.Expect(err).NotTo(HaveOccurred())
		var out []string
		for _, rt := range routes {
			if rt.Gateway == pipeline.ServiceNextHop {
				out = append(out, rt.Dst.String())
			}
		}
		slices.Sort(out)
		return out
	}
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
