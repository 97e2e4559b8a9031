//go:build linux

package e2e

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/test/e2e/cluster"
	"github.com/winnet-io/winnet/test/simnode"
)

// failoverIP is the egress IP of TestEgressFailover, another unused address of the underlay.
var failoverIP = netip.MustParseAddr("192.168.77.151")

// TestEgressFailover cuts the holder's agent off from the API server (its connections go through a proxy
// the test closes: the agent runs on but can neither renew its Egress Lease nor hear of the Egress) and
// marks its Node NotReady. The holder's agent takes the IP off its bridge interface by itself (fencing);
// winnet-controller moves the Egress to the other eligible node only after that, and the external host then
// sees the new holder's selected Pod arrive from the egress IP. The times from the cut are printed. The
// agents of this package's cluster run with a fencing bound of 3s (agentLeaseArgs).
func TestEgressFailover(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	oldHolder, newHolder := node("node-b"), node("node-c")
	podOld, err := c.AddPodWith(ctx, oldHolder, "egress-fb", cluster.PodOptions{Labels: map[string]string{"egress-test": "failover"}}, readyTimeout)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = c.DeletePod(context.Background(), podOld) })
	podNew, err := c.AddPodWith(ctx, newHolder, "egress-fc", cluster.PodOptions{Labels: map[string]string{"egress-test": "failover"}}, readyTimeout)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = c.DeletePod(context.Background(), podNew) })

	// The old holder's agent talks to the API server through a proxy the test can cut.
	proxy := startAPIProxy(t, c.Config.Host)
	previous := oldHolder.SetAgentArgs()
	oldHolder.SetAgentArgs(append(append([]string{}, previous...), "--apiserver", proxy.url)...)
	g.Expect(oldHolder.RestartAgent()).To(Succeed())
	t.Cleanup(func() {
		oldHolder.SetAgentArgs(previous...)
		_ = oldHolder.RestartAgent()
		setNodeReady(context.Background(), oldHolder.Name, true)
		_ = c.WaitReady(context.Background(), converge)
	})
	g.Expect(c.WaitReady(ctx, converge)).To(Succeed())

	eg := &networkv1alpha1.Egress{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-failover"},
		Spec: networkv1alpha1.EgressSpec{
			PodSelector: networkv1alpha1.LabelSelector{MatchLabels: map[string]networkv1alpha1.LabelValue{"egress-test": "failover"}},
			NamespaceSelector: networkv1alpha1.LabelSelector{MatchLabels: map[string]networkv1alpha1.LabelValue{
				"kubernetes.io/metadata.name": networkv1alpha1.LabelValue(cluster.PodNamespace)}},
			EgressIP: networkv1alpha1.IPv4Address(failoverIP.String()),
			NodeSelector: &networkv1alpha1.LabelSelector{MatchExpressions: []networkv1alpha1.LabelSelectorRequirement{{
				Key: corev1.LabelHostname, Operator: "In", Values: []networkv1alpha1.LabelValue{"node-b", "node-c"}}}},
		},
	}
	g.Expect(c.Client.Create(ctx, eg)).To(Succeed())
	t.Cleanup(func() { _ = c.Client.Delete(context.Background(), eg) })
	// Spreading puts it on node-b (the first by name of two nodes holding none): wait for it there.
	g.Eventually(func(g Gomega) {
		got := &networkv1alpha1.Egress{}
		g.Expect(c.Client.Get(ctx, client.ObjectKeyFromObject(eg), got)).To(Succeed())
		g.Expect(got.Status.Node).To(Equal(oldHolder.Name))
		g.Expect(meta.IsStatusConditionTrue(got.Status.Conditions, networkv1alpha1.ReadyCondition)).To(BeTrue(), "Ready: %v", got.Status.Conditions)
	}).WithTimeout(converge).Should(Succeed())
	g.Eventually(func() netip.Addr { return probeSource(ctx, podOld.Place()) }).WithTimeout(converge).Should(Equal(failoverIP))
	// node-c's selected Pod is relayed to node-b, the holder, through the tunnel.
	g.Eventually(func() netip.Addr { return probeSource(ctx, podNew.Place()) }).WithTimeout(converge).Should(Equal(failoverIP),
		"node-c's selected Pod leaves from the egress IP while node-b holds it")

	// The cut: the holder's agent loses the API server, and its Node goes NotReady.
	cut := time.Now()
	proxy.cut()
	setNodeReady(ctx, oldHolder.Name, false)
	var gone, taken, seen, releasingSeen time.Duration
	g.Eventually(func(g Gomega) {
		now := time.Since(cut)
		if gone == 0 && !bridgeHolds(oldHolder, failoverIP) {
			gone = now
		}
		got := &networkv1alpha1.Egress{}
		g.Expect(c.Client.Get(ctx, client.ObjectKeyFromObject(eg), got)).To(Succeed())
		if releasingSeen == 0 {
			if a := meta.FindStatusCondition(got.Status.Conditions, networkv1alpha1.AssignedCondition); a != nil && a.Reason == networkv1alpha1.EgressReleasingReason {
				releasingSeen = now
			}
		}
		if taken == 0 && bridgeHolds(newHolder, failoverIP) {
			taken = now
			// Fencing: the new holder has the IP only once the old one gave it up.
			g.Expect(gone).NotTo(BeZero(), "node-c holds %s while node-b still does", failoverIP)
		}
		g.Expect(gone).NotTo(BeZero())
		g.Expect(taken).NotTo(BeZero())
	}).WithTimeout(converge).WithPolling(50 * time.Millisecond).Should(Succeed())
	// The external host's ARP entry for the IP named node-b's MAC: the new holder's announcement (a
	// gratuitous ARP, as Windows' duplicate address detection sends) updates it to node-c's, before the
	// external host sends anything to the IP (without it the entry would stay until traffic made the
	// host probe it again).
	newMAC := linkMAC(g, newHolder.NS, cluster.BridgeName)
	g.Eventually(func() (string, error) {
		return simnode.Exec(c.External.NS, "ip", "neigh", "show", failoverIP.String())
	}).WithTimeout(converge).Should(ContainSubstring(newMAC), "the external host learns the new holder from its announcement")
	g.Eventually(func() netip.Addr { return probeSource(ctx, podNew.Place()) }).WithTimeout(converge).WithPolling(100 * time.Millisecond).Should(Equal(failoverIP))
	seen = time.Since(cut)
	t.Logf("failover with a fencing bound F of 3s: from the cut, Releasing seen after %v, %s gone from %s after %v, on %s after %v, "+
		"the external host sees %s from %s's Pod after %v",
		releasingSeen.Round(time.Millisecond), failoverIP, oldHolder.Name, gone.Round(time.Millisecond), newHolder.Name, taken.Round(time.Millisecond),
		failoverIP, newHolder.Name, seen.Round(time.Millisecond))
	g.Expect(bridgeHolds(oldHolder, failoverIP)).To(BeFalse(), "node-b's agent, still cut off, does not take the IP back")
}

// agentLeaseArgs are the fencing durations of this package's agents: a bound of 3s (the default is 10s)
// keeps TestEgressFailover short.
func agentLeaseArgs() []string {
	return []string{"--egress-lease-duration", "3s", "--egress-lease-renew-interval", "1s"}
}

// setNodeReady writes the Node's Ready condition, as kubelet does (the harness's nodes have none).
func setNodeReady(ctx context.Context, name string, ready bool) {
	for range 20 {
		n := &corev1.Node{}
		if err := c.Client.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
			return
		}
		status := corev1.ConditionFalse
		if ready {
			status = corev1.ConditionTrue
		}
		now := metav1.Now()
		for i := range n.Status.Conditions {
			if n.Status.Conditions[i].Type == corev1.NodeReady {
				n.Status.Conditions[i].Status, n.Status.Conditions[i].LastHeartbeatTime, n.Status.Conditions[i].LastTransitionTime = status, now, now
			}
		}
		if err := c.Client.Status().Update(ctx, n); !apierrors.IsConflict(err) {
			return
		}
	}
}

// apiProxy forwards TCP connections to the API server until cut, when it closes them all and refuses new
// ones: what an agent cut off from the control plane sees.
type apiProxy struct {
	url string
	l   net.Listener

	mu    sync.Mutex
	conns []net.Conn
	done  bool
}

func startAPIProxy(t *testing.T, apiServer string) *apiProxy {
	t.Helper()
	u, err := url.Parse(apiServer)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &apiProxy{url: "https://" + l.Addr().String(), l: l}
	t.Cleanup(p.cut)
	go func() {
		for {
			down, err := l.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", u.Host)
			if err != nil {
				_ = down.Close()
				continue
			}
			if !p.track(down, up) {
				return
			}
			go func() { _, _ = io.Copy(up, down); _ = up.Close() }()
			go func() { _, _ = io.Copy(down, up); _ = down.Close() }()
		}
	}()
	return p
}

// track records a proxied connection; false (and both closed) once cut.
func (p *apiProxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		for _, c := range conns {
			_ = c.Close()
		}
		return false
	}
	p.conns = append(p.conns, conns...)
	return true
}

// cut closes the listener and every connection.
func (p *apiProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return
	}
	p.done = true
	err := p.l.Close()
	for _, c := range p.conns {
		err = errors.Join(err, c.Close())
	}
	_ = err
}

// linkMAC is the MAC of a link in a network namespace.
func linkMAC(g Gomega, ns, link string) string {
	out, err := simnode.Exec(ns, "cat", "/sys/class/net/"+link+"/address")
	g.Expect(err).NotTo(HaveOccurred(), out)
	return strings.TrimSpace(out)
}
