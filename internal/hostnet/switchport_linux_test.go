//go:build linux

package hostnet

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/google/nftables"
	. "github.com/onsi/gomega"
	"github.com/vishvananda/netns"

	"github.com/winnet-io/winnet/test/hostcmd"
)

// TestSetSwitchPortBatches queues SetSwitchPort calls behind a transaction in flight: the next
// transaction carries them all, and a link that vanished before its turn fails only its own call.
func TestSetSwitchPortBatches(t *testing.T) {
	requireRoot(t)
	g := NewWithT(t)
	name := fmt.Sprintf("hostnet-spb-%d", os.Getpid())
	g.Expect(hostcmd.Command("ip", "netns", "add", name).Run()).To(Succeed())
	t.Cleanup(func() { _ = hostcmd.Command("ip", "netns", "del", name).Run() })
	h := newHost(g, Options{NetNSPath: "/var/run/netns/" + name}).(*netlinkHost)
	ctx := context.Background()
	const links = 6
	index := map[string]int{}
	for i := range links {
		port := fmt.Sprintf("spb%d", i)
		out, err := hostcmd.Command("ip", "netns", "exec", name, "ip", "link", "add", port, "type", "veth", "peer", "name", port+"-p").CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), "%s", out)
		l, err := h.LinkByName(ctx, port)
		g.Expect(err).NotTo(HaveOccurred())
		index[port] = l.Index
	}
	chains := func() []string {
		target, err := netns.GetFromPath("/var/run/netns/" + name)
		g.Expect(err).NotTo(HaveOccurred())
		defer target.Close()
		conn, err := nftables.New(nftables.WithNetNSFd(int(target)))
		g.Expect(err).NotTo(HaveOccurred())
		list, err := conn.ListChainsOfTableFamily(nftables.TableFamilyNetdev)
		g.Expect(err).NotTo(HaveOccurred())
		var names []string
		for _, c := range list {
			names = append(names, c.Name)
		}
		return names
	}
	// setAll calls SetSwitchPort for every link at once while a transaction is held in flight, and
	// returns each call's error once the transaction is released.
	setAll := func(on bool, beforeRelease func()) map[string]error {
		h.switchPorts.commitMu.Lock()
		var wg sync.WaitGroup
		var mu sync.Mutex
		errs := map[string]error{}
		for port, idx := range index {
			wg.Go(func() {
				err := h.SetSwitchPort(ctx, idx, on)
				mu.Lock()
				errs[port] = err
				mu.Unlock()
			})
		}
		g.Eventually(h.switchPorts.queue.Len).Should(Equal(links), "every call waits for the transaction in flight")
		beforeRelease()
		h.switchPorts.commitMu.Unlock()
		wg.Wait()
		return errs
	}

	for port, err := range setAll(true, func() {}) {
		g.Expect(err).NotTo(HaveOccurred(), port)
	}
	g.Expect(chains()).To(ConsistOf("port-spb0", "port-spb1", "port-spb2", "port-spb3", "port-spb4", "port-spb5"))

	// spb5 goes after its call was queued: its chain goes with the others' in one transaction.
	errs := setAll(false, func() {
		out, err := hostcmd.Command("ip", "netns", "exec", name, "ip", "link", "del", "spb5").CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), "%s", out)
	})
	for port, err := range errs {
		g.Expect(err).NotTo(HaveOccurred(), port)
	}
	g.Expect(chains()).To(BeEmpty())

	// A chain whose link went away is deleted by the background sweep the next transaction starts.
	g.Expect(h.SetSwitchPort(ctx, index["spb0"], true)).To(Succeed())
	g.Expect(h.SetSwitchPort(ctx, index["spb1"], true)).To(Succeed())
	out, err := hostcmd.Command("ip", "netns", "exec", name, "ip", "link", "del", "spb1").CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "%s", out)
	g.Expect(chains()).To(ConsistOf("port-spb0", "port-spb1"), "the kernel keeps the chain of a deleted link")
	g.Expect(h.SetSwitchPort(ctx, index["spb2"], true)).To(Succeed())
	g.Eventually(chains).Should(ConsistOf("port-spb0", "port-spb2"))

	// A port already on, as a Pod's periodic repair asks: nothing changes and the links are not
	// listed; a port turned on lists them.
	dumps := h.switchPorts.linkDumps.Load()
	g.Expect(h.SetSwitchPort(ctx, index["spb0"], true)).To(Succeed())
	g.Expect(h.switchPorts.linkDumps.Load()).To(Equal(dumps), "a port already on costs no listing of the links")
	g.Expect(chains()).To(ConsistOf("port-spb0", "port-spb2"))
	g.Expect(h.SetSwitchPort(ctx, index["spb3"], true)).To(Succeed())
	g.Expect(h.switchPorts.linkDumps.Load()).To(Equal(dumps+1), "a port turned on lists the links")
	g.Expect(h.SetSwitchPort(ctx, index["spb3"], false)).To(Succeed())
	g.Expect(chains()).To(ConsistOf("port-spb0", "port-spb2"))

	// Released chains go in the background; turning one on again before the sweep cancels its release.
	g.Expect(h.ReleaseSwitchPort(ctx, "spb0")).To(Succeed())
	g.Expect(h.ReleaseSwitchPort(ctx, "spb2")).To(Succeed())
	g.Expect(h.SetSwitchPort(ctx, index["spb2"], true)).To(Succeed())
	g.Eventually(chains).Should(ConsistOf("port-spb2"))
	g.Consistently(chains).WithTimeout(2 * sweepDelay).Should(ConsistOf("port-spb2"))
	g.Expect(h.ReleaseSwitchPort(ctx, "no-such-link")).To(Succeed(), "releasing what has no chain is a no-op")
	g.Expect(h.ReleaseSwitchPort(ctx, "spb2")).To(Succeed())
	g.Eventually(chains).Should(BeEmpty())
}
