//go:build linux

package networkpolicy_test

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/simnode"
)

// packetsTo counts, with an nftables rule in the namespace, the TCP packets that reach it for port.
func packetsTo(t *testing.T, nsName string, port int) func() int {
	t.Helper()
	for _, cmd := range [][]string{
		{"nft", "add", "table", "inet", "stale"},
		{"nft", "add", "chain", "inet", "stale", "in", "{ type filter hook prerouting priority -300 ; }"},
		{"nft", "add", "rule", "inet", "stale", "in", "tcp", "dport", strconv.Itoa(port), "counter"},
	} {
		if out, err := simnode.Exec(nsName, cmd...); err != nil {
			t.Fatalf("counting packets in %s: %v: %s", nsName, err, out)
		}
	}
	counter := regexp.MustCompile(`counter packets (\d+)`)
	return func() int {
		out, err := simnode.Exec(nsName, "nft", "list", "table", "inet", "stale")
		if err != nil {
			t.Fatalf("reading the packet counter in %s: %v: %s", nsName, err, out)
		}
		m := counter.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no counter in %s", out)
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
}

// TestReleasedAddressKeepsNoConnection holds a TCP connection from a client Pod to Pod A, deletes
// A, gives A's address to Pod B, which a NetworkPolicy isolates, and sends on the old connection:
// its conntrack entry is still there (nothing can flush one address's entries on Windows), but its
// packets carry A's incarnation and never reach B; the drops are counted.
func TestReleasedAddressKeepsNoConnection(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	u := simnode.NewUnderlay(t, netip.MustParsePrefix("192.168.91.0/24"))
	// A /29 holds five Pods (.2 to .6): the address A leaves is given out again within four ADDs.
	node := framework.StartPodNode(t, server, u, "np-stale", "192.168.91.11/24", "10.244.91.0/29", converge)
	createPolicy(t, &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "isolate-stale-b"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "stale-b"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		},
	})

	client := node.AddPod(t, "stale-client", framework.TestPodOptions{})
	a := node.AddPod(t, "stale-a", framework.TestPodOptions{Ports: httpPorts})
	serveEcho(t, a.NS, httpPort)
	target := netip.AddrPortFrom(a.IP, httpPort)
	conn := dial(t, client.NS, target)
	g.Expect(echo(conn)).To(Succeed(), "the connection to A works")

	g.Expect(node.DeletePod(ctx, a)).To(Succeed())
	var b *framework.TestPod
	for i := range 5 {
		p := node.AddPod(t, fmt.Sprintf("stale-b%d", i), framework.TestPodOptions{Labels: map[string]string{"app": "stale-b"}, Ports: httpPorts})
		if p.IP == a.IP {
			b = p
			break
		}
	}
	g.Expect(b).NotTo(BeNil(), "no Pod was given A's address %s", a.IP)
	serveEcho(t, b.NS, httpPort)
	reached := packetsTo(t, b.NS, httpPort)
	expectRefused(t, client.NS, "tcp4", target)
	g.Expect(reached()).To(BeZero(), "the policy drops new connections before B")
	c := dial(t, b.NS, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), httpPort))
	g.Expect(echo(c)).To(Succeed())
	before := reached()
	g.Expect(before).NotTo(BeZero(), "B's own connection to itself is counted: the counter works")
	dropped := metricSum(t, "winnet_stale_connection_dropped_packets_total")

	// The client's neighbour entry of the address still names A's MAC (HNS gives every endpoint a
	// MAC of its own); it learns B's when the entry is revalidated (within a minute), as a client
	// on another node or outside, whose packets the pipeline routes by address, does at once.
	if out, err := simnode.Exec(client.NS, "ip", "neigh", "flush", "all"); err != nil {
		t.Fatalf("flushing the client's neighbours: %v: %s", err, out)
	}
	// The old connection's packets: the write is sent (and retransmitted) but gets no answer.
	_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
	_, _ = conn.Write([]byte("ping\n"))
	buf := make([]byte, 5)
	_, err := conn.Read(buf)
	g.Expect(err).To(HaveOccurred(), "nothing answers the old connection")
	g.Expect(reached()).To(Equal(before), "no packet of A's connection reached B")
	g.Eventually(func() float64 { return metricSum(t, "winnet_stale_connection_dropped_packets_total") }).
		WithTimeout(10*time.Second).WithPolling(time.Second).Should(BeNumerically(">", dropped), "the drops are counted")
}
