//go:build linux

package simnode_test

import (
	"net/netip"
	"os"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/test/simnode"
)

var underlayCIDR = netip.MustParsePrefix("192.168.77.0/24")

// netnsNames lists the network namespaces as `ip netns list` prints them (first word of each line).
func netnsNames(t *testing.T) []string {
	t.Helper()
	out, err := simnode.Exec("", "ip", "netns", "list")
	if err != nil {
		t.Fatalf("%v", err)
	}
	var names []string
	for line := range strings.Lines(out) {
		if f := strings.Fields(line); len(f) > 0 {
			names = append(names, f[0])
		}
	}
	return names
}

func expectPings(t *testing.T, g *WithT, from string, dst netip.Addr) {
	t.Helper()
	sent, received, err := simnode.Ping(from, dst, 3)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sent).To(Equal(3), "ping %s from %s", dst, from)
	g.Expect(received).To(Equal(3), "ping %s from %s", dst, from)
}

func TestTwoNodesAndExternalHost(t *testing.T) {
	g := NewWithT(t)
	var created []string

	// The topology lives in a sub-test so that its t.Cleanup has run when the sub-test returns.
	t.Run("topology", func(t *testing.T) {
		g := NewWithT(t)
		u := simnode.NewUnderlay(t, underlayCIDR)
		n1 := u.AddNode(t, "node1", netip.MustParsePrefix("192.168.77.11/24"), simnode.NodeOptions{})
		n2 := u.AddNode(t, "node2", netip.MustParsePrefix("192.168.77.12/24"), simnode.NodeOptions{})
		ext := u.External()
		created = []string{u.NS, n1.NS, n2.NS, ext.NS}

		g.Expect(u.Gateway).To(Equal(netip.MustParseAddr("192.168.77.1")))
		g.Expect(u.ExternalIP).To(Equal(netip.MustParseAddr("192.168.77.254")))
		g.Expect(ext.IP).To(Equal(netip.MustParsePrefix("192.168.77.254/24")))

		// Unique, short names; all namespaces exist and are distinct.
		g.Expect(netnsNames(t)).To(ContainElements(created))
		for _, ns := range created {
			g.Expect(ns).To(HavePrefix(simnode.NSPrefix))
			g.Expect(strings.Count(strings.Join(created, " "), ns)).To(Equal(1))
		}
		for _, n := range []*simnode.Node{n1, n2} {
			g.Expect(n.NSPath).To(Equal("/run/netns/" + n.NS))
			_, err := os.Stat(n.NSPath)
			g.Expect(err).NotTo(HaveOccurred())
			// The uplink holds the node IP and the derived unicast MAC; the default route points at the gateway.
			g.Expect(n.Uplink).To(Equal("uplink0"))
			g.Expect(n.UplinkMAC[0]&1).To(BeZero(), "unicast MAC")
			link := n.MustExec(t, "ip", "-br", "link", "show", "dev", "uplink0")
			g.Expect(link).To(ContainSubstring(n.UplinkMAC.String()))
			g.Expect(link).To(ContainSubstring("UP"))
			g.Expect(n.MustExec(t, "ip", "-br", "addr", "show", "dev", "uplink0")).To(ContainSubstring(n.NodeIP.String()))
			g.Expect(n.MustExec(t, "ip", "route", "show", "default")).To(ContainSubstring("default via 192.168.77.1 dev uplink0"))
			g.Expect(n.MustExec(t, "ip", "-br", "link", "show", "dev", "lo")).To(ContainSubstring("UNKNOWN"))
			g.Expect(n.OVS).To(BeNil())
		}
		g.Expect(n1.UplinkMAC.String()).To(Equal("02:5e:c0:a8:4d:0b"))
		g.Expect(n1.UnderlayPort).NotTo(Equal(n2.UnderlayPort))

		// Each uplink's peer is a port of the underlay bridge, in the underlay namespace (not the root one).
		for _, n := range []*simnode.Node{n1, n2} {
			g.Expect(n.MustExec(t, "ip", "link", "show", "dev", "uplink0")).To(ContainSubstring("link-netns " + u.NS))
		}
		bridgePorts, err := simnode.Exec(u.NS, "ip", "-br", "link", "show", "master", "br0")
		g.Expect(err).NotTo(HaveOccurred())
		for _, p := range []string{n1.UnderlayPort, n2.UnderlayPort, ext.UnderlayPort} {
			g.Expect(bridgePorts).To(MatchRegexp(`(?m)^` + p + `@`))
		}

		expectPings(t, g, n1.NS, n2.NodeIP.Addr())
		expectPings(t, g, n1.NS, u.ExternalIP)
		expectPings(t, g, n2.NS, u.Gateway)
		expectPings(t, g, ext.NS, n1.NodeIP.Addr())
		expectPings(t, g, ext.NS, n2.NodeIP.Addr())

		// The helpers reach the namespaces: the external host's eth0 holds its IP.
		g.Expect(ext.MustExec(t, "ip", "-br", "addr", "show", "dev", "eth0")).To(ContainSubstring("192.168.77.254/24"))

		// Loss is reported as counts, not as an error: cut node2 off the underlay.
		_, err = simnode.Exec(u.NS, "ip", "link", "set", n2.UnderlayPort, "down")
		g.Expect(err).NotTo(HaveOccurred())
		sent, received, err := simnode.Ping(n1.NS, n2.NodeIP.Addr(), 2)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(sent).To(Equal(2))
		g.Expect(received).To(Equal(0))

		// A command failing inside a namespace is an error carrying its output.
		_, err = n1.Exec("ip", "link", "show", "dev", "nosuchdev")
		g.Expect(err).To(MatchError(ContainSubstring("nosuchdev")))
	})

	g.Expect(created).To(HaveLen(4))
	for _, ns := range created {
		g.Expect(netnsNames(t)).NotTo(ContainElement(ns), "namespace left after cleanup")
		_, err := os.Stat("/run/netns/" + ns)
		g.Expect(os.IsNotExist(err)).To(BeTrue(), "%s still in /run/netns", ns)
	}
}

func TestNodeWithOVS(t *testing.T) {
	g := NewWithT(t)
	var ns string
	t.Run("node", func(t *testing.T) {
		g := NewWithT(t)
		u := simnode.NewUnderlay(t, netip.MustParsePrefix("10.99.0.0/24"))
		n := u.AddNode(t, "node1", netip.MustParsePrefix("10.99.0.11/24"), simnode.NodeOptions{StartOVS: true})
		ns = n.NS
		g.Expect(n.OVS).NotTo(BeNil())
		g.Expect(n.OVS.NetNS()).To(Equal(n.NS))

		out := n.MustExec(t, "ovs-vsctl", "--db=unix:"+n.OVS.DBSocket(), "--timeout=10", "show")
		// `show` starts with the Open_vSwitch record's UUID (no ovs_version: the harness does not set one).
		g.Expect(out).To(MatchRegexp(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\n`))

		// ovs-vswitchd runs in the node namespace: a netdev bridge's LOCAL port appears there, not in the root one.
		n.OVS.AddBridge(t, "br-sim")
		g.Eventually(func() error {
			_, err := n.Exec("ip", "link", "show", "dev", "br-sim")
			return err
		}).WithTimeout(5e9).Should(Succeed())
		_, err := simnode.Exec("", "ip", "link", "show", "dev", "br-sim")
		g.Expect(err).To(HaveOccurred())
		g.Expect(n.MustExec(t, "ovs-vsctl", "--db=unix:"+n.OVS.DBSocket(), "--timeout=10", "show")).To(ContainSubstring(`Bridge br-sim`))

		// The uplink still works with OVS running beside it.
		expectPings(t, g, u.External().NS, n.NodeIP.Addr())
	})
	g.Expect(ns).NotTo(BeEmpty())
	g.Expect(netnsNames(t)).NotTo(ContainElement(ns))
}

func TestTwoUnderlaysSideBySide(t *testing.T) {
	// Two runs (or two tests in parallel) with the same CIDR and node names never collide.
	g := NewWithT(t)
	a := simnode.NewUnderlay(t, underlayCIDR)
	b := simnode.NewUnderlay(t, underlayCIDR)
	g.Expect(a.NS).NotTo(Equal(b.NS))
	na := a.AddNode(t, "node1", netip.MustParsePrefix("192.168.77.11/24"), simnode.NodeOptions{})
	nb := b.AddNode(t, "node1", netip.MustParsePrefix("192.168.77.11/24"), simnode.NodeOptions{})
	g.Expect(na.NS).NotTo(Equal(nb.NS))
	expectPings(t, g, na.NS, a.ExternalIP)
	expectPings(t, g, b.External().NS, nb.NodeIP.Addr())
	for _, ns := range []string{a.NS, b.NS, na.NS, nb.NS} {
		g.Expect(len(ns)).To(BeNumerically("<=", 32))
	}
}
