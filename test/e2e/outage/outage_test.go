//go:build linux

package outage

import (
	"context"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/podendpoint"
	"github.com/winnet-io/winnet/test/e2e/cluster"
	"github.com/winnet-io/winnet/test/framework"
)

// A cluster of its own, so that this package runs beside the e2e package (make test runs packages in
// parallel) instead of adding its minute to it: three nodes, two Pods on node-a and one on each other node.
var (
	c    *cluster.Cluster
	pods = map[string]*cluster.Pod{}
)

const (
	readyTimeout = 60 * time.Second
	converge     = 30 * time.Second
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx := context.Background()
	var err error
	c, err = cluster.Start(ctx, cluster.Options{UnderlayCIDR: netip.MustParsePrefix("192.168.78.0/24"),
		Logf: func(f string, a ...any) { fmt.Fprintf(os.Stderr, "outage: "+f+"\n", a...) }})
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: the outage test needs a cluster on this machine: %v\n", err)
		return 1
	}
	defer func() {
		if err := c.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "tearing the cluster down: %v\n", err)
		}
	}()
	if err := setUp(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: building the cluster: %v\n%s", err, c.LogTails(40))
		return 1
	}
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "%s", c.LogTails(60))
	}
	return code
}

func setUp(ctx context.Context) error {
	for i, name := range []string{"node-a", "node-b", "node-c"} {
		spec := cluster.NodeSpec{Name: name, IP: netip.AddrFrom4([4]byte{192, 168, 78, byte(11 + i)}),
			PodCIDR: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(1 + i), 0}), 24)}
		if _, err := c.AddNode(ctx, spec); err != nil {
			return err
		}
	}
	if err := c.WaitReady(ctx, readyTimeout); err != nil {
		return err
	}
	for _, ps := range [][2]string{{"pod-a1", "node-a"}, {"pod-a2", "node-a"}, {"pod-b1", "node-b"}, {"pod-c1", "node-c"}} {
		p, err := c.AddPod(ctx, node(ps[1]), ps[0], readyTimeout)
		if err != nil {
			return err
		}
		pods[ps[0]] = p
	}
	return nil
}

func node(name string) *cluster.Node { return c.Node(name) }

const (
	// outage is how long TestAPIServerOutage keeps the API server stopped.
	outage = 60 * time.Second
	// outagePort is served by pod-c1, which a policy isolates during the test.
	outagePort = 8181
)

// TestAPIServerOutage stops the API server for a minute while Pods talk across nodes under a NetworkPolicy
// (pod-c1 admits only role=trusted Pods: pod-a1). During the outage:
//   - pod-a2 pings pod-b1 on another node all along, loss counted over the whole window;
//   - pod-a1's sandbox is made again, as kubelet does when a sandbox dies (it needs no API server): it gets a
//     network with the address it had, so node-c, which matches pod-a1 by the address in its status (which
//     cannot change while the API server is away), still admits it; a Pod nothing isolates (pod-b1) reaches
//     it; pod-b1 is still refused by pod-c1;
//   - the sandbox of outage-gone, whose deletion started before the outage, is deleted (CNI DEL): nothing of
//     it is left on node-b.
//
// When the API server is back, every PodEndpoint names its Pod's current sandbox and is Ready, outage-gone's
// goes with its Pod, and every node network is Ready.
func TestAPIServerOutage(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	a1, a2, b1, c1 := pods["pod-a1"], pods["pod-a2"], pods["pod-b1"], pods["pod-c1"]

	// The policy, and who it admits.
	restoreLabels := func(name string) {
		pod := &corev1.Pod{}
		g.Expect(c.Client.Get(ctx, client.ObjectKey{Namespace: cluster.PodNamespace, Name: name}, pod)).To(Succeed())
		old := pod.Labels
		t.Cleanup(func() { setPodLabels(t, name, old) })
	}
	restoreLabels("pod-a1")
	restoreLabels("pod-c1")
	setPodLabels(t, "pod-a1", map[string]string{"role": "trusted"})
	setPodLabels(t, "pod-c1", map[string]string{"app": "outage-target"})
	serveLines(t, c1.NSPath, outagePort)
	policy := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.PodNamespace, Name: "outage"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "outage-target"}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "trusted"}}}},
			}},
		},
	}
	g.Expect(c.Client.Create(ctx, policy)).To(Succeed())
	t.Cleanup(func() { _ = c.Client.Delete(context.Background(), policy) })
	cluster.ExpectConnection(t, a1, c1, outagePort, true, converge)
	cluster.ExpectConnection(t, b1, c1, outagePort, false, converge)

	// outage-gone is being deleted: kubelet tears its sandbox down during the outage.
	gone, err := c.AddPod(ctx, node("node-b"), "outage-gone", readyTimeout)
	g.Expect(err).NotTo(HaveOccurred())
	goneEndpoint, goneSandbox, goneIP := podendpoint.EndpointName(gone.ContainerID), gone.ContainerID, gone.IP
	g.Expect(c.Client.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: gone.Namespace, Name: gone.Name}},
		client.GracePeriodSeconds(300))).To(Succeed())

	ping, err := cluster.StartSteadyPing(a2.Place(), b1.IP, 100*time.Millisecond)
	g.Expect(err).NotTo(HaveOccurred())
	time.Sleep(time.Second)
	resume, err := c.StopAPIServer()
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = resume() })
	start := time.Now()
	inOutage := func(what string) {
		t.Helper()
		g.Expect(time.Since(start)).To(BeNumerically("<", outage), "%s must happen while the API server is stopped", what)
	}

	// pod-a1's sandbox made again: the same address, the policy on node-c still admits it.
	oldIP := a1.IP
	recreateStart := time.Now()
	g.Expect(c.RecreateSandbox(ctx, a1, 20*time.Second)).To(Succeed())
	t.Logf("pod-a1's sandbox made again during the outage in %v, address %s (was %s)", time.Since(recreateStart).Round(time.Millisecond), a1.IP, oldIP)
	g.Expect(a1.IP).To(Equal(oldIP), "the new sandbox keeps the Pod's address, which every node matches it by")
	cluster.ExpectConnection(t, a1, c1, outagePort, true, converge)
	cluster.ExpectConnection(t, b1, c1, outagePort, false, converge)
	g.Eventually(func() int {
		_, received, _ := cluster.Ping(b1.Place(), a1.IP, 1)
		return received
	}).WithTimeout(10*time.Second).Should(Equal(1), "pod-b1 reaches pod-a1's new sandbox")
	inOutage("pod-a1's sandbox")

	// outage-gone's sandbox deleted: nothing of it left on node-b.
	g.Expect(c.DeleteSandbox(ctx, gone)).To(Succeed())
	nb := node("node-b")
	ports, err := nb.OVS.Vsctl("list-ports", cluster.BridgeName)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ports).NotTo(ContainSubstring(goneEndpoint), "no OVS port")
	g.Expect(nb.Flows()).NotTo(MatchRegexp(regexp.QuoteMeta(goneIP.String())+`([^0-9]|$)`), "no flow of its address")
	g.Expect(filesMentioning(t, nb.StateDir, goneIP.String(), goneSandbox, goneEndpoint)).To(BeEmpty(),
		"no attachment, IPAM allocation (a file named after the address) or HNS endpoint in the agent's state")
	inOutage("outage-gone's DEL")

	time.Sleep(time.Until(start.Add(outage)))
	g.Expect(resume()).To(Succeed())
	resumed := time.Now()
	g.Eventually(func() error { return c.Client.Get(ctx, client.ObjectKey{Name: "node-a"}, &corev1.Node{}) }).
		WithTimeout(30 * time.Second).Should(Succeed())
	time.Sleep(2 * time.Second)
	stats, err := ping.Stop()
	g.Expect(err).NotTo(HaveOccurred())
	t.Logf("pod-a2 -> pod-b1 over the whole window (%v with the API server stopped): %s", outage, stats)
	g.Expect(stats.Lost()).To(BeNumerically("<=", stats.Sent/100), "traffic does not need the API server: %s", stats)

	// Back: kubelet writes pod-a1's status and finishes outage-gone's deletion.
	g.Expect(c.SetPodReady(ctx, a1, true)).To(Succeed())
	g.Expect(c.Client.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: gone.Namespace, Name: gone.Name}},
		client.GracePeriodSeconds(0))).To(Succeed())
	g.Eventually(func(g Gomega) {
		_, err := framework.PodEndpointOf(ctx, c.Client, gone.Namespace, gone.Name)
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "outage-gone's PodEndpoint goes: %v", err)
		for name, p := range pods {
			pep, err := framework.PodEndpointOf(ctx, c.Client, p.Namespace, name)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(pep.Spec.SandboxID).To(Equal(p.ContainerID), "PodEndpoint %s names the current sandbox", name)
			g.Expect(pep.Spec.IPs).To(ConsistOf(networkv1alpha1.InterfaceAddress(p.IP.String()+"/24")), "PodEndpoint %s", name)
			g.Expect(meta.IsStatusConditionTrue(pep.Status.Conditions, networkv1alpha1.ReadyCondition)).To(BeTrue(), "PodEndpoint %s is Ready", name)
		}
	}).WithTimeout(converge).Should(Succeed())
	g.Expect(c.WaitReady(ctx, converge)).To(Succeed())
	t.Logf("every PodEndpoint and node network correct %v after the API server came back", time.Since(resumed).Round(time.Millisecond))
	cluster.ExpectConnection(t, a1, c1, outagePort, true, converge)
	cluster.ExpectConnection(t, b1, c1, outagePort, false, converge)
}

// filesMentioning returns the files under dir named name, or whose content holds one of the strings.
func filesMentioning(t *testing.T, dir, name string, what ...string) []string {
	t.Helper()
	var found []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if d.Name() == name {
			found = append(found, path)
		}
		for _, w := range what {
			if strings.Contains(string(b), w) {
				found = append(found, path+" ("+w+")")
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("reading %s: %v", dir, err)
	}
	return found
}

func setPodLabels(t *testing.T, name string, labels map[string]string) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	pod := &corev1.Pod{}
	g.Expect(c.Client.Get(ctx, client.ObjectKey{Namespace: cluster.PodNamespace, Name: name}, pod)).To(Succeed())
	before := pod.DeepCopy()
	pod.Labels = labels
	g.Expect(c.Client.Patch(ctx, pod, client.MergeFrom(before))).To(Succeed())
}

// serveLines runs cluster.ServeLines in the namespace at path until the test ends.
func serveLines(t *testing.T, path string, port int) {
	t.Helper()
	s, err := cluster.ServeLines(path, port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
}
