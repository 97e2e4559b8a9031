//go:build linux

package hostnet

import (
	"context"
	"net"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/vishvananda/netlink"
)

// TestWatchAddressesOfLinks checks that WatchAddresses reports address changes and removed routes
// on the links it watches and leaves out those of other links (a Pod's vNIC coming and going):
// every Pod would otherwise wake a pass over the whole node.
func TestWatchAddressesOfLinks(t *testing.T) {
	g := NewWithT(t)
	netNS := enterNewNetNS(t)
	h := newHost(g, Options{NetNSPath: netNS.Path()})
	watched, other := addVeth(g, "watched0", "watched1"), addVeth(g, "other0", "other1")
	addr := func(l netlink.Link, cidr string) *netlink.Addr {
		a, err := netlink.ParseAddr(cidr)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(netlink.AddrAdd(l, a)).To(Succeed())
		return a
	}
	// Let the links' own link-local addresses and routes come before the watch starts: an IPv6 link-local
	// address comes after DAD, which took over 100 ms under load, and reported inside a window below
	// where nothing must be it failed the test (1 run in 5).
	settle(g)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	changed, err := h.WatchAddresses(ctx, func() []int { return []int{watched.Attrs().Index} })
	g.Expect(err).NotTo(HaveOccurred())

	// Another link's address and route come and go: nothing is reported.
	a := addr(other, "10.30.0.1/24")
	g.Expect(netlink.RouteAdd(&netlink.Route{LinkIndex: other.Attrs().Index, Dst: &net.IPNet{IP: net.IPv4(10, 31, 0, 0), Mask: net.CIDRMask(16, 32)}})).To(Succeed())
	g.Expect(netlink.AddrDel(other, a)).To(Succeed()) // removes the route too
	g.Consistently(changed).WithTimeout(300*time.Millisecond).ShouldNot(Receive(), "changes on a link not watched")

	// The watched link's address added, then a route of it removed: each is reported.
	addr(watched, "10.40.0.1/24")
	g.Eventually(changed).WithTimeout(5*time.Second).Should(Receive(), "an address added to the watched link")
	route := &netlink.Route{LinkIndex: watched.Attrs().Index, Dst: &net.IPNet{IP: net.IPv4(10, 41, 0, 0), Mask: net.CIDRMask(16, 32)}}
	g.Expect(netlink.RouteAdd(route)).To(Succeed())
	g.Consistently(changed).WithTimeout(200*time.Millisecond).ShouldNot(Receive(), "a route added is left out")
	g.Expect(netlink.RouteDel(route)).To(Succeed())
	g.Eventually(changed).WithTimeout(5*time.Second).Should(Receive(), "a route of the watched link removed")
}
