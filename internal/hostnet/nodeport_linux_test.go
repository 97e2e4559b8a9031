//go:build linux

package hostnet

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/google/nftables"
	. "github.com/onsi/gomega"
	"github.com/vishvananda/netlink"
)

// TestReconcileNodePorts: a connection of the host to one of its addresses on a NodePort is
// DNATed to the target (here routed into a veth whose peer has no address, so it is never answered) while another
// port still reaches the host's own listener; reconciling to other ports moves the DNAT, and to
// none removes the table.
func TestReconcileNodePorts(t *testing.T) {
	netNS := enterNewNetNS(t)
	g := NewWithT(t)
	lo, err := netlink.LinkByName("lo")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(netlink.LinkSetUp(lo)).To(Succeed())
	for _, l := range []struct{ name, addr string }{{"node0", "10.9.0.1/24"}, {"gw0", "10.244.0.1/24"}} {
		link := addVeth(g, l.name, l.name+"p")
		addr, err := netlink.ParseAddr(l.addr)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(netlink.AddrAdd(link, addr)).To(Succeed())
	}
	gw, err := netlink.LinkByName("gw0")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(netlink.RouteAdd(&netlink.Route{LinkIndex: gw.Attrs().Index, Dst: mustIPNet("169.254.0.252/32"),
		Gw: net.ParseIP("169.254.0.253"), Flags: int(netlink.FLAG_ONLINK)})).To(Succeed())
	for _, port := range []string{"30080", "30081"} {
		l, err := net.Listen("tcp4", "10.9.0.1:"+port)
		g.Expect(err).NotTo(HaveOccurred())
		t.Cleanup(func() { _ = l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				_ = c.Close()
			}
		}()
	}
	reaches := func(port string) bool {
		c, err := net.DialTimeout("tcp4", "10.9.0.1:"+port, 300*time.Millisecond)
		if err != nil {
			return false
		}
		_ = c.Close()
		return true
	}

	ctx := context.Background()
	target := netip.MustParseAddr("169.254.0.252")
	n := NewNodePortNAT(Options{NetNSPath: netNS.Path()})
	g.Expect(reaches("30080")).To(BeTrue(), "before any NAT")
	g.Expect(n.ReconcileNodePorts(ctx, target, []NodePort{{Protocol: "TCP", Port: 30080}, {Protocol: "UDP", Port: 30081}})).To(Succeed())
	g.Expect(reaches("30080")).To(BeFalse(), "TCP 30080 is DNATed to %s", target)
	g.Expect(reaches("30081")).To(BeTrue(), "only UDP 30081 is DNATed")

	g.Expect(n.ReconcileNodePorts(ctx, target, []NodePort{{Protocol: "TCP", Port: 30081}})).To(Succeed())
	g.Expect(reaches("30080")).To(BeTrue(), "TCP 30080 is no longer DNATed")
	g.Expect(reaches("30081")).To(BeFalse(), "TCP 30081 is DNATed")

	g.Expect(n.ReconcileNodePorts(ctx, target, nil)).To(Succeed())
	g.Expect(reaches("30081")).To(BeTrue(), "nothing is DNATed")
	conn, err := nftables.New(nftables.WithNetNSFd(int(netNS.Fd())))
	g.Expect(err).NotTo(HaveOccurred())
	tables, err := conn.ListTables()
	g.Expect(err).NotTo(HaveOccurred())
	for _, tb := range tables {
		g.Expect(tb.Name).NotTo(Equal(NodePortNATName))
	}
	// Reconciling to nothing again is a no-op.
	g.Expect(n.ReconcileNodePorts(ctx, target, nil)).To(Succeed())
}
