//go:build !windows

package cluster_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/egress"
	egresslease "github.com/winnet-io/winnet/internal/egress"
)

// setNodeReady sets the kubelet's Ready condition of a Node.
func setNodeReady(g Gomega, name string, ready bool) {
	ctx := context.Background()
	n := &corev1.Node{}
	g.Expect(server.Client.Get(ctx, client.ObjectKey{Name: name}, n)).To(Succeed())
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, Reason: "Test", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	g.Expect(server.Client.Status().Update(ctx, n)).To(Succeed())
}

// reportNodeNetwork writes, as the node's agent would, the WindowsNodeNetwork's Ready condition, its
// uplink subnet and the egress IPs it realised.
func reportNodeNetwork(g Gomega, name, subnet string, egressIPs ...networkv1alpha1.IPv4Address) {
	g.Eventually(func(g Gomega) {
		w := getNodeNetwork(name)(g)
		meta.SetStatusCondition(&w.Status.Conditions, metav1.Condition{Type: networkv1alpha1.ReadyCondition, Status: metav1.ConditionTrue, Reason: "Ready"})
		w.Status.NodeSubnet = networkv1alpha1.InterfaceAddress(subnet)
		w.Status.EgressIPs = egressIPs
		g.Expect(server.Client.Status().Update(context.Background(), w)).To(Succeed())
	}).WithTimeout(timeout).Should(Succeed())
}

// everyNamespace selects every namespace, as an Egress must say on purpose.
var everyNamespace = networkv1alpha1.LabelSelector{MatchExpressions: []networkv1alpha1.LabelSelectorRequirement{
	{Key: "kubernetes.io/metadata.name", Operator: "Exists"}}}

func newEgress(name, ip string, podLabels map[string]networkv1alpha1.LabelValue) *networkv1alpha1.Egress {
	return &networkv1alpha1.Egress{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: networkv1alpha1.EgressSpec{
		PodSelector: networkv1alpha1.LabelSelector{MatchLabels: podLabels}, EgressIP: networkv1alpha1.IPv4Address(ip),
		NamespaceSelector: everyNamespace,
	}}
}

func createEgress(t *testing.T, g Gomega, e *networkv1alpha1.Egress) {
	g.Expect(server.Client.Create(context.Background(), e)).To(Succeed())
	t.Cleanup(func() { _ = server.Client.Delete(context.Background(), e) })
}

func getEgress(name string) func(g Gomega) *networkv1alpha1.Egress {
	return func(g Gomega) *networkv1alpha1.Egress {
		e := &networkv1alpha1.Egress{}
		g.Expect(server.Client.Get(context.Background(), client.ObjectKey{Name: name}, e)).To(Succeed())
		return e
	}
}

func condition(typ string, status metav1.ConditionStatus, reason string) OmegaMatcher {
	return HaveField("Status.Conditions", ContainElement(And(HaveField("Type", typ), HaveField("Status", status), HaveField("Reason", reason))))
}

// leaseNamespace is where the agents' Egress Leases are: winnet-controller's default.
const leaseNamespace = "winnet-system"

// testLeaseDuration is the agents' fencing bound in these tests.
const testLeaseDuration = 2 * time.Second

// renewLease renews the node's Egress Lease as its agent does (egress.Fence), every 500ms, until the
// returned function or the test's end stops it.
func renewLease(t *testing.T, g Gomega, node string) (stop func()) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: leaseNamespace}}
	if err := server.Client.Create(context.Background(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		g.Expect(err).NotTo(HaveOccurred())
	}
	f := &egress.Fence{Reader: server.Client, Writer: server.Client, Namespace: leaseNamespace, NodeName: node,
		Duration: testLeaseDuration, RenewInterval: 500 * time.Millisecond}
	f.SetWanted(true) // as the agent's Egress reconciler says when its node may hold an Egress
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = f.Start(ctx) }()
	stop = func() { cancel(); <-done }
	// The first renewal is in place before the test goes on.
	g.Eventually(func() error {
		return server.Client.Get(context.Background(), client.ObjectKey{Namespace: leaseNamespace, Name: egresslease.LeaseName(node)}, &coordinationv1.Lease{})
	}).WithTimeout(timeout).Should(Succeed())
	t.Cleanup(func() {
		stop()
		_ = server.Client.Delete(context.Background(), &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: leaseNamespace, Name: egresslease.LeaseName(node)}})
	})
	return stop
}

// TestEgressAssignment runs winnet-controller against a real API server: Egresses are spread over
// the eligible nodes, Ready follows the holder's report, an IP moves off a node that is no longer
// Ready, and what only winnet-controller can judge (a node's address, a Pod CIDR, another Egress's IP,
// a Pod selected twice) is reported.
func TestEgressAssignment(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	for _, n := range []struct{ name, cidr, ip string }{{"egress-a", "10.244.61.0/24", "192.168.61.11"}, {"egress-b", "10.244.62.0/24", "192.168.61.12"}} {
		createNode(t, g, newNode(n.name, n.cidr, "", true), n.ip)
		setNodeReady(g, n.name, true)
		reportNodeNetwork(g, n.name, n.ip+"/24")
		renewLease(t, g, n.name)
	}
	// winnet-controller learns of the Leases from its watch: let it see both before an Egress is placed,
	// or the first Egresses could all go to the node it saw first (spreading is then not what is tested).
	time.Sleep(time.Second)

	createEgress(t, g, newEgress("first", "192.168.61.200", map[string]networkv1alpha1.LabelValue{"app": "billing"}))
	// creationTimestamps have a resolution of a second: of two Egresses of the same second the name
	// sorts "first" before "second".
	createEgress(t, g, newEgress("second", "192.168.61.201", map[string]networkv1alpha1.LabelValue{"app": "billing"}))
	g.Eventually(getEgress("first")).WithTimeout(timeout).Should(And(HaveField("Status.Node", Not(BeEmpty())),
		condition(networkv1alpha1.AssignedCondition, metav1.ConditionTrue, networkv1alpha1.EgressAssignedReason),
		condition(networkv1alpha1.ReadyCondition, metav1.ConditionFalse, networkv1alpha1.EgressPendingReason)))
	g.Eventually(getEgress("second")).WithTimeout(timeout).Should(HaveField("Status.Node", Not(BeEmpty())))
	first, second := getEgress("first")(g).Status.Node, getEgress("second")(g).Status.Node
	g.Expect(first).NotTo(Equal(second), "two Egresses on two eligible nodes are spread")

	// Ready follows the holder's report.
	reportNodeNetwork(g, first, map[string]string{"egress-a": "192.168.61.11/24", "egress-b": "192.168.61.12/24"}[first], "192.168.61.200")
	g.Eventually(getEgress("first")).WithTimeout(timeout).Should(condition(networkv1alpha1.ReadyCondition, metav1.ConditionTrue, networkv1alpha1.EgressRealisedReason))

	// The holder goes NotReady while its agent still renews its Lease: the Egress is Releasing (no node
	// holds it) until the holder's agent reports the IP released, then it moves to the other node.
	setNodeReady(g, first, false)
	g.Eventually(getEgress("first")).WithTimeout(timeout).Should(And(HaveField("Status.Node", Equal(first)),
		condition(networkv1alpha1.AssignedCondition, metav1.ConditionFalse, networkv1alpha1.EgressReleasingReason)))
	t.Logf("Releasing: %s", meta.FindStatusCondition(getEgress("first")(g).Status.Conditions, networkv1alpha1.AssignedCondition).Message)
	g.Consistently(getEgress("first")).WithTimeout(time.Second).Should(HaveField("Status.Node", Equal(first)), "not moved while the holder reports the IP")
	reportNodeNetwork(g, first, map[string]string{"egress-a": "192.168.61.11/24", "egress-b": "192.168.61.12/24"}[first])
	g.Eventually(getEgress("first")).WithTimeout(timeout).Should(HaveField("Status.Node", Equal(second)))
	setNodeReady(g, first, true)
	g.Consistently(getEgress("first")).WithTimeout(2*time.Second).Should(HaveField("Status.Node", Equal(second)), "no move back without a reason")

	// Conflicts only winnet-controller can see.
	for _, c := range []struct{ name, ip string }{{"node-address", "192.168.61.12"}, {"pod-cidr", "10.244.61.9"}, {"service-cidr", "10.96.0.10"}, {"taken", "192.168.61.200"}} {
		createEgress(t, g, newEgress("conflict-"+c.name, c.ip, nil))
		g.Eventually(getEgress("conflict-"+c.name)).WithTimeout(timeout).Should(And(HaveField("Status.Node", BeEmpty()),
			condition(networkv1alpha1.AssignedCondition, metav1.ConditionFalse, networkv1alpha1.IPConflictReason),
			condition(networkv1alpha1.ReadyCondition, metav1.ConditionFalse, networkv1alpha1.NotAssignedReason)), c.name)
		t.Logf("%s: %s", c.name, meta.FindStatusCondition(getEgress("conflict-"+c.name)(g).Status.Conditions, networkv1alpha1.AssignedCondition).Message)
	}
	g.Expect(getEgress("first")(g).Status.Node).To(Equal(second), "the older Egress keeps its IP")

	// No node on the subnet.
	createEgress(t, g, newEgress("elsewhere", "192.168.99.5", nil))
	g.Eventually(getEgress("elsewhere")).WithTimeout(timeout).Should(condition(networkv1alpha1.AssignedCondition, metav1.ConditionFalse, networkv1alpha1.NoEligibleNodeReason))

	// A Pod selected by two Egresses: the older applies, the newer says so.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "egress-tenant"}}
	g.Expect(server.Client.Create(ctx, ns)).To(Succeed())
	t.Cleanup(func() { _ = server.Client.Delete(context.Background(), ns) })
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "billing", Labels: map[string]string{"app": "billing"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}
	g.Expect(server.Client.Create(ctx, pod)).To(Succeed())
	t.Cleanup(func() { _ = server.Client.Delete(context.Background(), pod) })
	g.Eventually(getEgress("second")).WithTimeout(timeout).Should(condition(networkv1alpha1.SupersededCondition, metav1.ConditionTrue, networkv1alpha1.OlderEgressSelectsPodsReason))
	g.Expect(meta.FindStatusCondition(getEgress("second")(g).Status.Conditions, networkv1alpha1.SupersededCondition).Message).To(ContainSubstring("Egress first"))
	g.Expect(getEgress("first")(g)).To(condition(networkv1alpha1.SupersededCondition, metav1.ConditionFalse, networkv1alpha1.NoOverlapReason))
}

// TestEgressFencing: winnet-controller moves an Egress off a holder whose agent stopped renewing its
// Lease (cut off from the API server, say), and lets another node take it only once the Lease has been
// expired for its duration F again, by which time the holder's agent has given the IP up (it does F after
// its last confirmed renewal): the Egress is Releasing, held by no node, meanwhile. A node without a
// renewed Lease is not eligible.
func TestEgressFencing(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	stops := map[string]func(){}
	for _, n := range []struct{ name, cidr, ip string }{{"fence-a", "10.244.63.0/24", "192.168.63.11"}, {"fence-b", "10.244.64.0/24", "192.168.63.12"}} {
		createNode(t, g, newNode(n.name, n.cidr, "", true), n.ip)
		setNodeReady(g, n.name, true)
		reportNodeNetwork(g, n.name, n.ip+"/24")
	}
	// Only fence-a renews its Lease: fence-b is not eligible.
	stops["fence-a"] = renewLease(t, g, "fence-a")
	e := newEgress("fenced", "192.168.63.200", nil)
	e.Spec.NodeSelector = &networkv1alpha1.LabelSelector{MatchExpressions: []networkv1alpha1.LabelSelectorRequirement{
		{Key: corev1.LabelHostname, Operator: "DoesNotExist"}}}
	createEgress(t, g, e)
	g.Eventually(getEgress("fenced")).WithTimeout(timeout).Should(And(HaveField("Status.Node", Equal("fence-a")),
		condition(networkv1alpha1.AssignedCondition, metav1.ConditionTrue, networkv1alpha1.EgressAssignedReason)))
	reportNodeNetwork(g, "fence-a", "192.168.63.11/24", "192.168.63.200")

	stops["fence-b"] = renewLease(t, g, "fence-b")
	g.Consistently(getEgress("fenced")).WithTimeout(time.Second).Should(HaveField("Status.Node", Equal("fence-a")), "no move while the holder renews")

	// fence-a's agent stops renewing (its node stays Ready, its report still lists the IP: it cannot
	// write it any more).
	stops["fence-a"]()
	stopped := time.Now()
	lease := &coordinationv1.Lease{}
	g.Expect(server.Client.Get(ctx, client.ObjectKey{Namespace: leaseNamespace, Name: egresslease.LeaseName("fence-a")}, lease)).To(Succeed())
	lastRenewal := lease.Spec.RenewTime.Time
	// The holder gives the IP up F after its last confirmed renewal began; the other node may take it only
	// after the controller saw the Lease expire (F after it saw that renewal) and waited F again.
	earliest := lastRenewal.Add(2 * testLeaseDuration)
	g.Eventually(getEgress("fenced")).WithTimeout(timeout).Should(And(HaveField("Status.Node", Equal("fence-a")),
		condition(networkv1alpha1.AssignedCondition, metav1.ConditionFalse, networkv1alpha1.EgressReleasingReason)))
	releasing := time.Now()
	t.Logf("Releasing %v after the last renewal: %s", releasing.Sub(lastRenewal).Round(time.Millisecond),
		meta.FindStatusCondition(getEgress("fenced")(g).Status.Conditions, networkv1alpha1.AssignedCondition).Message)
	if wait := time.Until(earliest) - 100*time.Millisecond; wait > 0 {
		g.Consistently(getEgress("fenced")).WithTimeout(wait).WithPolling(50*time.Millisecond).Should(HaveField("Status.Node", Not(Equal("fence-b"))),
			"fence-b may not take the IP before fence-a's Lease has been expired for F")
	}
	g.Eventually(getEgress("fenced")).WithTimeout(timeout).Should(And(HaveField("Status.Node", Equal("fence-b")),
		condition(networkv1alpha1.AssignedCondition, metav1.ConditionTrue, networkv1alpha1.EgressAssignedReason)))
	moved := time.Now()
	g.Expect(moved.Before(earliest)).To(BeFalse(), "assigned to fence-b at %v, before %v", moved, earliest)
	t.Logf("F %v: renewals stopped %v after the last one; Releasing after %v; on fence-b after %v (the bound: %v)",
		testLeaseDuration, stopped.Sub(lastRenewal).Round(time.Millisecond), releasing.Sub(lastRenewal).Round(time.Millisecond),
		moved.Sub(lastRenewal).Round(time.Millisecond), earliest.Sub(lastRenewal))
}

// gaugeValue reads a gauge of the in-process winnet-controller's metrics registry.
func gaugeValue(name string) func(g Gomega) float64 {
	return func(g Gomega) float64 {
		families, err := ctrlmetrics.Registry.Gather()
		g.Expect(err).NotTo(HaveOccurred())
		for _, f := range families {
			if f.GetName() == name && len(f.GetMetric()) == 1 {
				return f.GetMetric()[0].GetGauge().GetValue()
			}
		}
		g.Expect(name).To(BeEmpty(), "no such gauge")
		return 0
	}
}

// TestEgressPodWatchOnlyWhileNeeded: winnet-controller holds the cluster's Pods (their labels) only while
// two or more Egresses exist, the least for a Pod to be selected twice (Superseded); a change of a Pod's
// labels still reaches Superseded, and the watch closes with the second Egress.
func TestEgressPodWatchOnlyWhileNeeded(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	open, held := gaugeValue("winnet_controller_egress_pod_watch_open"), gaugeValue("winnet_controller_egress_pods")
	g.Eventually(open).WithTimeout(timeout).Should(BeZero(), "no Egress left by an earlier test")

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "egress-watch"}}
	g.Expect(server.Client.Create(ctx, ns)).To(Succeed())
	t.Cleanup(func() { _ = server.Client.Delete(context.Background(), ns) })
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "report", Labels: map[string]string{"app": "report"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}
	g.Expect(server.Client.Create(ctx, pod)).To(Succeed())
	t.Cleanup(func() { _ = server.Client.Delete(context.Background(), pod) })

	report := map[string]networkv1alpha1.LabelValue{"app": "report"}
	createEgress(t, g, newEgress("watch-one", "192.168.63.200", report))
	g.Eventually(getEgress("watch-one")).WithTimeout(timeout).Should(condition(networkv1alpha1.SupersededCondition, metav1.ConditionFalse, networkv1alpha1.NoOverlapReason))
	g.Consistently(open).WithTimeout(2*time.Second).Should(BeZero(), "one Egress: no Pod is watched")

	second := newEgress("watch-two", "192.168.63.201", report)
	createEgress(t, g, second)
	g.Eventually(getEgress("watch-two")).WithTimeout(timeout).Should(condition(networkv1alpha1.SupersededCondition, metav1.ConditionTrue, networkv1alpha1.OlderEgressSelectsPodsReason))
	g.Expect(open(g)).To(Equal(1.0))
	g.Expect(held(g)).To(BeNumerically(">=", 1))

	// The Pod's labels change: it is selected by neither, and the watch tells the reconciler.
	patched := pod.DeepCopy()
	patched.Labels = map[string]string{"app": "other"}
	g.Expect(server.Client.Patch(ctx, patched, client.MergeFrom(pod))).To(Succeed())
	g.Eventually(getEgress("watch-two")).WithTimeout(timeout).Should(condition(networkv1alpha1.SupersededCondition, metav1.ConditionFalse, networkv1alpha1.NoOverlapReason))

	g.Expect(server.Client.Delete(ctx, second)).To(Succeed())
	g.Eventually(open).WithTimeout(timeout).Should(BeZero(), "the second Egress gone: the watch closes")
	g.Expect(held(g)).To(BeZero())
}
