//go:build linux

package kubelet

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/winnet-io/winnet/test/e2e/cluster"
)

var c *cluster.Cluster

// nodes: one per containerd, so that winnet's conflist runs through libcni 1.1 (containerd 1.6, CNI
// 1.0.0) and libcni 1.3 (containerd 2.x, CNI 1.1.0).
var nodes = []struct {
	spec cluster.NodeSpec
	rt   func() cluster.Runtime
}{
	{cluster.NodeSpec{Name: "kube-a", IP: netip.MustParseAddr("192.168.79.11"), PodCIDR: netip.MustParsePrefix("10.246.1.0/24")}, cluster.DebianContainerd},
	// kube-b lists its IPv6 InternalIP first (the cluster is dual-stack): winnet takes its IPv4 one.
	{cluster.NodeSpec{Name: "kube-b", IP: netip.MustParseAddr("192.168.79.12"), PodCIDR: netip.MustParsePrefix("10.246.2.0/24"), IPv6First: true}, cluster.BuiltContainerd},
}

const readyTimeout = 3 * time.Minute

func TestMain(m *testing.M) {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx := context.Background()
	start := time.Now()
	logf := func(f string, a ...any) { fmt.Fprintf(os.Stderr, "e2e-kubelet: "+f+"\n", a...) }
	var err error
	c, err = cluster.Start(ctx, cluster.Options{Logf: logf, Kubelets: true, DualStack: true,
		UnderlayCIDR: netip.MustParsePrefix("192.168.79.0/24"), ClusterCIDR: netip.MustParsePrefix("10.246.0.0/16")})
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: the kubelet e2e tests need a cluster on this machine: %v\n", err)
		return 1
	}
	defer func() {
		if err := c.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "tearing the cluster down: %v\n", err)
		}
	}()
	for _, n := range nodes {
		if _, err := c.AddKubeletNode(ctx, n.spec, n.rt()); err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: adding node %s: %v\n%s\n%s", n.spec.Name, err, c.LogTails(40), kubeletLogs())
			return 1
		}
	}
	if err := c.WaitReady(ctx, readyTimeout); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: the winnet networks are not Ready: %v\n%s\n%s", err, c.LogTails(40), kubeletLogs())
		return 1
	}
	logf("cluster of %d nodes with kubelet up in %v", len(nodes), time.Since(start).Round(time.Millisecond))
	code := m.Run()
	// The dual-stack tests' Pods go before the nodes: a kubelet node's teardown with Pods still running takes a
	// minute more.
	if _, err := c.RunKubectl("", "delete", "namespace", dsNS, "--ignore-not-found", "--wait=true", "--timeout=120s"); err != nil {
		fmt.Fprintf(os.Stderr, "deleting namespace %s: %v\n", dsNS, err)
	}
	if code != 0 {
		fmt.Fprintf(os.Stderr, "%s\n%s", c.LogTails(60), kubeletLogs())
	}
	return code
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func kubeletLogs() string {
	var b strings.Builder
	for _, n := range c.Nodes() {
		fmt.Fprintf(&b, "--- %s\n%s\n", n.Name, n.KubeletLogTail(40))
	}
	return b.String()
}

// kubectl runs kubectl with the cluster's admin kubeconfig and returns its standard output.
func kubectl(t testing.TB, stdin string, args ...string) (string, error) {
	t.Helper()
	return c.RunKubectl(stdin, args...)
}

func mustKubectl(t testing.TB, stdin string, args ...string) string {
	t.Helper()
	out, err := kubectl(t, stdin, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// netexecPod is an agnhost netexec Pod on node, probed Ready by kubelet on /hostname.
func netexecPod(name, node string) string {
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
    readinessProbe:
      httpGet: {path: /hostname, port: 8080}
      periodSeconds: 1
`, name, name, node, cluster.KubeletImages.Agnhost)
}

// TestPodsThroughKubelet: Pods made with kubectl get a network from winnet through each containerd, are
// probed Ready by kubelet, answer kubectl logs and exec, reach each other across the nodes and through a
// Service; once deleted, their sandboxes are stopped (containerd's events) and their endpoints gone.
func TestPodsThroughKubelet(t *testing.T) {
	g := NewWithT(t)
	ns := "kubelet-e2e"
	// The sandboxes started before this test's Pods (other tests' Pods, CoreDNS's): they may stay.
	before := map[string]map[string]bool{}
	for _, n := range c.Nodes() {
		started, err := sandboxes(n)
		g.Expect(err).NotTo(HaveOccurred())
		before[n.Name] = map[string]bool{}
		for _, s := range started {
			before[n.Name][s] = true
		}
	}
	mustKubectl(t, "", "create", "namespace", ns)
	t.Cleanup(func() { _, _ = kubectl(t, "", "delete", "namespace", ns, "--wait=false") })
	mustKubectl(t, netexecPod("pod-a", "kube-a")+"---\n"+netexecPod("pod-b", "kube-b"), "-n", ns, "apply", "-f", "-")
	start := time.Now()
	if _, err := kubectl(t, "", "-n", ns, "wait", "--for=condition=Ready", "pod/pod-a", "pod/pod-b", "--timeout=180s"); err != nil {
		out, _ := kubectl(t, "", "-n", ns, "describe", "pods")
		nodes, _ := kubectl(t, "", "describe", "nodes")
		sched, _ := os.ReadFile(c.RunDir + "/kube-scheduler.log")
		t.Fatalf("%v\n%s\n%s\nkube-scheduler:\n%s\n%s", err, out, nodes, tail(string(sched), 30), kubeletLogs())
	}
	t.Logf("two Pods Ready through kubelet in %v", time.Since(start).Round(time.Millisecond))

	ip := func(pod string) string {
		return strings.TrimSpace(mustKubectl(t, "", "-n", ns, "get", "pod", pod, "-o", "jsonpath={.status.podIP}"))
	}
	ipA, ipB := ip("pod-a"), ip("pod-b")
	g.Expect(netip.MustParsePrefix("10.246.1.0/24").Contains(netip.MustParseAddr(ipA))).To(BeTrue(), "pod-a's IP %s is from kube-a's Pod CIDR", ipA)
	g.Expect(netip.MustParsePrefix("10.246.2.0/24").Contains(netip.MustParseAddr(ipB))).To(BeTrue(), "pod-b's IP %s is from kube-b's Pod CIDR", ipB)

	// kubectl logs and exec go through the API server to kubelet and containerd.
	g.Expect(mustKubectl(t, "", "-n", ns, "logs", "pod-a")).To(ContainSubstring("Started HTTP server on port 8080"))
	g.Expect(mustKubectl(t, "", "-n", ns, "exec", "pod-a", "--", "/agnhost-2", "--help")).To(ContainSubstring("netexec"))

	// Across the nodes, both ways, with each Pod's own address as the source.
	for _, d := range []struct{ from, to, toIP string }{{"pod-a", "pod-b", ipB}, {"pod-b", "pod-a", ipA}} {
		out := mustKubectl(t, "", "-n", ns, "exec", d.from, "--", "curl", "-sS", "--max-time", "5", "http://"+d.toIP+":8080/hostname")
		g.Expect(out).To(Equal(d.to), "%s -> %s", d.from, d.to)
		src := mustKubectl(t, "", "-n", ns, "exec", d.from, "--", "curl", "-sS", "--max-time", "5", "http://"+d.toIP+":8080/clientip")
		g.Expect(src).To(HavePrefix(ip(d.from)+":"), "%s -> %s: the source is the Pod's address", d.from, d.to)
	}

	// Through a Service: pod-b behind a ClusterIP, reached from pod-a on the other node.
	mustKubectl(t, `apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: pod-b}
  ports: [{port: 80, targetPort: 8080}]
`, "-n", ns, "apply", "-f", "-")
	clusterIP := strings.TrimSpace(mustKubectl(t, "", "-n", ns, "get", "service", "web", "-o", "jsonpath={.spec.clusterIP}"))
	g.Eventually(func() (string, error) {
		return kubectl(t, "", "-n", ns, "exec", "pod-a", "--", "curl", "-sS", "--max-time", "2", "http://"+clusterIP+"/hostname")
	}, 60*time.Second, time.Second).Should(Equal("pod-b"))

	// Deleted: kubelet stops the sandboxes, containerd's events stop them in the simulators.
	mustKubectl(t, "", "-n", ns, "delete", "pod", "pod-a", "pod-b", "--wait=true", "--timeout=120s")
	for _, n := range c.Nodes() {
		g.Eventually(func() ([]string, error) {
			started, err := sandboxes(n)
			var left []string
			for _, s := range started {
				if !before[n.Name][s] {
					left = append(left, s)
				}
			}
			return left, err
		}, 60*time.Second, 500*time.Millisecond).Should(BeEmpty(), "node %s still has sandboxes of the test's Pods started", n.Name)
	}
}

// sandboxes lists the sandboxes started on the node (in the HNS simulator's sandbox directory).
func sandboxes(n *cluster.Node) ([]string, error) {
	entries, err := os.ReadDir(n.SandboxDir())
	if os.IsNotExist(err) {
		return nil, nil
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names, err
}
