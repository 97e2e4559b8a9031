//go:build linux

package kubelet

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/test/e2e/cluster"
	"github.com/winnet-io/winnet/test/framework"
)

// hostPortPod is netexecPod with its HTTP port also on the node's port hostPort.
func hostPortPod(name, node string, hostPort int) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  labels: {app: %s}
spec:
  nodeSelector: {kubernetes.io/hostname: %s}
  terminationGracePeriodSeconds: 1
  containers:
  - name: netexec
    image: %s
    args: [netexec, --http-port=8080, --udp-port=8081]
    ports: [{containerPort: 8080, hostPort: %d, protocol: TCP}]
    readinessProbe:
      httpGet: {path: /hostname, port: 8080}
      periodSeconds: 1
`, name, name, node, cluster.KubeletImages.Agnhost, hostPort)
}

// httpGet fetches url from the network namespace nsName.
func httpGet(nsName, url string) (string, error) {
	client := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := framework.InNS(nsName, func() error {
				var err error
				c, err = (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		}}}
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// TestHostPortThroughKubelet: a Pod's hostPort, from its spec through kubelet and containerd (1.6 on
// kube-a, 2.x on kube-b, each passing portMappings for the conflist's capability), is reached on
// its node's address from the external host (which keeps its address), from a Pod of the other
// node and from the node itself; it is served again after the node's agent restarts (the mappings
// restored from the agent's records), and no more once the Pod is deleted.
func TestHostPortThroughKubelet(t *testing.T) {
	g := NewWithT(t)
	ns := "kubelet-hostport"
	const hostPort = 18080
	mustKubectl(t, "", "create", "namespace", ns)
	t.Cleanup(func() { _, _ = kubectl(t, "", "delete", "namespace", ns, "--wait=false") })
	mustKubectl(t, hostPortPod("hp-a", "kube-a", hostPort)+"---\n"+hostPortPod("hp-b", "kube-b", hostPort), "-n", ns, "apply", "-f", "-")
	if _, err := kubectl(t, "", "-n", ns, "wait", "--for=condition=Ready", "pod/hp-a", "pod/hp-b", "--timeout=180s"); err != nil {
		out, _ := kubectl(t, "", "-n", ns, "describe", "pods")
		t.Fatalf("%v\n%s\n%s", err, out, kubeletLogs())
	}
	a, b := c.Node("kube-a"), c.Node("kube-b")
	url := func(n *cluster.Node, path string) string { return fmt.Sprintf("http://%s:%d/%s", n.IP, hostPort, path) }
	answers := func(nsName, u, want string) {
		t.Helper()
		g.Eventually(func() (string, error) { return httpGet(nsName, u) }, 30*time.Second, 500*time.Millisecond).Should(Equal(want), "%s from %s", u, nsName)
	}
	answers(c.External.NS, url(a, "hostname"), "hp-a")
	answers(c.External.NS, url(b, "hostname"), "hp-b")
	src, err := httpGet(c.External.NS, url(a, "clientip"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(src).To(HavePrefix(c.ExternalIP.String()+":"), "the Pod sees the external host's own address")
	out := mustKubectl(t, "", "-n", ns, "exec", "hp-b", "--", "curl", "-sS", "--max-time", "5", url(a, "hostname"))
	g.Expect(out).To(Equal("hp-a"), "a Pod of the other node")
	answers(a.NS, url(a, "hostname"), "hp-a") // the node itself

	// The agent restarts: its first full pass realises the mappings it restored, or removes them
	// (and the previous agent's flows go as the previous round's leftovers). The hostPort's flows
	// carry the new agent's cookies, and the old ones are gone.
	cookies := func() map[string]bool {
		flows, err := a.Flows()
		g.Expect(err).NotTo(HaveOccurred())
		out := map[string]bool{}
		for _, f := range strings.Split(flows, "\n") {
			if strings.Contains(f, fmt.Sprintf("nw_dst=%s,", a.IP)) && strings.Contains(f, fmt.Sprintf("tp_dst=%d ", hostPort)) {
				cookie, _, _ := strings.Cut(strings.TrimSpace(f), ",")
				out[cookie] = true
			}
		}
		return out
	}
	before := cookies()
	g.Expect(before).NotTo(BeEmpty())
	g.Expect(a.RestartAgent()).To(Succeed())
	g.Eventually(func(g Gomega) {
		now := cookies()
		g.Expect(now).NotTo(BeEmpty(), "the restarted agent realised the hostPort")
		for c := range now {
			g.Expect(before).NotTo(HaveKey(c), "a flow of the previous agent is left")
		}
	}, 90*time.Second, time.Second).Should(Succeed())
	g.Consistently(func() (string, error) { return httpGet(c.External.NS, url(a, "hostname")) }, 5*time.Second, 500*time.Millisecond).Should(Equal("hp-a"),
		"served after the agent restarted")

	mustKubectl(t, "", "-n", ns, "delete", "pod", "hp-a", "--wait=true", "--timeout=120s")
	g.Eventually(func() error {
		_, err := httpGet(c.External.NS, url(a, "hostname"))
		return err
	}, 30*time.Second, 500*time.Millisecond).Should(HaveOccurred(), "released with the Pod")
	flows, err := a.Flows()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.Contains(flows, fmt.Sprintf("tp_dst=%d ", hostPort))).To(BeFalse(), "no flow of the released hostPort on kube-a")
}
