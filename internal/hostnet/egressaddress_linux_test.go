package hostnet

import (
	"context"
	"net"
	"net/netip"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/vishvananda/netlink"
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
