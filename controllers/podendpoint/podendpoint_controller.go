package podendpoint

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/nodenetwork"
)

// Finalizer keeps a PodEndpoint until the agent has torn its attachment down.
const Finalizer = "network.winnet.io/pod-endpoint"

const (
	// DefaultResyncPeriod is how often each Pod's attachment is checked for drift.
	DefaultResyncPeriod = 10 * time.Second
	// maxRetryDelay caps the backoff of failed reconciles, so that PodEndpoints are written soon
	// after an unreachable API server comes back.
	maxRetryDelay = 5 * time.Second
)

// Reconciler records each Pod's attachment as its PodEndpoint (named "<node>.<Pod UID>", owned by the Pod),
// repairs the attachment's drift, and tears it down — releasing the address — when the Pod is gone.
// Its work items are Pods; the CNI handler wakes it after every ADD and DEL, so ADD never waits for
// the API server: a PodEndpoint that cannot be written is retried with backoff.
type Reconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	NodeName string
	Pods     *Pods
	// ResyncPeriod is the drift check period; zero means DefaultResyncPeriod.
	ResyncPeriod time.Duration
}

// SetupWithManager registers the reconciler for the node's Pods and PodEndpoints, the CNI
// handler's wake-ups and changes of the realised node network (which resync every Pod's flows), and
// the start-up pass of Pods.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.ResyncPeriod == 0 {
		r.ResyncPeriod = DefaultResyncPeriod
	}
	wake := &wakeups{}
	r.Pods.onChange(wake.add)
	// A node network realised anew (another bridge connection, another pipeline) resyncs every
	// Pod's flows.
	everyPod := nodenetwork.WakeSource(nil, func(q nodenetwork.Queue) {
		for _, a := range r.Pods.Store().List() {
			q.Add(reconcile.Request{NamespacedName: a.Pod()})
		}
	}, r.Pods.opts.State.Subscribe())
	if err := mgr.Add(r.Pods); err != nil {
		return fmt.Errorf("adding the start-up pass of Pods: %w", err)
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &networkv1alpha1.PodEndpoint{}, podNameIndex,
		func(o client.Object) []string { return []string{o.(*networkv1alpha1.PodEndpoint).Spec.PodName} }); err != nil {
		return fmt.Errorf("indexing PodEndpoints by Pod name: %w", err)
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("podendpoint").
		Watches(&networkv1alpha1.PodEndpoint{}, handler.EnqueueRequestsFromMapFunc(podOfEndpoint), builder.WithPredicates(notOwnStatus())).
		Watches(&corev1.Pod{}, &handler.EnqueueRequestForObject{}, builder.WithPredicates(podLifecycle())).
		WatchesRawSource(source.Func(wake.start)).
		WatchesRawSource(everyPod).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: 4,
			RateLimiter:             workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](50*time.Millisecond, maxRetryDelay),
		}).
		Complete(r)
}

// podOfEndpoint maps a PodEndpoint to its Pod, the reconciler's work item.
func podOfEndpoint(_ context.Context, o client.Object) []reconcile.Request {
	pep, ok := o.(*networkv1alpha1.PodEndpoint)
	if !ok || pep.Spec.PodName == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: pep.Namespace, Name: pep.Spec.PodName}}}
}

// podLifecycle passes a Pod's creation and deletion and the start of its termination.
func podLifecycle() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			return e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero() ||
				e.ObjectOld.GetUID() != e.ObjectNew.GetUID()
		},
	}
}

// notOwnStatus passes PodEndpoint events except updates of the status alone, which this reconciler
// writes itself.
func notOwnStatus() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			return e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() ||
				!e.ObjectNew.GetDeletionTimestamp().IsZero() ||
				!slices.Equal(e.ObjectOld.GetFinalizers(), e.ObjectNew.GetFinalizers())
		},
	}
}

// wakeups feeds the reconciler's queue from the CNI handler without ever blocking it.
type wakeups struct {
	mu      sync.Mutex
	q       workqueue.TypedRateLimitingInterface[reconcile.Request]
	pending []reconcile.Request
}

func (w *wakeups) start(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.q = q
	for _, req := range w.pending {
		q.Add(req)
	}
	w.pending = nil
	return nil
}

func (w *wakeups) add(pod types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	req := reconcile.Request{NamespacedName: pod}
	if w.q == nil {
		w.pending = append(w.pending, req)
		return
	}
	w.q.Add(req)
}

// Reconcile converges one Pod: its live attachment is repaired and recorded as its PodEndpoint;
// attachments whose Pod is gone are torn down; PodEndpoints without attachment are removed.
//
// A Pod has one PodEndpoint, named PodEndpointName(node, Pod UID). Others recorded for the same Pod
// name on this node are either of an earlier Pod of that name (their attachment is torn down) or
// written by an earlier agent under the Pod's name: those are adopted — the new record is written
// first, then the old one is removed — without touching the Pod's attachment.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pod := &corev1.Pod{}
	if err := r.Client.Get(ctx, req.NamespacedName, pod); apierrors.IsNotFound(err) {
		pod = nil
	} else if err != nil {
		return ctrl.Result{}, fmt.Errorf("getting Pod %s: %w", req.NamespacedName, err)
	}
	peps, err := r.podEndpointsOf(ctx, req.NamespacedName)
	if err != nil {
		return ctrl.Result{}, err
	}
	var pep *networkv1alpha1.PodEndpoint
	var others []*networkv1alpha1.PodEndpoint
	for _, p := range peps {
		if pod != nil && p.Name == networkv1alpha1.PodEndpointName(r.NodeName, pod.UID) {
			pep = p
		} else {
			others = append(others, p)
		}
	}

	live, gone := r.classify(pod, peps, r.Pods.Store().ByPod(req.NamespacedName))
	for _, a := range gone {
		if err := r.tearDown(ctx, pod, recordOf(peps, a), a); err != nil {
			return ctrl.Result{}, err
		}
	}
	if live == nil {
		for _, p := range peps {
			if err := r.deletePodEndpoint(ctx, p); err != nil {
				return ctrl.Result{}, err
			}
		}
		return ctrl.Result{}, nil
	}
	if err := r.reconcileLive(ctx, pod, pep, live); err != nil {
		return ctrl.Result{}, err
	}
	// The Pod's record exists now: the earlier records go (an earlier agent's, an earlier Pod's).
	for _, p := range others {
		if err := r.deletePodEndpoint(ctx, p); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{RequeueAfter: r.ResyncPeriod}, nil
}

// podNameIndex indexes the node's PodEndpoints by spec.podName: the reconciler's work items are Pods.
const podNameIndex = "spec.podName"

// podEndpointsOf returns the node's PodEndpoints recorded for the Pod name (the agent's cache holds
// only its node's), whatever they are named.
func (r *Reconciler) podEndpointsOf(ctx context.Context, pod types.NamespacedName) ([]*networkv1alpha1.PodEndpoint, error) {
	list := &networkv1alpha1.PodEndpointList{}
	if err := r.Client.List(ctx, list, client.InNamespace(pod.Namespace), client.MatchingFields{podNameIndex: pod.Name}); err != nil {
		return nil, fmt.Errorf("listing the PodEndpoints of Pod %s: %w", pod, err)
	}
	out := make([]*networkv1alpha1.PodEndpoint, 0, len(list.Items))
	for i := range list.Items {
		if list.Items[i].Spec.NodeName == r.NodeName {
			out = append(out, &list.Items[i])
		}
	}
	return out, nil
}

// recordOf returns the PodEndpoint that recorded the attachment's sandbox, else any of them.
func recordOf(peps []*networkv1alpha1.PodEndpoint, a *Attachment) *networkv1alpha1.PodEndpoint {
	for _, p := range peps {
		if p.Spec.SandboxID == a.SandboxID {
			return p
		}
	}
	if len(peps) > 0 {
		return peps[0]
	}
	return nil
}

// classify sorts a Pod's attachments: the live one (the newest whose Pod is on this node) and those
// whose Pod is gone — seen before, or recorded in one of its PodEndpoints, and no longer there or
// replaced by another Pod of the same name. An attachment whose Pod has not been seen is neither:
// the Pod object may reach the cache after the sandbox's ADD, and if it never does, the runtime's
// DEL and GC remove the attachment.
func (r *Reconciler) classify(pod *corev1.Pod, peps []*networkv1alpha1.PodEndpoint, atts []*Attachment) (live *Attachment, gone []*Attachment) {
	recorded := func(a *Attachment) bool {
		return slices.ContainsFunc(peps, func(p *networkv1alpha1.PodEndpoint) bool { return p.Spec.SandboxID == a.SandboxID })
	}
	slices.SortFunc(atts, func(a, b *Attachment) int { return b.Created.Compare(a.Created) })
	for _, a := range atts {
		switch {
		case a.Deleting:
			gone = append(gone, a) // a DEL that failed half-way
		case r.isPodOf(pod, a) && live == nil:
			live = a
		case r.isPodOf(pod, a):
			gone = append(gone, a) // an older sandbox of the same Pod whose DEL never came
		case a.PodSeen || recorded(a):
			gone = append(gone, a)
		}
	}
	return live, gone
}

// isPodOf reports whether pod is the Pod the attachment was made for.
func (r *Reconciler) isPodOf(pod *corev1.Pod, a *Attachment) bool {
	return pod != nil && pod.Spec.NodeName == r.NodeName && (a.PodUID == "" || a.PodUID == string(pod.UID))
}

// reconcileLive repairs the live attachment and writes the Pod's PodEndpoint and its status.
func (r *Reconciler) reconcileLive(ctx context.Context, pod *corev1.Pod, pep *networkv1alpha1.PodEndpoint, a *Attachment) error {
	repaired, repairErr := r.repair(ctx, pod, a)
	for _, reason := range repaired {
		r.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, reason, "Repair", "Repaired the network of sandbox %s (%s)", a.SandboxID, a.EndpointName)
	}
	if pep != nil && !pep.DeletionTimestamp.IsZero() {
		// Deleted while the Pod lives: let it go; the next pass records the attachment anew.
		if err := r.deletePodEndpoint(ctx, pep); err != nil {
			return err
		}
		return errors.Join(repairErr, errRecreate)
	}
	pep, err := r.ensurePodEndpoint(ctx, pod, pep, a)
	if err != nil {
		return errors.Join(repairErr, err)
	}
	before := pep.DeepCopy()
	setStatus(pep, a, repaired, repairErr)
	if equality.Semantic.DeepEqual(before.Status, pep.Status) {
		return repairErr
	}
	if err := r.Client.Status().Patch(ctx, pep, client.MergeFrom(before)); err != nil && !apierrors.IsNotFound(err) {
		return errors.Join(repairErr, fmt.Errorf("writing the status of PodEndpoint %s: %w", client.ObjectKeyFromObject(pep), err))
	}
	return repairErr
}

// errRecreate retries a Pod whose PodEndpoint was deleted under it.
var errRecreate = errors.New("PodEndpoint was deleted while its Pod lives; recording it again")

// repair converges the attachment's host state under the sandbox's lock, and records the Pod's UID
// the first time the Pod is seen.
func (r *Reconciler) repair(ctx context.Context, pod *corev1.Pod, a *Attachment) ([]string, error) {
	p := r.Pods
	p.sweep.RLock()
	defer p.sweep.RUnlock()
	defer p.locks.Lock(a.SandboxID)()
	cur, ok := p.Store().Get(a.SandboxID)
	if !ok || cur.Deleting {
		return nil, fmt.Errorf("sandbox %s is being detached", a.SandboxID)
	}
	*a = *cur
	if !a.PodSeen || a.PodUID == "" {
		a.PodSeen, a.PodUID = true, string(pod.UID)
		if err := p.Store().Put(a); err != nil {
			return nil, err
		}
	}
	n, err := p.node(ctx)
	if err != nil {
		return nil, err
	}
	// Wake-ups right after ADD find the attachment just made: HNS and OVS are left alone until
	// the next resync, unless the node network was realised anew.
	if p.recentlyVerified(a.SandboxID, n.realized.Flows, r.ResyncPeriod/2) {
		return nil, nil
	}
	return p.repair(ctx, n, a)
}

// ensurePodEndpoint creates or updates the PodEndpoint of the attachment, owned by the Pod and
// carrying the finalizer.
func (r *Reconciler) ensurePodEndpoint(ctx context.Context, pod *corev1.Pod, pep *networkv1alpha1.PodEndpoint, a *Attachment) (*networkv1alpha1.PodEndpoint, error) {
	spec := networkv1alpha1.PodEndpointSpec{
		PodName: pod.Name, PodUID: string(pod.UID), NodeName: r.NodeName, SandboxID: a.SandboxID, InterfaceName: a.IfName,
		IPs: []networkv1alpha1.InterfaceAddress{networkv1alpha1.InterfaceAddress(a.IP.String())},
		MAC: networkv1alpha1.MACAddress(a.MAC), Gateway: networkv1alpha1.IPAddress(a.Gateway.String()),
	}
	owner := metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID, Controller: ptr.To(true)}
	if pep == nil {
		pep = &networkv1alpha1.PodEndpoint{
			ObjectMeta: metav1.ObjectMeta{
				Name: networkv1alpha1.PodEndpointName(r.NodeName, pod.UID), Namespace: pod.Namespace,
				OwnerReferences: []metav1.OwnerReference{owner}, Finalizers: []string{Finalizer},
			},
			Spec: spec,
		}
		if err := r.Client.Create(ctx, pep); err != nil {
			return nil, fmt.Errorf("creating PodEndpoint %s/%s of Pod %s: %w", pod.Namespace, pep.Name, pod.Name, err)
		}
		return pep, nil
	}
	before := pep.DeepCopy()
	pep.Spec = spec
	controllerutil.AddFinalizer(pep, Finalizer)
	if !slices.ContainsFunc(pep.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == pod.UID }) {
		pep.OwnerReferences = append(pep.OwnerReferences, owner)
	}
	if equalObjects(before, pep) {
		return pep, nil
	}
	if err := r.Client.Patch(ctx, pep, client.MergeFrom(before)); err != nil {
		return nil, fmt.Errorf("updating PodEndpoint %s: %w", client.ObjectKeyFromObject(pep), err)
	}
	return pep, nil
}

func equalObjects(a, b *networkv1alpha1.PodEndpoint) bool {
	return slices.Equal(a.Finalizers, b.Finalizers) && len(a.OwnerReferences) == len(b.OwnerReferences) &&
		a.Spec.SandboxID == b.Spec.SandboxID && a.Spec.MAC == b.Spec.MAC && a.Spec.Gateway == b.Spec.Gateway &&
		a.Spec.InterfaceName == b.Spec.InterfaceName && slices.Equal(a.Spec.IPs, b.Spec.IPs)
}
