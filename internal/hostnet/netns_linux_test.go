//go:build linux

package hostnet

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	. "github.com/onsi/gomega"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// requireRoot fails the test, loudly, when it cannot create network namespaces.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("the hostnet tests need root (CAP_SYS_ADMIN to create network namespaces, CAP_NET_ADMIN for veth pairs, " +
			"addresses and routes); run them as root, e.g. `sudo -E env GOTOOLCHAIN=local go test ./internal/hostnet/`")
	}
}

// enterNewNetNS creates a network namespace for the test and moves the test goroutine's OS thread
// into it for the rest of the test. The thread stays locked and is never unlocked, so the Go
// runtime discards it when the test goroutine ends instead of reusing it in the wrong namespace.
// Subtests run on goroutines of their own: each must call enterNewNetNS itself.
func enterNewNetNS(t *testing.T) ns.NetNS {
	t.Helper()
	requireRoot(t)
	netNS, err := ns.TempNetNS()
	if err != nil {
		t.Fatalf("creating a network namespace: %v", err)
	}
	t.Cleanup(func() { _ = netNS.Close() })
	runtime.LockOSThread()
	if err := netNS.Set(); err != nil {
		t.Fatalf("entering the test network namespace: %v", err)
	}
	cur, err := ns.GetCurrentNS()
	if err != nil {
		t.Fatalf("opening the current network namespace: %v", err)
	}
	defer cur.Close()
	if !netns.NsHandle(int(cur.Fd())).Equal(netns.NsHandle(int(netNS.Fd()))) {
		t.Fatalf("the test thread is not in the test network namespace")
	}
	return netNS
}

// newPeerNetNS creates a second network namespace and a netlink handle acting in it, for the far
// end of a veth pair.
func newPeerNetNS(t *testing.T) (ns.NetNS, *netlink.Handle) {
	t.Helper()
	peerNS, err := ns.TempNetNS()
	if err != nil {
		t.Fatalf("creating the peer network namespace: %v", err)
	}
	t.Cleanup(func() { _ = peerNS.Close() })
	h, err := netlink.NewHandleAt(netns.NsHandle(int(peerNS.Fd())))
	if err != nil {
		t.Fatalf("opening netlink in the peer network namespace: %v", err)
	}
	t.Cleanup(h.Close)
	return peerNS, h
}

// newHost returns the netlink Interface for the current (test) namespace.
func newHost(g *WithT, opts Options) Interface {
	h, err := New(opts)
	g.Expect(err).NotTo(HaveOccurred())
	return h
}

// addVeth creates a veth pair in the current namespace, both ends up, and returns the netlink
// view of the first end.
func addVeth(g *WithT, name, peer string) netlink.Link {
	g.Expect(netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: peer})).To(Succeed())
	for _, n := range []string{name, peer} {
		l, err := netlink.LinkByName(n)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(netlink.LinkSetUp(l)).To(Succeed())
	}
	l, err := netlink.LinkByName(name)
	g.Expect(err).NotTo(HaveOccurred())
	return l
}

// netlinkEvents returns the rtnetlink link, address and route notifications of the current
// namespace caused by f: the kernel queues a notification before it acknowledges the request, so
// anything f changed is in the subscription sockets when f returns.
func netlinkEvents(g *WithT, f func()) []string {
	done := make(chan struct{})
	defer close(done)
	links := make(chan netlink.LinkUpdate, 128)
	addrs := make(chan netlink.AddrUpdate, 128)
	routes := make(chan netlink.RouteUpdate, 128)
	g.Expect(netlink.LinkSubscribe(links, done)).To(Succeed())
	g.Expect(netlink.AddrSubscribe(addrs, done)).To(Succeed())
	g.Expect(netlink.RouteSubscribe(routes, done)).To(Succeed())
	f()
	var events []string
	quiet := time.NewTimer(150 * time.Millisecond)
	defer quiet.Stop()
	for {
		select {
		case u := <-links:
			events = append(events, fmt.Sprintf("link %d %s flags=%s mtu=%d mac=%s", u.Header.Type, u.Attrs().Name, u.Attrs().Flags, u.Attrs().MTU, u.Attrs().HardwareAddr))
		case u := <-addrs:
			events = append(events, fmt.Sprintf("addr new=%t %s link %d", u.NewAddr, u.LinkAddress.String(), u.LinkIndex))
		case u := <-routes:
			events = append(events, fmt.Sprintf("route %d %s", u.Type, u.Route))
		case <-quiet.C:
			return events
		}
	}
}

// settle waits until the kernel has finished reacting to the test's setup on its own: every link
// that is up has its carrier, no address still waits for its link to be ready or for duplicate
// address detection to end, and nothing has
// changed for a while. Changes measured afterwards are the caller's.
func settle(g *WithT) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if pending := unsettled(g); pending != "" {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if len(netlinkEvents(g, func() {})) == 0 {
			return
		}
	}
	g.Expect(unsettled(g)).To(BeEmpty(), "the network namespace does not settle")
	g.Expect(netlinkEvents(g, func() {})).To(BeEmpty(), "the network namespace does not settle")
}

func unsettled(g *WithT) string {
	links, err := netlink.LinkList()
	g.Expect(err).NotTo(HaveOccurred())
	up := map[int]bool{}
	byIndex := map[int]*netlink.LinkAttrs{}
	for _, l := range links {
		up[l.Attrs().Index] = l.Attrs().Flags&net.FlagUp != 0
		byIndex[l.Attrs().Index] = l.Attrs()
	}
	for _, l := range links {
		// A veth has its carrier once both ends are up.
		a := l.Attrs()
		if _, veth := l.(*netlink.Veth); veth && up[a.Index] && up[a.ParentIndex] && a.Flags&net.FlagRunning == 0 {
			return a.Name + " has no carrier yet"
		}
	}
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V6)
	g.Expect(err).NotTo(HaveOccurred())
	for _, a := range addrs {
		if a.Flags&unix.IFA_F_TENTATIVE == 0 {
			continue
		}
		if a.Flags&unix.IFA_F_NODAD != 0 {
			return a.IPNet.String() + " waits for its link"
		}
		// Duplicate address detection on a link that is up ends, a second or more later (later
		// still on a loaded machine), with a notification of the address and of its local route.
		if l, ok := byIndex[a.LinkIndex]; ok && l.Flags&net.FlagUp != 0 && l.Flags&net.FlagRunning != 0 {
			return a.IPNet.String() + " is in duplicate address detection"
		}
	}
	return ""
}

// readSysctl reads /proc/sys/<key> in the current namespace.
func readSysctl(g *WithT, key string) string {
	b, err := os.ReadFile(filepath.Join("/proc/sys", key))
	g.Expect(err).NotTo(HaveOccurred())
	return strings.TrimSpace(string(b))
}
