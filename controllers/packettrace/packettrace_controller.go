package packettrace

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
)

// Limits of the cluster-side reconciler.
const (
	// DefaultMaxPerNamespace is how many traces may be Pending or Running in one namespace at once;
	// more fail with TooManyTraces.
	DefaultMaxPerNamespace = 8
	// DefaultTTL is how long a finished trace is kept before it is deleted.
	DefaultTTL = time.Hour
	// maxExpectedNodes caps status.nodes: the nodes whose agents must have installed the trace's
	// flows before the source injects the packet.
	maxExpectedNodes = networkv1alpha1.MaxPacketTraceHops
	// sourcePortBase and sourcePortSpan are where a trace's source port is drawn from.
	sourcePortBase = 33000
	sourcePortSpan = 27000
)

// Reconciler is winnet-controller's side of PacketTraces: it checks a new trace's source and
// destination, gives it a tag (a DSCP value no running trace holds), decides the verdict from the
// nodes' hops, fails traces past their timeout and deletes finished ones after TTL. It runs one
// worker, so tags are given out one trace at a time; tags given since the cache last saw them are
// remembered in tags.
type Reconciler struct {
	Client client.Client
	// Reader reads the Pods, Services, EndpointSlices and WindowsNodeNetworks a trace names, past
	// any cache: a trace starts rarely, and caching every Pod of the cluster would cost
	// winnet-controller more than the reads.
	Reader client.Reader
	// Clock is the time source; nil is the real clock.
	Clock clock.PassiveClock
	// MaxPerNamespace and TTL: zero means the defaults.
	MaxPerNamespace int
	TTL             time.Duration

	// tags are the tags this reconciler gave to traces still running, by trace (a trace deleted
	// while it runs gives its tag back by name: its UID is gone with it).
	tags map[types.NamespacedName]givenTag
}

// givenTag is a tag given to one trace (the UID tells a trace from a new one of the same name).
type givenTag struct {
	uid types.UID
	tag int32
}

// SetupWithManager registers the reconciler.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("packettrace").For(&networkv1alpha1.PacketTrace{}).Complete(r)
}

func (r *Reconciler) now() time.Time {
	if r.Clock == nil {
		return time.Now()
	}
	return r.Clock.Now()
}

// Reconcile moves one trace along: Pending -> Running -> Succeeded or Failed -> deleted.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	tr := &networkv1alpha1.PacketTrace{}
	if err := r.Client.Get(ctx, req.NamespacedName, tr); err != nil {
		if apierrors.IsNotFound(err) {
			delete(r.tags, req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if r.tags == nil {
		r.tags = map[types.NamespacedName]givenTag{}
	}
	if g, ok := r.tags[req.NamespacedName]; ok && g.uid != tr.UID {
		delete(r.tags, req.NamespacedName) // the trace it was given to was deleted, this is a new one
	}
	switch tr.Status.Phase {
	case networkv1alpha1.PacketTraceSucceeded, networkv1alpha1.PacketTraceFailed:
		delete(r.tags, req.NamespacedName)
		return r.collect(ctx, tr)
	case networkv1alpha1.PacketTraceRunning:
		return r.running(ctx, tr)
	}
	return r.start(ctx, tr)
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

// fail ends the trace with a reason.
func (r *Reconciler) fail(ctx context.Context, tr *networkv1alpha1.PacketTrace, reason, message string) (ctrl.Result, error) {
	base := tr.DeepCopy()
	now := metav1.NewTime(r.now())
	tr.Status.Phase, tr.Status.Reason, tr.Status.Message, tr.Status.CompletionTime = networkv1alpha1.PacketTraceFailed, reason, message, &now
	delete(r.tags, client.ObjectKeyFromObject(tr))
	if err := r.Client.Status().Patch(ctx, tr, client.MergeFrom(base)); err != nil {
		return ctrl.Result{}, fmt.Errorf("writing PacketTrace status: %w", err)
	}
	return ctrl.Result{RequeueAfter: time.Second}, nil
}

// start checks a new trace and tags it.
func (r *Reconciler) start(ctx context.Context, tr *networkv1alpha1.PacketTrace) (ctrl.Result, error) {
	all := &networkv1alpha1.PacketTraceList{}
	if err := r.Client.List(ctx, all); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing PacketTraces: %w", err)
	}
	taken := map[int32]bool{}
	active := 0
	for i := range all.Items {
		o := &all.Items[i]
		if o.UID == tr.UID {
			continue
		}
		if o.Status.Phase == networkv1alpha1.PacketTraceRunning && o.Status.Tag != 0 {
			taken[o.Status.Tag] = true
		}
		if o.Namespace == tr.Namespace && (o.Status.Phase == networkv1alpha1.PacketTraceRunning || o.Status.Phase == networkv1alpha1.PacketTracePending) {
			active++
		}
	}
	for key, g := range r.tags {
		if key != client.ObjectKeyFromObject(tr) {
			taken[g.tag] = true
		}
	}
	limit := r.MaxPerNamespace
	if limit == 0 {
		limit = DefaultMaxPerNamespace
	}
	if tr.Status.Phase == "" && active >= limit {
		return r.fail(ctx, tr, networkv1alpha1.PacketTraceReasonTooManyTraces,
			fmt.Sprintf("namespace %s has %d PacketTraces pending or running, the most allowed: wait for them to finish or delete some", tr.Namespace, active))
	}
	src, reason, msg, err := r.source(ctx, tr)
	if err != nil || reason != "" {
		if err != nil {
			return ctrl.Result{}, err
		}
		return r.fail(ctx, tr, reason, msg)
	}
	dst, nodes, reason, msg, err := r.destination(ctx, tr)
	if err != nil || reason != "" {
		if err != nil {
			return ctrl.Result{}, err
		}
		return r.fail(ctx, tr, reason, msg)
	}
	tag := int32(0)
	for t := int32(1); t <= networkv1alpha1.MaxPacketTraceTags; t++ {
		if !taken[t] {
			tag = t
			break
		}
	}
	base := tr.DeepCopy()
	if tag == 0 {
		if tr.Status.Phase == networkv1alpha1.PacketTracePending {
			return ctrl.Result{RequeueAfter: 2 * time.Second}, nil
		}
		tr.Status.Phase, tr.Status.Reason = networkv1alpha1.PacketTracePending, networkv1alpha1.PacketTraceReasonNoTag
		tr.Status.Message = fmt.Sprintf("all %d trace tags are held by running traces; this one starts when one finishes", networkv1alpha1.MaxPacketTraceTags)
		if err := r.Client.Status().Patch(ctx, tr, client.MergeFrom(base)); err != nil {
			return ctrl.Result{}, fmt.Errorf("writing PacketTrace status: %w", err)
		}
		return ctrl.Result{RequeueAfter: 2 * time.Second}, nil
	}
	now := metav1.NewTime(r.now())
	nodes = append([]string{src.node}, slices.DeleteFunc(nodes, func(n string) bool { return n == src.node })...)
	nodes = slices.Compact(nodes)
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
	r.tags[client.ObjectKeyFromObject(tr)] = givenTag{uid: tr.UID, tag: tag}
	if err := r.Client.Status().Patch(ctx, tr, client.MergeFrom(base)); err != nil {
		delete(r.tags, client.ObjectKeyFromObject(tr))
		return ctrl.Result{}, fmt.Errorf("writing PacketTrace status: %w", err)
	}
	ctrl.LoggerFrom(ctx).Info("Started a PacketTrace", "tag", tag, "sourceNode", src.node, "destination", dst, "nodes", nodes)
	return ctrl.Result{RequeueAfter: timeout(tr)}, nil
}

type sourcePod struct {
	node string
	ip   netip.Addr
}

// source finds the source Pod, its node (which must be a winnet node) and its IPv4 address.
func (r *Reconciler) source(ctx context.Context, tr *networkv1alpha1.PacketTrace) (sourcePod, string, string, error) {
	ref := tr.Spec.Source.Pod
	key := types.NamespacedName{Namespace: orDefault(ref.Namespace, tr.Namespace), Name: ref.Name}
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
	wnn := &networkv1alpha1.WindowsNodeNetwork{}
	if err := r.Reader.Get(ctx, types.NamespacedName{Name: pod.Spec.NodeName}, wnn); err != nil {
		if apierrors.IsNotFound(err) {
			return sourcePod{}, networkv1alpha1.PacketTraceReasonSourceNotWinnet, fmt.Sprintf("source Pod %s runs on node %s, which has no WindowsNodeNetwork: only winnet nodes inject trace packets", key, pod.Spec.NodeName), nil
		}
		return sourcePod{}, "", "", fmt.Errorf("reading WindowsNodeNetwork %s: %w", pod.Spec.NodeName, err)
	}
	ip := podIPv4(pod)
	if !ip.IsValid() {
		return sourcePod{}, networkv1alpha1.PacketTraceReasonSourceNotReady, fmt.Sprintf("source Pod %s has no IPv4 address yet", key), nil
	}
	return sourcePod{node: pod.Spec.NodeName, ip: ip}, "", "", nil
}

// destination resolves the destination address and the nodes the packet may reach (a Pod's node, a
// Service's endpoints' nodes).
func (r *Reconciler) destination(ctx context.Context, tr *networkv1alpha1.PacketTrace) (netip.Addr, []string, string, string, error) {
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
		ip, err := netip.ParseAddr(svc.Spec.ClusterIP)
		if err != nil || !ip.Is4() {
			return netip.Addr{}, nil, networkv1alpha1.PacketTraceReasonDestinationUnknown, fmt.Sprintf("destination Service %s has no IPv4 ClusterIP", key), nil
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
		return ip, sortedUnique(nodes), "", "", nil
	}
	ip, err := netip.ParseAddr(string(d.IP))
	if err != nil || !ip.Is4() {
		return netip.Addr{}, nil, networkv1alpha1.PacketTraceReasonDestinationUnknown, fmt.Sprintf("destination %q is not an IPv4 address", d.IP), nil
	}
	// A Pod's address: its node reports too.
	pods := &corev1.PodList{}
	if err := r.Reader.List(ctx, pods, client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("status.podIP", ip.String())}); err == nil {
		for _, p := range pods.Items {
			if !p.Spec.HostNetwork && p.Spec.NodeName != "" {
				return ip, []string{p.Spec.NodeName}, "", "", nil
			}
		}
	}
	return ip, nil, "", "", nil
}

// running decides the verdict once a node reported the packet's end, or fails the trace at its
// timeout.
func (r *Reconciler) running(ctx context.Context, tr *networkv1alpha1.PacketTrace) (ctrl.Result, error) {
	if tr.Status.Tag != 0 {
		r.tags[client.ObjectKeyFromObject(tr)] = givenTag{uid: tr.UID, tag: tr.Status.Tag}
	}
	v, by, done := Verdict(tr.Status.Hops, tr.Status.SourceNode)
	if done {
		base := tr.DeepCopy()
		now := metav1.NewTime(r.now())
		tr.Status.Phase, tr.Status.Verdict, tr.Status.DroppedBy, tr.Status.CompletionTime = networkv1alpha1.PacketTraceSucceeded, v, by, &now
		tr.Status.Reason, tr.Status.Message = networkv1alpha1.PacketTraceReasonCompleted, summary(v, by)
		delete(r.tags, client.ObjectKeyFromObject(tr))
		if err := r.Client.Status().Patch(ctx, tr, client.MergeFrom(base)); err != nil {
			return ctrl.Result{}, fmt.Errorf("writing PacketTrace status: %w", err)
		}
		ctrl.LoggerFrom(ctx).Info("PacketTrace finished", "verdict", v)
		return ctrl.Result{RequeueAfter: time.Second}, nil
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

func timeout(tr *networkv1alpha1.PacketTrace) time.Duration {
	s := tr.Spec.TimeoutSeconds
	if s <= 0 {
		s = networkv1alpha1.DefaultPacketTraceTimeoutSeconds
	}
	return time.Duration(s) * time.Second
}

func summary(v networkv1alpha1.PacketTraceVerdict, by *networkv1alpha1.PolicyRuleReference) string {
	if by != nil {
		// A ClusterNetworkPolicy is cluster-scoped: no namespace.
		name := by.Name
		if by.Namespace != "" {
			name = by.Namespace + "/" + by.Name
		}
		return fmt.Sprintf("%s by %s %s %s", v, by.Kind, name, by.Rule)
	}
	return string(v)
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
