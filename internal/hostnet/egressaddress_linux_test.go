package hostnet

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/vishvananda/netlink"

	"github.com/winnet-io/winnet/test/hostcmd"
)

// TestEnsureSkipAsSourceAddress: an egress IP goes on the link as a host prefix, adds no route, is
// never the source the kernel picks for the host's own traffic (the node IP stays it, on and off the
// subnet), and goes with DeleteAddress; anything but a host prefix is refused.
func TestEnsureSkipAsSourceAddress(t *testing.T) {
	g, h, l := routeSetup(t)
	ctx := context.Background()
	idx := l.Attrs().Index
	g.Expect(netlink.RouteAdd(&netlink.Route{LinkIndex: idx, Gw: net.ParseIP("10.30.0.254")})).To(Succeed())
	routesBefore := kernelRoutesTo(g, "10.30.0.0/24")

	egressIP := netip.MustParsePrefix("10.30.0.200/32")
	g.Expect(h.EnsureSkipAsSourceAddress(ctx, idx, egressIP)).To(Succeed())
	g.Expect(h.EnsureSkipAsSourceAddress(ctx, idx, egressIP)).To(Succeed(), "ensure again changes nothing")
	g.Expect(h.Addresses(ctx, idx)).To(ContainElements(egressIP, netip.MustParsePrefix("10.30.0.1/24")))
	g.Expect(kernelRoutesTo(g, "10.30.0.0/24")).To(Equal(routesBefore), "no route added")
	for _, dst := range []string{"10.30.0.77", "203.0.113.9"} {
		routes, err := netlink.RouteGet(net.ParseIP(dst))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(routes).NotTo(BeEmpty())
		g.Expect(routes[0].Src.String()).To(Equal("10.30.0.1"), "the host's source towards %s", dst)
	}

	g.Expect(h.EnsureSkipAsSourceAddress(ctx, idx, netip.MustParsePrefix("10.30.0.201/24"))).To(MatchError(ContainSubstring("host prefix")))
	g.Expect(h.DeleteAddress(ctx, idx, egressIP)).To(Succeed())
	g.Expect(h.Addresses(ctx, idx)).NotTo(ContainElement(egressIP))
}

// TestEgressAddressAnnounced: a new egress IP is announced on its link (a gratuitous ARP), so that a
// host of the segment whose ARP entry still names the address's previous holder updates it at once;
// the kernel alone announces nothing (checked first with an ordinary address).
func TestEgressAddressAnnounced(t *testing.T) {
	requireRoot(t)
	g := NewWithT(t)
	name := fmt.Sprintf("hostnet-garp-%d", os.Getpid())
	peer := name + "-p"
	for _, ns := range []string{name, peer} {
		g.Expect(hostcmd.Command("ip", "netns", "add", ns).Run()).To(Succeed())
		t.Cleanup(func() { _ = hostcmd.Command("ip", "netns", "del", ns).Run() })
	}
	run := func(ns string, args ...string) (string, error) {
		out, err := hostcmd.Command("ip", append([]string{"netns", "exec", ns}, args...)...).CombinedOutput()
		return string(out), err
	}
	must := func(ns string, args ...string) string {
		out, err := run(ns, args...)
		g.Expect(err).NotTo(HaveOccurred(), "%v: %s", args, out)
		return out
	}
	must(name, "ip", "link", "add", "name", "ga0", "type", "veth", "peer", "name", "ga1", "netns", peer)
	must(name, "ip", "addr", "add", "10.79.0.1/24", "dev", "ga0")
	must(name, "ip", "link", "set", "ga0", "up")
	must(peer, "ip", "addr", "add", "10.79.0.2/24", "dev", "ga1")
	must(peer, "ip", "link", "set", "ga1", "up")
	// The peer remembers both addresses at a previous holder's MAC.
	const previous = "02:00:00:00:00:99"
	for _, ip := range []string{"10.79.0.150", "10.79.0.151"} {
		must(peer, "ip", "neigh", "replace", ip, "lladdr", previous, "dev", "ga1", "nud", "stale")
	}
	entry := func(ip string) string { return must(peer, "ip", "neigh", "show", ip, "dev", "ga1") }

	h := newHost(g, Options{NetNSPath: "/var/run/netns/" + name})
	ctx := context.Background()
	link, err := h.LinkByName(ctx, "ga0")
	g.Expect(err).NotTo(HaveOccurred())
	mac := link.MAC.String()

	g.Expect(h.EnsureAddress(ctx, link.Index, netip.MustParsePrefix("10.79.0.151/32"))).To(Succeed())
	g.Consistently(func() string { return entry("10.79.0.151") }).WithTimeout(time.Second).Should(ContainSubstring(previous),
		"the kernel announces nothing")

	g.Expect(h.EnsureSkipAsSourceAddress(ctx, link.Index, netip.MustParsePrefix("10.79.0.150/32"))).To(Succeed())
	g.Eventually(func() string { return entry("10.79.0.150") }).WithTimeout(5*time.Second).Should(ContainSubstring(mac),
		"the peer's entry names the new holder")
}
