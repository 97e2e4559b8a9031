//go:build !windows

package packettrace_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	gomegatypes "github.com/onsi/gomega/types"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/packettrace"
	winnetscheme "github.com/winnet-io/winnet/internal/scheme"
	"github.com/winnet-io/winnet/test/framework"
)

// These tests run packettrace.Reconciler in a manager of its own per test, against the package's
// real API server, with a fake clock: a Running trace never times out unless the test steps the
// clock. No agent runs: a trace that gets a tag stays Running.

var server *framework.APIServer

func TestMain(m *testing.M) {
	framework.Main(m, "PacketTrace controller tests", &server, framework.MainOptions{})
}

const waitFor = 30 * time.Second

// The nodes every test shares: two winnet nodes whose agents are ready, one whose agent is not,
// and a node that runs no winnet agent (a flannel Linux node).
var (
	nodesOnce sync.Once
	nodes     = []struct {
		name, cidr string
		winnet     bool
		ready      metav1.ConditionStatus
	}{
		{"win-a", "10.250.1.0/24", true, metav1.ConditionTrue},
		{"win-b", "10.250.2.0/24", true, metav1.ConditionTrue},
		{"win-down", "10.250.3.0/24", true, metav1.ConditionFalse},
		{"linux-f", "10.250.4.0/24", false, ""},
	}
)

// fastConfig is the server's config without client-side rate limits: a burst of creations must
// reach the API server as a burst.
func fastConfig() *rest.Config {
	cfg := rest.CopyConfig(server.Config)
	cfg.QPS, cfg.Burst = 1000, 1000
	return cfg
}

func createNodes(t *testing.T) {
	nodesOnce.Do(func() {
		g := NewWithT(t)
		ctx := context.Background()
		for _, n := range nodes {
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name}, Spec: corev1.NodeSpec{PodCIDR: n.cidr, PodCIDRs: []string{n.cidr}}}
			g.Expect(server.Client.Create(ctx, node)).To(Succeed())
			if !n.winnet {
				continue
			}
			wnn := &networkv1alpha1.WindowsNodeNetwork{ObjectMeta: metav1.ObjectMeta{Name: n.name},
				Spec: networkv1alpha1.WindowsNodeNetworkSpec{PodCIDRs: []networkv1alpha1.CIDR{networkv1alpha1.CIDR(n.cidr)}}}
			g.Expect(server.Client.Create(ctx, wnn)).To(Succeed())
			reason := networkv1alpha1.ReadyReason
			if n.ready != metav1.ConditionTrue {
				reason = networkv1alpha1.ComponentsNotReadyReason
			}
			meta.SetStatusCondition(&wnn.Status.Conditions, metav1.Condition{Type: networkv1alpha1.ReadyCondition, Status: n.ready,
				Reason: reason, Message: "set by the test", ObservedGeneration: wnn.Generation})
			g.Expect(server.Client.Status().Update(ctx, wnn)).To(Succeed())
		}
	})
}

// recorder records the Pod reads of the reconciler, through its cache and past it.
type recorder struct {
	mu       sync.Mutex
	podGets  []string
	podLists int
}

func (r *recorder) record(obj client.Object, key client.ObjectKey) {
	if _, ok := obj.(*corev1.Pod); ok {
		r.mu.Lock()
		r.podGets = append(r.podGets, key.String())
		r.mu.Unlock()
	}
}

func (r *recorder) recordList(list client.ObjectList) {
	if _, ok := list.(*corev1.PodList); ok {
		r.mu.Lock()
		r.podLists++
		r.mu.Unlock()
	}
}

func (r *recorder) reads() ([]string, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.podGets...), r.podLists
}

type recordingReader struct {
	client.Reader
	rec *recorder
}

func (r recordingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	r.rec.record(obj, key)
	return r.Reader.Get(ctx, key, obj, opts...)
}

func (r recordingReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	r.rec.recordList(list)
	return r.Reader.List(ctx, list, opts...)
}

type recordingClient struct {
	client.Client
	rec *recorder
}

func (c recordingClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.rec.record(obj, key)
	return c.Client.Get(ctx, key, obj, opts...)
}

func (c recordingClient) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	c.rec.recordList(list)
	return c.Client.List(ctx, list, opts...)
}

// env is one test's controller and what it needs.
type env struct {
	t     *testing.T
	c     client.Client
	clock *clocktesting.FakeClock
	rec   *recorder
}

// start runs a reconciler configured by configure until the test ends, then deletes the traces of
// the namespaces, which it creates.
func start(t *testing.T, configure func(*packettrace.Reconciler), namespaces ...string) *env {
	t.Helper()
	g := NewWithT(t)
	createNodes(t)
	ctx := context.Background()
	c, err := client.New(fastConfig(), client.Options{Scheme: server.Client.Scheme()})
	g.Expect(err).NotTo(HaveOccurred())
	for _, ns := range namespaces {
		g.Expect(ignoreExists(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))).To(Succeed())
	}
	scheme, err := winnetscheme.New()
	g.Expect(err).NotTo(HaveOccurred())
	mgr, err := manager.New(fastConfig(), manager.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0", Controller: config.Controller{SkipNameValidation: ptr.To(true)}})
	g.Expect(err).NotTo(HaveOccurred())
	e := &env{t: t, c: c, clock: clocktesting.NewFakeClock(time.Now()), rec: &recorder{}}
	r := &packettrace.Reconciler{Client: recordingClient{Client: mgr.GetClient(), rec: e.rec}, Reader: recordingReader{Reader: mgr.GetAPIReader(), rec: e.rec},
		Clock: e.clock}
	if configure != nil {
		configure(r)
	}
	g.Expect(r.SetupWithManager(mgr)).To(Succeed())
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the manager: %v", err)
		}
		// The next test's limits count the cluster's traces: leave none.
		for _, ns := range namespaces {
			if err := c.DeleteAllOf(context.Background(), &networkv1alpha1.PacketTrace{}, client.InNamespace(ns)); err != nil {
				t.Errorf("deleting the PacketTraces of %s: %v", ns, err)
			}
		}
	})
	return e
}

// pod creates a Pod on a node with an address, as the scheduler and kubelet would.
func (e *env) pod(ns, name, node, ip string) {
	e.t.Helper()
	g := NewWithT(e.t)
	ctx := context.Background()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "example.invalid/c"}}}}
	if err := e.c.Create(ctx, p); apierrors.IsAlreadyExists(err) { // an earlier run of the test (-count)
		g.Expect(e.c.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
	} else {
		g.Expect(err).NotTo(HaveOccurred())
	}
	p.Status.PodIP, p.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
	g.Expect(e.c.Status().Update(ctx, p)).To(Succeed())
}

// service creates a Service with a ClusterIP.
func (e *env) service(ns, name string) {
	e.t.Helper()
	g := NewWithT(e.t)
	ctx := context.Background()
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
	g.Expect(ignoreExists(e.c.Create(ctx, s))).To(Succeed())
}

// ignoreExists lets a test run again on the same API server (-count).
func ignoreExists(err error) error {
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

type traceOpt func(*networkv1alpha1.PacketTrace)

func toPod(ns, name string) traceOpt {
	return func(tr *networkv1alpha1.PacketTrace) {
		tr.Spec.Destination = networkv1alpha1.PacketTraceDestination{Pod: &networkv1alpha1.ObjectReference{Namespace: ns, Name: name}}
	}
}

func toIP(ip string) traceOpt {
	return func(tr *networkv1alpha1.PacketTrace) {
		tr.Spec.Destination = networkv1alpha1.PacketTraceDestination{IP: networkv1alpha1.IPv4Address(ip)}
	}
}

func fromPod(ns, name string) traceOpt {
	return func(tr *networkv1alpha1.PacketTrace) {
		tr.Spec.Source.Pod = networkv1alpha1.ObjectReference{Namespace: ns, Name: name}
	}
}

func timeoutSeconds(s int32) traceOpt {
	return func(tr *networkv1alpha1.PacketTrace) { tr.Spec.TimeoutSeconds = s }
}

// create creates a trace from Pod src of its namespace to 192.0.2.1 (an external address), changed
// by opts.
func (e *env) create(ns, name, src string, opts ...traceOpt) *networkv1alpha1.PacketTrace {
	e.t.Helper()
	tr := &networkv1alpha1.PacketTrace{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: networkv1alpha1.PacketTraceSpec{
		Source:         networkv1alpha1.PacketTraceSource{Pod: networkv1alpha1.ObjectReference{Name: src}},
		Destination:    networkv1alpha1.PacketTraceDestination{IP: "192.0.2.1"},
		Packet:         networkv1alpha1.PacketTracePacket{Protocol: networkv1alpha1.PacketTraceTCP, DstPort: 80},
		TimeoutSeconds: 300,
	}}
	for _, o := range opts {
		o(tr)
	}
	NewWithT(e.t).Expect(e.c.Create(context.Background(), tr)).To(Succeed())
	return tr
}

// settled waits until the trace has a phase and returns it.
func (e *env) settled(ns, name string) *networkv1alpha1.PacketTrace {
	e.t.Helper()
	tr := &networkv1alpha1.PacketTrace{}
	NewWithT(e.t).Eventually(func(g Gomega) networkv1alpha1.PacketTracePhase {
		g.Expect(e.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, tr)).To(Succeed())
		return tr.Status.Phase
	}).WithTimeout(waitFor).ShouldNot(BeEmpty(), "trace %s/%s gets a phase", ns, name)
	return tr
}

// phases returns the phase (and reason) of every trace of the namespace.
func (e *env) phases(ns string) map[string]string {
	e.t.Helper()
	list := &networkv1alpha1.PacketTraceList{}
	NewWithT(e.t).Expect(e.c.List(context.Background(), list, client.InNamespace(ns))).To(Succeed())
	out := map[string]string{}
	for _, tr := range list.Items {
		out[tr.Name] = string(tr.Status.Phase)
		if tr.Status.Phase == networkv1alpha1.PacketTraceFailed {
			out[tr.Name] += "/" + tr.Status.Reason
		}
	}
	return out
}

// failures reads winnet_packettrace_failures_total{reason} from controller-runtime's registry.
func failures(t *testing.T, reason string) float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	for _, f := range families {
		if f.GetName() != "winnet_packettrace_failures_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func failedWith(reason string, message ...string) OmegaMatcher {
	m := []OmegaMatcher{HaveField("Status.Phase", networkv1alpha1.PacketTraceFailed), HaveField("Status.Reason", reason)}
	for _, s := range message {
		m = append(m, HaveField("Status.Message", ContainSubstring(s)))
	}
	return And(m...)
}

// TestSourceInAnotherNamespaceRefused: a trace whose source Pod is in another namespace fails at
// once, before the Pod is read, even when the chart's admission policies are on (they refuse it at
// creation; the controller holds without them).
func TestSourceInAnotherNamespaceRefused(t *testing.T) {
	e := start(t, func(r *packettrace.Reconciler) { r.AdmissionChecked = true }, "pt-src-tenant", "pt-src-victim")
	g := NewWithT(t)
	e.pod("pt-src-victim", "victim", "win-a", "10.250.1.10")
	e.pod("pt-src-tenant", "own", "win-a", "10.250.1.11")
	before := failures(t, networkv1alpha1.PacketTraceReasonSourceNotInNamespace)

	e.create("pt-src-tenant", "as-victim", "victim", fromPod("pt-src-victim", "victim"))
	g.Expect(e.settled("pt-src-tenant", "as-victim")).To(failedWith(networkv1alpha1.PacketTraceReasonSourceNotInNamespace,
		"source Pod pt-src-victim/victim is not in the trace's namespace pt-src-tenant"))
	gets, _ := e.rec.reads()
	g.Expect(gets).NotTo(ContainElement("pt-src-victim/victim"), "the other namespace's Pod is never read")
	g.Eventually(func() float64 { return failures(t, networkv1alpha1.PacketTraceReasonSourceNotInNamespace) - before }).WithTimeout(waitFor).Should(BeEquivalentTo(1),
		"the metric counts after the status is written")

	// Its own namespace, named or not, runs.
	e.create("pt-src-tenant", "as-own", "own", fromPod("pt-src-tenant", "own"))
	g.Expect(e.settled("pt-src-tenant", "as-own")).To(HaveField("Status.Phase", networkv1alpha1.PacketTraceRunning))
}

// TestNotAuthorizedWithoutAdmission: without the admission policies (the default), a trace to
// another namespace's Pod or Service, or with disclosure Cluster, fails with NotAuthorized saying
// what to do; its own namespace's destinations run. With them, another namespace's Pod runs.
func TestNotAuthorizedWithoutAdmission(t *testing.T) {
	e := start(t, nil, "pt-auth-tenant", "pt-auth-other")
	g := NewWithT(t)
	e.pod("pt-auth-tenant", "src", "win-a", "10.250.1.20")
	e.pod("pt-auth-tenant", "dst", "win-b", "10.250.2.20")
	e.pod("pt-auth-other", "dst", "win-b", "10.250.2.21")
	e.service("pt-auth-other", "web")

	e.create("pt-auth-tenant", "other-pod", "src", toPod("pt-auth-other", "dst"))
	e.create("pt-auth-tenant", "other-service", "src", func(tr *networkv1alpha1.PacketTrace) {
		tr.Spec.Destination = networkv1alpha1.PacketTraceDestination{Service: &networkv1alpha1.ObjectReference{Namespace: "pt-auth-other", Name: "web"}}
	})
	e.create("pt-auth-tenant", "cluster", "src", toPod("", "dst"), func(tr *networkv1alpha1.PacketTrace) {
		tr.Spec.Disclosure = networkv1alpha1.PacketTraceDisclosureCluster
	})
	e.create("pt-auth-tenant", "own", "src", toPod("pt-auth-tenant", "dst"))
	g.Expect(e.settled("pt-auth-tenant", "other-pod")).To(failedWith(networkv1alpha1.PacketTraceReasonNotAuthorized,
		"destination Pod pt-auth-other/dst is in another namespace", "admissionPolicy.enabled=true"))
	g.Expect(e.settled("pt-auth-tenant", "other-service")).To(failedWith(networkv1alpha1.PacketTraceReasonNotAuthorized,
		"destination Service pt-auth-other/web", "admissionPolicy.enabled=true"))
	g.Expect(e.settled("pt-auth-tenant", "cluster")).To(failedWith(networkv1alpha1.PacketTraceReasonNotAuthorized,
		"disclosure Cluster", "admissionPolicy.enabled=true"))
	g.Expect(e.settled("pt-auth-tenant", "own")).To(And(HaveField("Status.Phase", networkv1alpha1.PacketTraceRunning),
		HaveField("Status.Nodes", []string{"win-a", "win-b"})))
	gets, _ := e.rec.reads()
	g.Expect(gets).NotTo(ContainElement("pt-auth-other/dst"), "the other namespace's Pod is never read")
}

// TestOtherNamespaceWithAdmission: with the admission policies on, another namespace's destination
// is the admission policy's to allow: the controller runs the trace.
func TestOtherNamespaceWithAdmission(t *testing.T) {
	e := start(t, func(r *packettrace.Reconciler) { r.AdmissionChecked = true }, "pt-adm-tenant", "pt-adm-other")
	g := NewWithT(t)
	e.pod("pt-adm-tenant", "src", "win-a", "10.250.1.30")
	e.pod("pt-adm-other", "dst", "win-b", "10.250.2.30")
	e.create("pt-adm-tenant", "other-pod", "src", toPod("pt-adm-other", "dst"), func(tr *networkv1alpha1.PacketTrace) {
		tr.Spec.Disclosure = networkv1alpha1.PacketTraceDisclosureCluster
	})
	g.Expect(e.settled("pt-adm-tenant", "other-pod")).To(And(HaveField("Status.Phase", networkv1alpha1.PacketTraceRunning),
		HaveField("Status.DestinationIP", networkv1alpha1.IPv4Address("10.250.2.30"))))
}

// TestIPDestinationByPodCIDR: an IP destination's node is the one whose Pod CIDR holds it, from the
// cached Nodes: no Pod is listed. A node that runs no winnet agent is left out of status.nodes.
func TestIPDestinationByPodCIDR(t *testing.T) {
	e := start(t, nil, "pt-ip")
	g := NewWithT(t)
	e.pod("pt-ip", "src", "win-a", "10.250.1.40")

	e.create("pt-ip", "winnet", "src", toIP("10.250.2.77"))
	e.create("pt-ip", "flannel", "src", toIP("10.250.4.77"))
	e.create("pt-ip", "external", "src", toIP("192.0.2.1"))
	g.Expect(e.settled("pt-ip", "winnet")).To(And(HaveField("Status.Phase", networkv1alpha1.PacketTraceRunning),
		HaveField("Status.Nodes", []string{"win-a", "win-b"}), HaveField("Status.DestinationIP", networkv1alpha1.IPv4Address("10.250.2.77"))))
	g.Expect(e.settled("pt-ip", "flannel")).To(And(HaveField("Status.Phase", networkv1alpha1.PacketTraceRunning),
		HaveField("Status.Nodes", []string{"win-a"})), "linux-f runs no winnet agent")
	g.Expect(e.settled("pt-ip", "external")).To(And(HaveField("Status.Phase", networkv1alpha1.PacketTraceRunning),
		HaveField("Status.Nodes", []string{"win-a"})))
	_, lists := e.rec.reads()
	g.Expect(lists).To(BeZero(), "no Pod LIST")
}

// TestEgressHolderOnPath: a trace to an address outside the cluster from a Pod an Egress selects
// has the Egress's holder on its path when that is another winnet node whose agent is Ready (the
// source node relays the packet there); not when the source node holds it, when no Egress selects
// the Pod, when the holder's agent is not Ready (the trace runs, and the source node consumes the
// relayed packet), and not for a destination that is a node's Pod address.
func TestEgressHolderOnPath(t *testing.T) {
	e := start(t, nil, "pt-egress")
	g := NewWithT(t)
	ctx := context.Background()
	for name, app := range map[string]string{"billing": "billing", "other": "other", "down": "down", "local": "local"} {
		e.pod("pt-egress", name, "win-a", "10.250.1."+strconv.Itoa(60+len(name)))
		p := &corev1.Pod{}
		g.Expect(e.c.Get(ctx, client.ObjectKey{Namespace: "pt-egress", Name: name}, p)).To(Succeed())
		p.Labels = map[string]string{"app": app}
		g.Expect(e.c.Update(ctx, p)).To(Succeed())
	}
	egressOf := func(name, app, ip, holder string) {
		eg := &networkv1alpha1.Egress{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: networkv1alpha1.EgressSpec{
			PodSelector: networkv1alpha1.LabelSelector{MatchLabels: map[string]networkv1alpha1.LabelValue{"app": networkv1alpha1.LabelValue(app)}},
			NamespaceSelector: networkv1alpha1.LabelSelector{MatchLabels: map[string]networkv1alpha1.LabelValue{
				"kubernetes.io/metadata.name": "pt-egress"}},
			EgressIP: networkv1alpha1.IPv4Address(ip),
		}}
		g.Expect(e.c.Create(ctx, eg)).To(Succeed())
		t.Cleanup(func() { _ = e.c.Delete(context.Background(), eg) })
		eg.Status.Node = holder
		meta.SetStatusCondition(&eg.Status.Conditions, metav1.Condition{Type: networkv1alpha1.AssignedCondition, Status: metav1.ConditionTrue,
			Reason: networkv1alpha1.EgressAssignedReason, Message: "set by the test"})
		meta.SetStatusCondition(&eg.Status.Conditions, metav1.Condition{Type: networkv1alpha1.ReadyCondition, Status: metav1.ConditionTrue,
			Reason: networkv1alpha1.EgressRealisedReason, Message: "set by the test"})
		g.Expect(e.c.Status().Update(ctx, eg)).To(Succeed())
	}
	egressOf("pt-egress-billing", "billing", "192.168.50.10", "win-b")
	egressOf("pt-egress-down", "down", "192.168.50.11", "win-down")
	egressOf("pt-egress-local", "local", "192.168.50.12", "win-a")
	// The reconciler's cache starts its Egress informer at its first list, which waits for it to sync:
	// every Egress above is in it.
	e.create("pt-egress", "relayed", "billing")
	e.create("pt-egress", "in-cluster", "billing", toIP("10.250.4.77"))
	e.create("pt-egress", "unselected", "other")
	e.create("pt-egress", "holder-down", "down")
	e.create("pt-egress", "held-here", "local")
	running := func(nodes ...string) gomegatypes.GomegaMatcher {
		return And(HaveField("Status.Phase", networkv1alpha1.PacketTraceRunning), HaveField("Status.Nodes", nodes))
	}
	g.Expect(e.settled("pt-egress", "relayed")).To(running("win-a", "win-b"), "the holder reports the SNAT")
	g.Expect(e.settled("pt-egress", "in-cluster")).To(running("win-a"), "a Pod address of a node without winnet: no holder")
	g.Expect(e.settled("pt-egress", "unselected")).To(running("win-a"))
	g.Expect(e.settled("pt-egress", "holder-down")).To(running("win-a"), "a holder whose agent is not Ready is left out")
	g.Expect(e.settled("pt-egress", "held-here")).To(running("win-a"))
}

// TestNodeNotReady: a winnet node on the path whose agent is not Ready fails the trace at once,
// named; a node without winnet is left out of the path.
func TestNodeNotReady(t *testing.T) {
	e := start(t, nil, "pt-ready")
	g := NewWithT(t)
	e.pod("pt-ready", "src", "win-a", "10.250.1.50")
	e.pod("pt-ready", "src-down", "win-down", "10.250.3.50")
	e.pod("pt-ready", "dst-down", "win-down", "10.250.3.51")
	e.pod("pt-ready", "dst-flannel", "linux-f", "10.250.4.50")

	e.create("pt-ready", "to-down", "src", toPod("", "dst-down"))
	e.create("pt-ready", "from-down", "src-down")
	e.create("pt-ready", "ip-on-down", "src", toIP("10.250.3.99"))
	e.create("pt-ready", "to-flannel", "src", toPod("", "dst-flannel"))
	for _, name := range []string{"to-down", "from-down", "ip-on-down"} {
		g.Expect(e.settled("pt-ready", name)).To(failedWith(networkv1alpha1.PacketTraceReasonNodeNotReady, "node win-down"), name)
	}
	g.Expect(e.settled("pt-ready", "to-flannel")).To(And(HaveField("Status.Phase", networkv1alpha1.PacketTraceRunning),
		HaveField("Status.Nodes", []string{"win-a"})))
}

// TestBurstInOneNamespace: 50 traces created at once in one namespace leave at most the limit (8)
// Pending or Running; the rest fail with TooManyTraces, each counted by the metric.
func TestBurstInOneNamespace(t *testing.T) {
	e := start(t, nil, "pt-burst")
	g := NewWithT(t)
	e.pod("pt-burst", "src", "win-a", "10.250.1.60")
	before := failures(t, networkv1alpha1.PacketTraceReasonTooManyTraces)
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() { e.create("pt-burst", fmt.Sprintf("t%02d", i), "src") })
	}
	wg.Wait()
	g.Eventually(func() int {
		settled := 0
		for _, p := range e.phases("pt-burst") {
			if p != "" {
				settled++
			}
		}
		return settled
	}).WithTimeout(waitFor).Should(Equal(50))
	counts := map[string]int{}
	for _, p := range e.phases("pt-burst") {
		counts[p]++
	}
	g.Expect(counts).To(Equal(map[string]int{
		string(networkv1alpha1.PacketTraceRunning):                 packettrace.DefaultMaxPerNamespace,
		"Failed/" + networkv1alpha1.PacketTraceReasonTooManyTraces: 50 - packettrace.DefaultMaxPerNamespace,
	}))
	g.Eventually(func() float64 { return failures(t, networkv1alpha1.PacketTraceReasonTooManyTraces) - before }).WithTimeout(waitFor).Should(BeEquivalentTo(50-packettrace.DefaultMaxPerNamespace),
		"the metric counts after the status is written")
}

// TestClusterCap: beyond the cluster-wide cap of unfinished traces, a trace of any namespace fails
// with TooManyTracesInCluster; once one finishes, a new one runs.
func TestClusterCap(t *testing.T) {
	e := start(t, func(r *packettrace.Reconciler) { r.MaxInCluster = 5 }, "pt-cap-1", "pt-cap-2")
	g := NewWithT(t)
	e.pod("pt-cap-1", "src", "win-a", "10.250.1.70")
	e.pod("pt-cap-2", "src", "win-a", "10.250.1.71")
	for i := range 3 {
		for _, ns := range []string{"pt-cap-1", "pt-cap-2"} {
			e.create(ns, fmt.Sprintf("t%d", i), "src")
			e.settled(ns, fmt.Sprintf("t%d", i))
		}
	}
	g.Expect(e.phases("pt-cap-1")).To(Equal(map[string]string{"t0": "Running", "t1": "Running", "t2": "Running"}))
	g.Expect(e.phases("pt-cap-2")).To(Equal(map[string]string{"t0": "Running", "t1": "Running",
		"t2": "Failed/" + networkv1alpha1.PacketTraceReasonClusterLimit}))
	g.Expect(e.settled("pt-cap-2", "t2")).To(failedWith(networkv1alpha1.PacketTraceReasonClusterLimit, "the cluster has 5 PacketTraces pending or running"))

	g.Expect(e.c.Delete(context.Background(), &networkv1alpha1.PacketTrace{ObjectMeta: metav1.ObjectMeta{Namespace: "pt-cap-1", Name: "t0"}})).To(Succeed())
	e.create("pt-cap-2", "t3", "src")
	g.Expect(e.settled("pt-cap-2", "t3")).To(HaveField("Status.Phase", networkv1alpha1.PacketTraceRunning))
}

// TestPendingRoundRobin: when tags run short, the Pending traces get them in turn by namespace:
// one namespace's many Pending traces do not starve another's, and within a namespace the oldest
// goes first.
func TestPendingRoundRobin(t *testing.T) {
	e := start(t, func(r *packettrace.Reconciler) { packettrace.SetTagCount(r, 2) }, "pt-rr-hog", "pt-rr-small")
	g := NewWithT(t)
	e.pod("pt-rr-hog", "src", "win-a", "10.250.1.80")
	e.pod("pt-rr-small", "src", "win-a", "10.250.1.81")
	for i := range 8 {
		e.create("pt-rr-hog", fmt.Sprintf("t%d", i), "src")
		e.settled("pt-rr-hog", fmt.Sprintf("t%d", i))
	}
	e.create("pt-rr-small", "t0", "src")
	g.Expect(e.settled("pt-rr-small", "t0")).To(And(HaveField("Status.Phase", networkv1alpha1.PacketTracePending),
		HaveField("Status.Reason", networkv1alpha1.PacketTraceReasonNoTag)))
	g.Expect(e.phases("pt-rr-hog")).To(Equal(map[string]string{"t0": "Running", "t1": "Running",
		"t2": "Pending", "t3": "Pending", "t4": "Pending", "t5": "Pending", "t6": "Pending", "t7": "Pending"}))

	// A tag comes free: the other namespace's turn, though the hog's Pending traces are older.
	g.Expect(e.c.Delete(context.Background(), &networkv1alpha1.PacketTrace{ObjectMeta: metav1.ObjectMeta{Namespace: "pt-rr-hog", Name: "t0"}})).To(Succeed())
	g.Eventually(func() map[string]string { return e.phases("pt-rr-small") }).WithTimeout(waitFor).
		Should(Equal(map[string]string{"t0": "Running"}))
	g.Expect(e.phases("pt-rr-hog")).To(HaveKeyWithValue("t2", "Pending"))

	// Another: back to the hog, its oldest.
	g.Expect(e.c.Delete(context.Background(), &networkv1alpha1.PacketTrace{ObjectMeta: metav1.ObjectMeta{Namespace: "pt-rr-hog", Name: "t1"}})).To(Succeed())
	g.Eventually(func() map[string]string { return e.phases("pt-rr-hog") }).WithTimeout(waitFor).Should(Equal(map[string]string{
		"t2": "Running", "t3": "Pending", "t4": "Pending", "t5": "Pending", "t6": "Pending", "t7": "Pending"}))
}

// TestPendingTimeout: a Pending trace fails with Timeout once its timeoutSeconds have passed since
// its creation, as a Running one does since its start; the Running one keeps its tag meanwhile.
func TestPendingTimeout(t *testing.T) {
	e := start(t, func(r *packettrace.Reconciler) { packettrace.SetTagCount(r, 1) }, "pt-timeout")
	g := NewWithT(t)
	e.pod("pt-timeout", "src", "win-a", "10.250.1.90")
	e.create("pt-timeout", "running", "src", timeoutSeconds(300))
	g.Expect(e.settled("pt-timeout", "running")).To(HaveField("Status.Phase", networkv1alpha1.PacketTraceRunning))
	e.create("pt-timeout", "pending", "src", timeoutSeconds(30))
	g.Expect(e.settled("pt-timeout", "pending")).To(HaveField("Status.Phase", networkv1alpha1.PacketTracePending))
	before := failures(t, networkv1alpha1.PacketTraceReasonTimeout)

	e.clock.Step(31 * time.Second)
	// The reconciler's requeue waits on the real clock: a change to the trace brings it back now.
	pending := &networkv1alpha1.PacketTrace{}
	g.Expect(e.c.Get(context.Background(), client.ObjectKey{Namespace: "pt-timeout", Name: "pending"}, pending)).To(Succeed())
	// A merge patch, without the resourceVersion: the reconciler may write the trace's status meanwhile.
	poke := client.MergeFrom(pending.DeepCopy())
	pending.Labels = map[string]string{"poke": "1"}
	g.Expect(e.c.Patch(context.Background(), pending, poke)).To(Succeed())
	g.Eventually(func() map[string]string { return e.phases("pt-timeout") }).WithTimeout(waitFor).Should(Equal(map[string]string{
		"running": "Running", "pending": "Failed/" + networkv1alpha1.PacketTraceReasonTimeout}))
	g.Eventually(func() float64 { return failures(t, networkv1alpha1.PacketTraceReasonTimeout) - before }).WithTimeout(waitFor).Should(BeEquivalentTo(1),
		"the metric counts after the status is written")
}
