package hostnet

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/test/hostcmd"
)

// TestWatchLinks watches the links of another namespace, as the agent of a simulated node waits for
// Pods' vNICs: a link added there is reported, one added in the test's namespace is not, and the
// watch ends with its context.
func TestWatchLinks(t *testing.T) {
	enterNewNetNS(t)
	g := NewWithT(t)
	name := fmt.Sprintf("hostnet-watch-%d", os.Getpid())
	g.Expect(hostcmd.Command("ip", "netns", "add", name).Run()).To(Succeed())
	t.Cleanup(func() { _ = hostcmd.Command("ip", "netns", "del", name).Run() })
	h := newHost(g, Options{NetNSPath: "/var/run/netns/" + name})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	changed, err := h.WatchLinks(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Consistently(changed, 200*time.Millisecond).ShouldNot(Receive(), "nothing changed yet")

	addVeth(g, "here0", "here1") // in the test's namespace
	g.Consistently(changed, 200*time.Millisecond).ShouldNot(Receive(), "a link of another namespace")

	g.Expect(hostcmd.Command("ip", "-n", name, "link", "add", "there0", "type", "veth", "peer", "name", "there1").Run()).To(Succeed())
	g.Eventually(changed, 5*time.Second).Should(Receive(), "a link added in the watched namespace")
	_, err = h.LinkByName(ctx, "there0")
	g.Expect(err).NotTo(HaveOccurred())

	cancel()
	g.Eventually(changed, 5*time.Second).Should(BeClosed())
}
