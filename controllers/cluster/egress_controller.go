package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/egress"
)

// egressPass is the only work item of EgressReconciler: every Egress is decided in one pass, since
// where one goes depends on the others (spreading, the oldest keeping an IP or a Pod).
type egressPass struct{}

// EgressReconciler assigns every Egress to a node (egress.Assign) and writes its status: node,
// Assigned, Ready (the holder reports the egress IP realised in its WindowsNodeNetwork's status) and
// Superseded (some of its Pods are selected by an older Egress). It recomputes every Egress on any
// change of Egresses, Nodes, WindowsNodeNetworks, Pods' and Namespaces' labels; it writes only the
// statuses that changed.
//
// Fencing (docs/egress.md): a node is eligible only while its agent renews its Egress Lease in
// LeaseNamespace, and an Egress moves away from a node only once that node has surely given the IP
// up (fenceMoves): never two holders at once.
type EgressReconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	// LeaseNamespace is winnet's namespace, where the agents renew their Egress Leases; the manager's
	// cache must hold the Leases of that namespace (and may not hold others: the Role is namespaced).
	LeaseNamespace string
	// Now is the clock (time.Now when nil).
	Now func() time.Time

	leases leaseTracker
	// firstSeen is when each Egress not placed yet was first seen (settling).
	firstSeen map[string]time.Time
	// pods holds the Pods' labels while two or more Egresses exist (egress_pods.go).
	pods *egressPods

	queueMu sync.Mutex
	// queue is the controller's work queue, which the Pod watch wakes.
	queue workqueue.TypedRateLimitingInterface[egressPass]
}

// SetupWithManager registers the reconciler. Pods are not in the manager's cache: the reconciler
// watches their labels itself, and only while it needs them (egressPods).
func (r *EgressReconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.leases.now = r.Now
	meta, err := metadata.NewForConfig(mgr.GetConfig())
	if err != nil {
		return fmt.Errorf("the metadata client of the Egresses' Pod watch: %w", err)
	}
	r.pods = &egressPods{client: meta, wake: r.wake}
	if err := mgr.Add(r.pods); err != nil {
		return err
	}
	all := handler.TypedEnqueueRequestsFromMapFunc(func(context.Context, client.Object) []egressPass { return []egressPass{{}} })
	start := source.TypedFunc[egressPass](func(_ context.Context, q workqueue.TypedRateLimitingInterface[egressPass]) error {
		r.queueMu.Lock()
		r.queue = q
		r.queueMu.Unlock()
		q.Add(egressPass{})
		return nil
	})
	return builder.TypedControllerManagedBy[egressPass](mgr).
		Named("egress-assignment").
		Watches(&networkv1alpha1.Egress{}, all).
		Watches(&networkv1alpha1.WindowsNodeNetwork{}, all).
		Watches(&corev1.Node{}, all).
		Watches(&corev1.Namespace{}, all, builder.OnlyMetadata).
		WatchesRawSource(source.TypedKind(mgr.GetCache(), &coordinationv1.Lease{}, r.leases.handler(),
			predicate.NewTypedPredicateFuncs(func(l *coordinationv1.Lease) bool { return l.Namespace == r.LeaseNamespace }))).
		WatchesRawSource(start).
		WithLogConstructor(func(*egressPass) logr.Logger {
			return mgr.GetLogger().WithValues("controller", "egress-assignment")
		}).
		Complete(r)
}

// wake queues a pass (the Pod watch's changes).
func (r *EgressReconciler) wake() {
	r.queueMu.Lock()
	q := r.queue
	r.queueMu.Unlock()
	if q != nil {
		q.Add(egressPass{})
	}
}

// Reconcile decides every Egress and writes the statuses that changed.
func (r *EgressReconciler) Reconcile(ctx context.Context, _ egressPass) (ctrl.Result, error) {
	egresses := &networkv1alpha1.EgressList{}
	if err := r.Client.List(ctx, egresses); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing Egresses: %w", err)
	}
	if len(egresses.Items) == 0 {
		return ctrl.Result{}, r.pods.set(ctx, false)
	}
	cluster, realised, err := r.observe(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	sights, now := r.leases.snapshot()
	for i := range cluster.Nodes {
		cluster.Nodes[i].LeaseExpired = leaseExpired(sights, cluster.Nodes[i].Name, now)
	}
	var compiled []egress.Compiled
	invalid := map[string]string{}
	for i := range egresses.Items {
		c, err := egress.Compile(&egresses.Items[i])
		if err != nil {
			invalid[egresses.Items[i].Name] = err.Error()
			continue
		}
		compiled = append(compiled, c)
	}
	decisions := egress.Assign(compiled, cluster)
	for name, msg := range invalid {
		decisions[name] = egress.Decision{Reason: networkv1alpha1.InvalidSpecReason, Message: msg}
	}
	recheck := fenceMoves(egresses.Items, decisions, realised, sights, now)
	if r.firstSeen == nil {
		r.firstSeen = map[string]time.Time{}
	}
	settle, settleRecheck := settling(compiled, cluster, r.firstSeen, now)
	if settleRecheck > 0 && (recheck == 0 || settleRecheck < recheck) {
		recheck = settleRecheck
	}
	superseded, err := r.superseded(ctx, compiled)
	if err != nil {
		return ctrl.Result{}, err
	}
	var errs []error
	for i := range egresses.Items {
		e := &egresses.Items[i]
		if settle[e.Name] {
			continue // decided once the nodes that may hold it have renewed their Leases
		}
		d := decisions[e.Name]
		ip, _ := netip.ParseAddr(string(e.Spec.EgressIP))
		ready := d.Assigned() && realised[d.Node][ip]
		if err := r.writeStatus(ctx, e, d, ready, superseded[e.Name]); err != nil {
			errs = append(errs, err)
		}
	}
	return ctrl.Result{RequeueAfter: recheck}, errors.Join(errs...)
}

// observe reads the winnet nodes and the cluster's addresses and CIDRs, and which egress IPs each
// node reports realised.
func (r *EgressReconciler) observe(ctx context.Context) (egress.Cluster, map[string]map[netip.Addr]bool, error) {
	nodes := &corev1.NodeList{}
	if err := r.Client.List(ctx, nodes, client.UnsafeDisableDeepCopy); err != nil {
		return egress.Cluster{}, nil, fmt.Errorf("listing Nodes: %w", err)
	}
	wnns := &networkv1alpha1.WindowsNodeNetworkList{}
	if err := r.Client.List(ctx, wnns, client.UnsafeDisableDeepCopy); err != nil {
		return egress.Cluster{}, nil, fmt.Errorf("listing WindowsNodeNetworks: %w", err)
	}
	c := egress.Cluster{NodeAddresses: map[netip.Addr]string{}}
	byName := map[string]*corev1.Node{}
	reserved := map[netip.Prefix]bool{}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		byName[n.Name] = n
		for _, a := range n.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil {
				c.NodeAddresses[ip] = n.Name
			}
		}
		for _, p := range n.Spec.PodCIDRs {
			if pfx, err := netip.ParsePrefix(p); err == nil {
				reserved[pfx.Masked()] = true
			}
		}
	}
	realised := map[string]map[netip.Addr]bool{}
	for i := range wnns.Items {
		w := &wnns.Items[i]
		if ip, err := netip.ParseAddr(string(w.Spec.NodeIP)); err == nil {
			c.NodeAddresses[ip] = w.Name
		}
		for _, list := range [][]networkv1alpha1.CIDR{w.Spec.PodCIDRs, w.Spec.ClusterCIDRs, w.Spec.ServiceCIDRs} {
			for _, p := range list {
				if pfx, err := netip.ParsePrefix(string(p)); err == nil {
					reserved[pfx.Masked()] = true
				}
			}
		}
		node := byName[w.Name]
		if node == nil || !w.DeletionTimestamp.IsZero() {
			continue
		}
		n := egress.Node{Name: w.Name, Labels: labels.Set(node.Labels),
			Ready:   nodeReady(node) && meta.IsStatusConditionTrue(w.Status.Conditions, networkv1alpha1.ReadyCondition),
			NoEncap: w.Spec.Encapsulation.Mode == networkv1alpha1.EncapsulationModeNoEncap}
		if pfx, err := netip.ParsePrefix(string(w.Status.NodeSubnet)); err == nil && pfx.Addr().Is4() {
			n.Subnet = pfx
		}
		c.Nodes = append(c.Nodes, n)
		realised[w.Name] = map[netip.Addr]bool{}
		for _, a := range w.Status.EgressIPs {
			if ip, err := netip.ParseAddr(string(a)); err == nil {
				realised[w.Name][ip] = true
			}
		}
	}
	for p := range reserved {
		c.Reserved = append(c.Reserved, p)
	}
	return c, realised, nil
}

// nodeReady reports whether the Node's kubelet reports it Ready.
func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// supersession is what Superseded says of an Egress: how many of the Pods it selects an older Egress
// takes, and one of those Egresses.
type supersession struct {
	pods int
	by   string
}

// superseded counts, for every Egress, the Pods it selects that an older Egress selects too (the
// older applies: egress.Applies).
func (r *EgressReconciler) superseded(ctx context.Context, compiled []egress.Compiled) (map[string]supersession, error) {
	out := map[string]supersession{}
	if len(compiled) < 2 {
		return out, r.pods.set(ctx, false)
	}
	if err := r.pods.set(ctx, true); err != nil {
		return nil, err
	}
	namespaces := &metav1.PartialObjectMetadataList{}
	namespaces.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NamespaceList"))
	if err := r.Client.List(ctx, namespaces, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing Namespaces: %w", err)
	}
	nsLabels := map[string]labels.Set{}
	for i := range namespaces.Items {
		nsLabels[namespaces.Items[i].Name] = namespaces.Items[i].Labels
	}
	for _, p := range r.pods.list() {
		ns, ok := nsLabels[p.Namespace]
		if !ok {
			continue
		}
		applies, found := egress.Applies(compiled, p.Labels, ns)
		if !found {
			continue
		}
		for _, c := range compiled {
			if c.Egress.Name != applies.Egress.Name && c.Selects(p.Labels, ns) {
				s := out[c.Egress.Name]
				s.pods++
				if s.by == "" || applies.Egress.Name < s.by {
					s.by = applies.Egress.Name
				}
				out[c.Egress.Name] = s
			}
		}
	}
	return out, nil
}

// writeStatus writes the Egress's status when it changed, and an Event when its node did.
func (r *EgressReconciler) writeStatus(ctx context.Context, e *networkv1alpha1.Egress, d egress.Decision, ready bool, s supersession) error {
	updated := e.DeepCopy()
	setEgressStatus(updated, d, ready, s)
	if egressStatusEqual(e.Status, updated.Status) {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, updated, client.MergeFrom(e)); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("writing the status of Egress %s: %w", e.Name, err)
	}
	if r.Recorder != nil && e.Status.Node != updated.Status.Node {
		switch {
		case updated.Status.Node == "":
			r.Recorder.Eventf(updated, nil, corev1.EventTypeWarning, d.Reason, "Unassign", "Egress IP %s is held by no node: %s", e.Spec.EgressIP, d.Message)
		default:
			r.Recorder.Eventf(updated, nil, corev1.EventTypeNormal, "Assigned", "Assign", "Egress IP %s assigned to node %s", e.Spec.EgressIP, updated.Status.Node)
		}
	}
	return nil
}
