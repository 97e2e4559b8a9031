package packettrace

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/source"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/egress"
)

// Limits of the cluster-side reconciler.
const (
	// DefaultMaxPerNamespace is how many traces may be Pending or Running in one namespace at once;
	// more fail with TooManyTraces.
	DefaultMaxPerNamespace = 8
	// DefaultMaxInCluster is how many traces may be Pending or Running in the cluster at once; more
	// fail with TooManyTracesInCluster. Every agent caches the running traces, and the controller
	// looks at every unfinished one when it gives out a tag.
	DefaultMaxInCluster = 256
	// DefaultTTL is how long a finished trace is kept before it is deleted.
	DefaultTTL = time.Hour
	// maxExpectedNodes caps status.nodes: the nodes whose agents must have installed the trace's
	// flows before the source injects the packet.
	maxExpectedNodes = networkv1alpha1.MaxPacketTraceHops
	// sourcePortBase and sourcePortSpan are where a trace's source port is drawn from.
	sourcePortBase = 33000
	sourcePortSpan = 27000
)

// failures counts the traces winnet-controller failed, by reason (status.reason).
var failures = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: "winnet",
	Subsystem: "packettrace",
	Name:      "failures_total",
	Help: "PacketTraces winnet-controller failed, by status.reason: refused at once (SourceNotInTraceNamespace, NotAuthorized, " +
		"TooManyTraces, TooManyTracesInCluster, NodeNotReady, SourcePodNotFound, ...) or timed out (Timeout).",
}, []string{"reason"})

func init() {
	ctrlmetrics.Registry.MustRegister(failures)
}

// Reconciler is winnet-controller's side of PacketTraces: it checks a new trace's source and
// destination, gives it a tag (a DSCP value no running trace holds), decides the verdict from the
// nodes' hops, fails traces past their timeout and deletes finished ones after TTL.
//
// It runs one worker, so traces are admitted and tags given out one trace at a time, and it counts
// the unfinished traces from its own memory of what it wrote merged with the cache (which lags its
// own writes): a burst of creations cannot pass the limits.
type Reconciler struct {
	// Client reads PacketTraces, Nodes and WindowsNodeNetworks from the manager's cache.
	Client client.Client
	// Reader reads the Pods, Services and EndpointSlices a trace names, past any cache: a trace
	// starts rarely, and caching every Pod of the cluster would cost winnet-controller more than the
	// reads. It never lists Pods.
	Reader client.Reader
	// Clock is the time source; nil is the real clock.
	Clock clock.PassiveClock
	// AdmissionChecked says that the chart's admission policies check, with the rights of each
	// trace's creator, that the trace may name another namespace's destination and ask for Cluster
	// disclosure. When false, winnet-controller cannot know the creator's rights and fails such
	// traces with NotAuthorized.
	AdmissionChecked bool
	// MaxPerNamespace, MaxInCluster and TTL: zero means the defaults.
	MaxPerNamespace int
	MaxInCluster    int
	TTL             time.Duration

	// tagCount is how many tags there are; zero means networkv1alpha1.MaxPacketTraceTags (tests
	// lower it to run short of tags).
	tagCount int32
	// traces is what this reconciler wrote of each trace's phase (and tag), newer than the cache
	// until the cache shows it. A trace deleted while it runs is forgotten by name: its UID is gone
	// with it.
	traces map[types.NamespacedName]tracked
	// lastServed is the namespace of the Pending trace that got the last tag: the next tag goes
	// to the next namespace with a Pending trace (round robin), so that one namespace's many Pending
	// traces cannot starve another's.
	lastServed string
	// wake enqueues the Pending trace whose turn it is when a tag is free.
	wake chan event.GenericEvent
}

// tracked is what the reconciler wrote of one trace (the UID tells a trace from a new one of the
// same name).
type tracked struct {
	uid   types.UID
	phase networkv1alpha1.PacketTracePhase
	tag   int32
}

// SetupWithManager registers the reconciler.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.wake = make(chan event.GenericEvent, 64)
	return ctrl.NewControllerManagedBy(mgr).Named("packettrace").For(&networkv1alpha1.PacketTrace{}).
		WatchesRawSource(source.Channel(r.wake, &handler.EnqueueRequestForObject{})).
		// One worker (controller-runtime's default, said here because the limits and tags depend
		// on it): traces are admitted and tagged one at a time.
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		Complete(r)
}

func (r *Reconciler) now() time.Time {
	if r.Clock == nil {
		return time.Now()
	}
	return r.Clock.Now()
}

func (r *Reconciler) tags() int32 {
	if r.tagCount > 0 {
		return r.tagCount
	}
	return networkv1alpha1.MaxPacketTraceTags
}

// Reconcile moves one trace along: admitted -> Pending -> Running -> Succeeded or Failed -> deleted.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if r.traces == nil {
		r.traces = map[types.NamespacedName]tracked{}
	}
	tr := &networkv1alpha1.PacketTrace{}
	if err := r.Client.Get(ctx, req.NamespacedName, tr); err != nil {
		if apierrors.IsNotFound(err) {
			// A deleted trace gives its tag and its place back.
			delete(r.traces, req.NamespacedName)
			return ctrl.Result{}, r.serveNext(ctx)
		}
		return ctrl.Result{}, err
	}
	key := req.NamespacedName
	t, known := r.traces[key]
	if known && t.uid != tr.UID {
		delete(r.traces, key) // the trace it was given to was deleted, this is a new one
		known = false
	}
	switch tr.Status.Phase {
	case networkv1alpha1.PacketTraceSucceeded, networkv1alpha1.PacketTraceFailed:
		// Finished is final: nothing to remember.
		delete(r.traces, key)
		return r.collect(ctx, tr)
	}
	if known && t.phase != tr.Status.Phase {
		// The cache has not seen this reconciler's last write yet; its event brings the trace back.
		return ctrl.Result{}, nil
	}
	// A trace this reconciler has not written (before a restart) is as the cache shows it.
	switch tr.Status.Phase {
	case networkv1alpha1.PacketTraceRunning:
		return r.running(ctx, tr)
	case networkv1alpha1.PacketTracePending:
		return r.pending(ctx, tr)
	}
	return r.admit(ctx, tr)
}

// collect deletes a finished trace once it is older than the TTL.
func (r *Reconciler) collect(ctx context.Context, tr *networkv1alpha1.PacketTrace) (ctrl.Result, error) {
	ttl := r.TTL
	if ttl == 0 {
		ttl = DefaultTTL
	}
	done := tr.CreationTimestamp.Time
	if tr.Status.CompletionTime != nil {
		done = tr.Status.CompletionTime.Time
	}
	if left := done.Add(ttl).Sub(r.now()); left > 0 {
		return ctrl.Result{RequeueAfter: left}, nil
	}
	ctrl.LoggerFrom(ctx).Info("Deleting a finished PacketTrace", "ttl", ttl)
	if err := r.Client.Delete(ctx, tr, client.Preconditions{UID: &tr.UID}); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("deleting finished PacketTrace: %w", err)
	}
	return ctrl.Result{}, nil
}

// writeStatus patches the trace's status from base and remembers the phase (and tag) written.
func (r *Reconciler) writeStatus(ctx context.Context, tr, base *networkv1alpha1.PacketTrace) error {
	if err := r.Client.Status().Patch(ctx, tr, client.MergeFrom(base)); err != nil {
		return fmt.Errorf("writing PacketTrace status: %w", err)
	}
	r.traces[client.ObjectKeyFromObject(tr)] = tracked{uid: tr.UID, phase: tr.Status.Phase, tag: tr.Status.Tag}
	return nil
}

// fail ends the trace with a reason.
func (r *Reconciler) fail(ctx context.Context, tr *networkv1alpha1.PacketTrace, reason, message string) (ctrl.Result, error) {
	base := tr.DeepCopy()
	now := metav1.NewTime(r.now())
	tr.Status.Phase, tr.Status.Reason, tr.Status.Message, tr.Status.CompletionTime = networkv1alpha1.PacketTraceFailed, reason, message, &now
	if err := r.writeStatus(ctx, tr, base); err != nil {
		return ctrl.Result{}, err
	}
	failures.WithLabelValues(reason).Inc()
	ctrl.LoggerFrom(ctx).Info("PacketTrace failed", "reason", reason, "message", message)
	// A tag it held, or the turn it had, goes to the next Pending trace.
	return ctrl.Result{}, r.serveNext(ctx)
}

// admit checks a new trace before it takes a place among the unfinished ones: what its creator may
// trace (from the spec alone: nothing is read for a trace refused here) and the limits. An
// admitted trace is Pending until its turn for a tag comes.
func (r *Reconciler) admit(ctx context.Context, tr *networkv1alpha1.PacketTrace) (ctrl.Result, error) {
	if reason, msg := r.refusal(tr); reason != "" {
		return r.fail(ctx, tr, reason, msg)
	}
	v, err := r.view(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	perNamespace := cmp.Or(r.MaxPerNamespace, DefaultMaxPerNamespace)
	if n := v.unfinished(tr.Namespace); n >= perNamespace {
		return r.fail(ctx, tr, networkv1alpha1.PacketTraceReasonTooManyTraces,
			fmt.Sprintf("namespace %s has %d PacketTraces pending or running, the most allowed: wait for them to finish or delete some", tr.Namespace, n))
	}
	inCluster := cmp.Or(r.MaxInCluster, DefaultMaxInCluster)
	if n := v.unfinished(""); n >= inCluster {
		return r.fail(ctx, tr, networkv1alpha1.PacketTraceReasonClusterLimit,
			fmt.Sprintf("the cluster has %d PacketTraces pending or running, the most winnet-controller allows (--packettrace-max-in-cluster): wait for them to finish", n))
	}
	// Admitted: the view counts it Pending from now on; serve writes it Pending, Running or Failed,
	// and the reconciler's memory holds what it wrote.
	v.admit(tr)
	return r.serve(ctx, tr, v)
}

// refusal is why a trace may not run whatever the cluster's state, from its spec alone.
func (r *Reconciler) refusal(tr *networkv1alpha1.PacketTrace) (reason, message string) {
	// A trace sends as its source Pod (SpoofGuard and the Pod's egress policy admit the packet as
	// that Pod's): only as a Pod of its own namespace. The admission policy refuses it at creation;
	// this holds when the chart's admission policies are off.
	if ns := tr.Spec.Source.Pod.Namespace; ns != "" && ns != tr.Namespace {
		return networkv1alpha1.PacketTraceReasonSourceNotInNamespace,
			fmt.Sprintf("source Pod %s/%s is not in the trace's namespace %s: a PacketTrace sends only as a Pod of its own namespace; create it in namespace %s",
				ns, tr.Spec.Source.Pod.Name, tr.Namespace, ns)
	}
	if r.AdmissionChecked {
		return "", ""
	}
	// Without the admission policies nothing checked that the creator may read what the trace
	// would reveal.
	const turnOn = "winnet-controller cannot check its creator's rights because the chart's admission policies are off: " +
		"turn them on (Helm value admissionPolicy.enabled=true)"
	d := tr.Spec.Destination
	for _, ref := range []struct {
		kind string
		ref  *networkv1alpha1.ObjectReference
	}{{"Pod", d.Pod}, {"Service", d.Service}} {
		if ref.ref != nil && ref.ref.Namespace != "" && ref.ref.Namespace != tr.Namespace {
			return networkv1alpha1.PacketTraceReasonNotAuthorized,
				fmt.Sprintf("destination %s %s/%s is in another namespace than the trace's (%s), and %s, or trace to a destination of namespace %s",
					ref.kind, ref.ref.Namespace, ref.ref.Name, tr.Namespace, turnOn, tr.Namespace)
		}
	}
	if tr.Spec.Disclosure == networkv1alpha1.PacketTraceDisclosureCluster {
		return networkv1alpha1.PacketTraceReasonNotAuthorized,
			fmt.Sprintf("disclosure Cluster names every object that decides, and %s, or use disclosure Namespace", turnOn)
	}
	return "", ""
}

// pending serves a trace waiting for a tag.
func (r *Reconciler) pending(ctx context.Context, tr *networkv1alpha1.PacketTrace) (ctrl.Result, error) {
	v, err := r.view(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	return r.serve(ctx, tr, v)
}

// serve starts an admitted trace when a tag is free and its turn has come; otherwise it wakes the
// trace whose turn it is and keeps this one Pending until then, or fails it at its timeout (counted
// from its creation, as a Running trace's from its start).
func (r *Reconciler) serve(ctx context.Context, tr *networkv1alpha1.PacketTrace, v *view) (ctrl.Result, error) {
	key := client.ObjectKeyFromObject(tr)
	left := tr.CreationTimestamp.Add(timeout(tr)).Sub(r.now())
	if left <= 0 {
		return r.fail(ctx, tr, networkv1alpha1.PacketTraceReasonTimeout,
			fmt.Sprintf("no trace tag came to it within %v: all %d were held by running traces, and Pending traces get them in turn by namespace", timeout(tr), r.tags()))
	}
	if tag := v.freeTag(r.tags()); tag != 0 {
		next, _ := v.next(r.lastServed)
		if next == key {
			return r.start(ctx, tr, tag)
		}
		if err := r.wakeUp(ctx, next); err != nil {
			return ctrl.Result{}, err
		}
	}
	if tr.Status.Phase != networkv1alpha1.PacketTracePending {
		base := tr.DeepCopy()
		tr.Status.Phase, tr.Status.Reason = networkv1alpha1.PacketTracePending, networkv1alpha1.PacketTraceReasonNoTag
		tr.Status.Message = fmt.Sprintf("all %d trace tags are held by running traces; Pending traces get them in turn by namespace, this one fails after %v",
			r.tags(), timeout(tr))
		if err := r.writeStatus(ctx, tr, base); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{RequeueAfter: left}, nil
}

// serveNext wakes the Pending trace whose turn it is, if a tag is free.
func (r *Reconciler) serveNext(ctx context.Context) error {
	v, err := r.view(ctx)
	if err != nil {
		return err
	}
	if v.freeTag(r.tags()) == 0 {
		return nil
	}
	if next, ok := v.next(r.lastServed); ok {
		return r.wakeUp(ctx, next)
	}
	return nil
}

// wakeUp enqueues a trace. The channel's reader only moves events into the work queue, so the send
// waits at most for that.
func (r *Reconciler) wakeUp(ctx context.Context, key types.NamespacedName) error {
	if r.wake == nil { // not set up with a manager
		return nil
	}
	tr := &networkv1alpha1.PacketTrace{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	select {
	case r.wake <- event.GenericEvent{Object: tr}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waking PacketTrace %s: %w", key, ctx.Err())
	}
}

// start resolves the trace's source, destination and path when its turn for a tag has come (a
// Pending trace reads nothing), and runs it with the tag.
func (r *Reconciler) start(ctx context.Context, tr *networkv1alpha1.PacketTrace, tag int32) (ctrl.Result, error) {
	src, reason, msg, err := r.source(ctx, tr)
	if err == nil && reason == "" {
		var dst netip.Addr
		var nodes []string
		dst, nodes, reason, msg, err = r.destination(ctx, tr, src)
		if err == nil && reason == "" {
			return r.run(ctx, tr, tag, src, dst, nodes)
		}
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	return r.fail(ctx, tr, reason, msg)
}

// run writes the trace Running with its tag and path.
func (r *Reconciler) run(ctx context.Context, tr *networkv1alpha1.PacketTrace, tag int32, src sourcePod, dst netip.Addr, nodes []string) (ctrl.Result, error) {
	base := tr.DeepCopy()
	now := metav1.NewTime(r.now())
	nodes = append([]string{src.node}, slices.DeleteFunc(nodes, func(n string) bool { return n == src.node })...)
	if len(nodes) > maxExpectedNodes {
		nodes = nodes[:maxExpectedNodes]
	}
	tr.Status = networkv1alpha1.PacketTraceStatus{
		Phase: networkv1alpha1.PacketTraceRunning, Tag: tag, SourceNode: src.node, SourceIP: networkv1alpha1.IPv4Address(src.ip.String()),
		SourcePort: int32(sourcePortBase + rand.IntN(sourcePortSpan)), DestinationIP: networkv1alpha1.IPv4Address(dst.String()),
		StartTime: &now, Nodes: nodes, Message: fmt.Sprintf("injecting from %s once the agents of %v are ready", src.node, nodes),
	}
	if tr.Spec.Packet.Protocol == networkv1alpha1.PacketTraceICMP {
		tr.Status.SourcePort = 0
	}
	if err := r.writeStatus(ctx, tr, base); err != nil {
		return ctrl.Result{}, err
	}
	r.lastServed = tr.Namespace
	ctrl.LoggerFrom(ctx).Info("Started a PacketTrace", "tag", tag, "sourceNode", src.node, "destination", dst, "nodes", nodes)
	// More tags may be free for more Pending traces.
	if err := r.serveNext(ctx); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: timeout(tr)}, nil
}

type sourcePod struct {
	node string
	ip   netip.Addr
	// namespace and labels say which Egress applies to the Pod.
	namespace string
	labels    map[string]string
}

// egressHolder is, for a trace to an address that is no node's Pod address, the node that holds the
// Egress applying to the source Pod when that is another winnet node whose agent is Ready: the source
// node relays the packet there through the tunnel, and the holder reports its SNAT (the source node
// reports the relay). "" otherwise: the source node reports what it does with the packet (a holder
// off the path consumes it there, as the packet would leave what the trace covers). A destination
// inside the cluster (a node address, a Service address the trace names by IP) is never relayed: the
// holder then only installs the trace's flows and sees nothing, and the source node's report ends the
// trace.
func (r *Reconciler) egressHolder(ctx context.Context, src sourcePod) (string, error) {
	list := &networkv1alpha1.EgressList{}
	if err := r.Client.List(ctx, list); err != nil {
		return "", fmt.Errorf("listing Egresses: %w", err)
	}
	if len(list.Items) == 0 {
		return "", nil
	}
	ns := &corev1.Namespace{}
	if err := r.Reader.Get(ctx, types.NamespacedName{Name: src.namespace}, ns); err != nil {
		return "", fmt.Errorf("reading the source Pod's Namespace %s: %w", src.namespace, err)
	}
	var compiled []egress.Compiled
	for i := range list.Items {
		if c, err := egress.Compile(&list.Items[i]); err == nil {
			compiled = append(compiled, c)
		}
	}
	applies, ok := egress.Applies(compiled, src.labels, ns.Labels)
	if !ok {
		return "", nil
	}
	e := applies.Egress
	holder := e.Status.Node
	if holder == "" || holder == src.node || !meta.IsStatusConditionTrue(e.Status.Conditions, networkv1alpha1.ReadyCondition) {
		return "", nil
	}
	wnn, err := r.nodeNetwork(ctx, holder)
	if err != nil || wnn == nil {
		return "", err
	}
	if reason, _ := notReady(wnn); reason != "" {
		return "", nil
	}
	return holder, nil
}

// source finds the source Pod (in the trace's namespace: refusal checked it), its node (a winnet
// node whose agent is ready) and its IPv4 address.
func (r *Reconciler) source(ctx context.Context, tr *networkv1alpha1.PacketTrace) (sourcePod, string, string, error) {
	key := types.NamespacedName{Namespace: tr.Namespace, Name: tr.Spec.Source.Pod.Name}
	pod := &corev1.Pod{}
	if err := r.Reader.Get(ctx, key, pod); err != nil {
		if apierrors.IsNotFound(err) {
			return sourcePod{}, networkv1alpha1.PacketTraceReasonSourceNotFound, fmt.Sprintf("source Pod %s does not exist", key), nil
		}
		return sourcePod{}, "", "", fmt.Errorf("reading source Pod %s: %w", key, err)
	}
	if pod.Spec.HostNetwork || pod.Spec.NodeName == "" {
		return sourcePod{}, networkv1alpha1.PacketTraceReasonSourceNotWinnet, fmt.Sprintf("source Pod %s is not scheduled or uses the host's network: only Pods on a winnet node's network can be traced", key), nil
	}
	wnn, err := r.nodeNetwork(ctx, pod.Spec.NodeName)
	if err != nil {
		return sourcePod{}, "", "", err
	}
	if wnn == nil {
		return sourcePod{}, networkv1alpha1.PacketTraceReasonSourceNotWinnet, fmt.Sprintf("source Pod %s runs on node %s, which has no WindowsNodeNetwork: only winnet nodes inject trace packets", key, pod.Spec.NodeName), nil
	}
	if reason, msg := notReady(wnn); reason != "" {
		return sourcePod{}, reason, msg, nil
	}
	ip := podIPv4(pod)
	if !ip.IsValid() {
		return sourcePod{}, networkv1alpha1.PacketTraceReasonSourceNotReady, fmt.Sprintf("source Pod %s has no IPv4 address yet", key), nil
	}
	return sourcePod{node: pod.Spec.NodeName, ip: ip, namespace: pod.Namespace, labels: pod.Labels}, "", "", nil
}

// nodeNetwork returns the node's WindowsNodeNetwork from the cache, nil when the node runs no
// winnet agent.
func (r *Reconciler) nodeNetwork(ctx context.Context, node string) (*networkv1alpha1.WindowsNodeNetwork, error) {
	wnn := &networkv1alpha1.WindowsNodeNetwork{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: node}, wnn); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading WindowsNodeNetwork %s: %w", node, err)
	}
	return wnn, nil
}

// notReady fails a trace whose path crosses a winnet node whose agent has not converged its
// network (Ready not True): its flows would not be installed, and the trace would only time out.
func notReady(wnn *networkv1alpha1.WindowsNodeNetwork) (reason, message string) {
	c := meta.FindStatusCondition(wnn.Status.Conditions, networkv1alpha1.ReadyCondition)
	if c != nil && c.Status == metav1.ConditionTrue {
		return "", ""
	}
	why := "its agent has not reported Ready"
	if c != nil {
		why = fmt.Sprintf("its agent reports Ready %s (%s)", c.Status, c.Reason)
	}
	return networkv1alpha1.PacketTraceReasonNodeNotReady,
		fmt.Sprintf("node %s is on the packet's path and %s: see `kubectl get windowsnodenetwork %s`", wnn.Name, why, wnn.Name)
}

// destination resolves the destination address and the winnet nodes the packet may reach (a Pod's
// node, a Service's endpoints' nodes, the node whose Pod CIDR holds an IP destination, or for another
// IP destination the holder of the Egress that applies to the source Pod). Nodes that run no winnet
// agent are left out: the packet is consumed before it leaves for them.
func (r *Reconciler) destination(ctx context.Context, tr *networkv1alpha1.PacketTrace, src sourcePod) (netip.Addr, []string, string, string, error) {
	ip, nodes, reason, msg, err := r.destinationNodes(ctx, tr)
	if err != nil || reason != "" {
		return netip.Addr{}, nil, reason, msg, err
	}
	if tr.Spec.Destination.IP != "" && len(nodes) == 0 {
		holder, err := r.egressHolder(ctx, src)
		if err != nil {
			return netip.Addr{}, nil, "", "", err
		}
		if holder != "" {
			nodes = []string{holder}
		}
	}
	var path []string
	for _, n := range sortedUnique(nodes) {
		wnn, err := r.nodeNetwork(ctx, n)
		if err != nil {
			return netip.Addr{}, nil, "", "", err
		}
		if wnn == nil {
			continue
		}
		if reason, msg := notReady(wnn); reason != "" {
			return netip.Addr{}, nil, reason, msg, nil
		}
		path = append(path, n)
	}
	return ip, path, "", "", nil
}

func (r *Reconciler) destinationNodes(ctx context.Context, tr *networkv1alpha1.PacketTrace) (netip.Addr, []string, string, string, error) {
	d := tr.Spec.Destination
	switch {
	case d.Pod != nil:
		key := types.NamespacedName{Namespace: orDefault(d.Pod.Namespace, tr.Namespace), Name: d.Pod.Name}
		pod := &corev1.Pod{}
		if err := r.Reader.Get(ctx, key, pod); err != nil {
			if apierrors.IsNotFound(err) {
				return netip.Addr{}, nil, networkv1alpha1.PacketTraceReasonDestinationUnknown, fmt.Sprintf("destination Pod %s does not exist", key), nil
			}
			return netip.Addr{}, nil, "", "", fmt.Errorf("reading destination Pod %s: %w", key, err)
		}
		ip := podIPv4(pod)
		if !ip.IsValid() {
			return netip.Addr{}, nil, networkv1alpha1.PacketTraceReasonDestinationUnknown, fmt.Sprintf("destination Pod %s has no IPv4 address", key), nil
		}
		if pod.Spec.HostNetwork || pod.Spec.NodeName == "" {
			return ip, nil, "", "", nil
		}
		return ip, []string{pod.Spec.NodeName}, "", "", nil
	case d.Service != nil:
		key := types.NamespacedName{Namespace: orDefault(d.Service.Namespace, tr.Namespace), Name: d.Service.Name}
		svc := &corev1.Service{}
		if err := r.Reader.Get(ctx, key, svc); err != nil {
			if apierrors.IsNotFound(err) {
				return netip.Addr{}, nil, networkv1alpha1.PacketTraceReasonDestinationUnknown, fmt.Sprintf("destination Service %s does not exist", key), nil
			}
			return netip.Addr{}, nil, "", "", fmt.Errorf("reading destination Service %s: %w", key, err)
		}
		ip := serviceIPv4(svc)
		if !ip.IsValid() {
			return netip.Addr{}, nil, networkv1alpha1.PacketTraceReasonDestinationUnknown,
				fmt.Sprintf("destination Service %s has no IPv4 ClusterIP (ClusterIPs %v): winnet's Windows data plane serves IPv4 only", key, svc.Spec.ClusterIPs), nil
		}
		slices := &discoveryv1.EndpointSliceList{}
		if err := r.Reader.List(ctx, slices, client.InNamespace(key.Namespace), client.MatchingLabels{discoveryv1.LabelServiceName: key.Name}); err != nil {
			return netip.Addr{}, nil, "", "", fmt.Errorf("listing the EndpointSlices of Service %s: %w", key, err)
		}
		var nodes []string
		for _, s := range slices.Items {
			for _, e := range s.Endpoints {
				if e.NodeName != nil && *e.NodeName != "" {
					nodes = append(nodes, *e.NodeName)
				}
			}
		}
		return ip, nodes, "", "", nil
	}
	ip, err := netip.ParseAddr(string(d.IP))
	if err != nil || !ip.Is4() {
		return netip.Addr{}, nil, networkv1alpha1.PacketTraceReasonDestinationUnknown, fmt.Sprintf("destination %q is not an IPv4 address", d.IP), nil
	}
	// An address in a node's Pod CIDR: that node reports too. The cached Nodes say it; no Pod is
	// looked up (nor named).
	node, err := r.podCIDRNode(ctx, ip)
	if err != nil || node == "" {
		return ip, nil, "", "", err
	}
	return ip, []string{node}, "", "", nil
}

// podCIDRNode returns the node whose Pod CIDR holds ip, "" when none does.
func (r *Reconciler) podCIDRNode(ctx context.Context, ip netip.Addr) (string, error) {
	nodes := &corev1.NodeList{}
	if err := r.Client.List(ctx, nodes); err != nil {
		return "", fmt.Errorf("listing Nodes: %w", err)
	}
	for _, n := range nodes.Items {
		cidrs := n.Spec.PodCIDRs
		if len(cidrs) == 0 && n.Spec.PodCIDR != "" {
			cidrs = []string{n.Spec.PodCIDR}
		}
		for _, c := range cidrs {
			if p, err := netip.ParsePrefix(c); err == nil && p.Contains(ip) {
				return n.Name, nil
			}
		}
	}
	return "", nil
}

// running decides the verdict once a node on the path reported the packet's end, or fails the
// trace at its timeout (counted from its start).
func (r *Reconciler) running(ctx context.Context, tr *networkv1alpha1.PacketTrace) (ctrl.Result, error) {
	v, by, done := PathVerdict(&tr.Status)
	if done {
		base := tr.DeepCopy()
		now := metav1.NewTime(r.now())
		tr.Status.Phase, tr.Status.Verdict, tr.Status.DroppedBy, tr.Status.CompletionTime = networkv1alpha1.PacketTraceSucceeded, v, by, &now
		tr.Status.Reason, tr.Status.Message = networkv1alpha1.PacketTraceReasonCompleted, summary(v, by)
		if err := r.writeStatus(ctx, tr, base); err != nil {
			return ctrl.Result{}, err
		}
		ctrl.LoggerFrom(ctx).Info("PacketTrace finished", "verdict", v)
		return ctrl.Result{}, r.serveNext(ctx)
	}
	start := tr.CreationTimestamp.Time
	if tr.Status.StartTime != nil {
		start = tr.Status.StartTime.Time
	}
	left := start.Add(timeout(tr)).Sub(r.now())
	if left <= 0 {
		return r.fail(ctx, tr, networkv1alpha1.PacketTraceReasonTimeout,
			fmt.Sprintf("no node reported the packet's end within %v: a node on the path may not run winnet or its agent is not ready, or a drop the trace cannot report took the packet (see docs/troubleshooting.md, Reports)", timeout(tr)))
	}
	return ctrl.Result{RequeueAfter: left}, nil
}

// view is the unfinished traces of the cluster: the cache's, with the phases and tags this
// reconciler wrote since (the cache lags its own writes).
type view struct {
	traces []viewed
}

type viewed struct {
	key     types.NamespacedName
	created time.Time
	phase   networkv1alpha1.PacketTracePhase
	tag     int32
}

func (r *Reconciler) view(ctx context.Context) (*view, error) {
	all := &networkv1alpha1.PacketTraceList{}
	if err := r.Client.List(ctx, all); err != nil {
		return nil, fmt.Errorf("listing PacketTraces: %w", err)
	}
	v := &view{}
	for i := range all.Items {
		o := &all.Items[i]
		key := client.ObjectKeyFromObject(o)
		phase, tag := o.Status.Phase, o.Status.Tag
		if t, ok := r.traces[key]; ok && t.uid == o.UID {
			phase, tag = t.phase, t.tag
		}
		if phase == networkv1alpha1.PacketTracePending || phase == networkv1alpha1.PacketTraceRunning {
			v.traces = append(v.traces, viewed{key: key, created: o.CreationTimestamp.Time, phase: phase, tag: tag})
		}
	}
	return v, nil
}

// admit counts a trace just admitted as Pending.
func (v *view) admit(tr *networkv1alpha1.PacketTrace) {
	v.traces = append(v.traces, viewed{key: client.ObjectKeyFromObject(tr), created: tr.CreationTimestamp.Time, phase: networkv1alpha1.PacketTracePending})
}

// unfinished counts the Pending and Running traces of a namespace, or of the cluster for "".
func (v *view) unfinished(namespace string) int {
	n := 0
	for _, t := range v.traces {
		if namespace == "" || t.key.Namespace == namespace {
			n++
		}
	}
	return n
}

// freeTag returns the lowest tag no Running trace holds, 0 when all are held.
func (v *view) freeTag(count int32) int32 {
	taken := map[int32]bool{}
	for _, t := range v.traces {
		if t.phase == networkv1alpha1.PacketTraceRunning && t.tag != 0 {
			taken[t.tag] = true
		}
	}
	for tag := int32(1); tag <= count; tag++ {
		if !taken[tag] {
			return tag
		}
	}
	return 0
}

// next returns the Pending trace whose turn it is: the oldest of the first namespace after
// lastServed (in name order, wrapping) that has one.
func (v *view) next(lastServed string) (types.NamespacedName, bool) {
	oldest := map[string]viewed{}
	for _, t := range v.traces {
		if t.phase != networkv1alpha1.PacketTracePending {
			continue
		}
		o, ok := oldest[t.key.Namespace]
		if !ok || t.created.Before(o.created) || (t.created.Equal(o.created) && t.key.Name < o.key.Name) {
			oldest[t.key.Namespace] = t
		}
	}
	if len(oldest) == 0 {
		return types.NamespacedName{}, false
	}
	namespaces := make([]string, 0, len(oldest))
	for ns := range oldest {
		namespaces = append(namespaces, ns)
	}
	slices.Sort(namespaces)
	i, _ := slices.BinarySearch(namespaces, lastServed)
	if i < len(namespaces) && namespaces[i] == lastServed {
		i++
	}
	return oldest[namespaces[i%len(namespaces)]].key, true
}

func timeout(tr *networkv1alpha1.PacketTrace) time.Duration {
	s := tr.Spec.TimeoutSeconds
	if s <= 0 {
		s = networkv1alpha1.DefaultPacketTraceTimeoutSeconds
	}
	return time.Duration(s) * time.Second
}

func summary(v networkv1alpha1.PacketTraceVerdict, by *networkv1alpha1.PolicyRuleReference) string {
	if by == nil {
		return string(v)
	}
	switch {
	case by.Name == "" && by.Namespace != "":
		// Redacted to the trace's disclosure (disclosure.go): the namespace is all it may name.
		return strings.TrimSpace(fmt.Sprintf("%s by a %s of namespace %s %s", v, by.Kind, by.Namespace, by.Rule))
	case by.Name == "":
		return strings.TrimSpace(fmt.Sprintf("%s by a %s (not named: the trace's disclosure is Namespace) %s", v, by.Kind, by.Rule))
	case by.Namespace == "":
		// A ClusterNetworkPolicy is cluster-scoped: no namespace.
		return fmt.Sprintf("%s by %s %s %s", v, by.Kind, by.Name, by.Rule)
	}
	return fmt.Sprintf("%s by %s %s/%s %s", v, by.Kind, by.Namespace, by.Name, by.Rule)
}

func podIPv4(p *corev1.Pod) netip.Addr {
	for _, ip := range p.Status.PodIPs {
		if a, err := netip.ParseAddr(ip.IP); err == nil && a.Is4() {
			return a
		}
	}
	if a, err := netip.ParseAddr(p.Status.PodIP); err == nil && a.Is4() {
		return a
	}
	return netip.Addr{}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func sortedUnique(s []string) []string {
	slices.Sort(s)
	return slices.Compact(s)
}

// serviceIPv4 is the Service's IPv4 ClusterIP, whatever the order of its ClusterIPs (a dual-stack
// Service may list its IPv6 one first); the zero Addr when it has none.
func serviceIPv4(svc *corev1.Service) netip.Addr {
	for _, s := range append([]string{svc.Spec.ClusterIP}, svc.Spec.ClusterIPs...) {
		if ip, err := netip.ParseAddr(s); err == nil && ip.Is4() {
			return ip
		}
	}
	return netip.Addr{}
}
