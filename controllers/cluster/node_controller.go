package cluster

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
)

// NodeReconciler derives from each Node its RemoteSubnetRoute and, for a Windows node, its default
// WindowsNodeNetwork. It server-side applies only the fields it owns: a field a user has taken over
// on a WindowsNodeNetwork is left alone and reported as an Event.
type NodeReconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	Defaults NetworkDefaults
	// Uninstall, when set, stops the reconciler from deriving anything while winnet is being
	// uninstalled (see UninstallSignal).
	Uninstall interface {
		Uninstalling(ctx context.Context) (bool, error)
	}
}

// SetupWithManager registers the reconciler; it also reacts to changes of the derived objects so a
// deleted or edited route is restored.
func (r *NodeReconciler) SetupWithManager(mgr ctrl.Manager) error {
	byName := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		if o.GetLabels()[ManagedByLabel] != ManagedByValue {
			return nil
		}
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: o.GetName()}}}
	})
	// Every WindowsNodeNetwork, ours or not, says that winnet runs its node: the node's flannel record
	// follows it.
	anyByName := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: o.GetName()}}}
	})
	// The FlannelInterop changes every node's record and every flannel node's route.
	everyNode := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		nodes := &corev1.NodeList{}
		if err := r.Client.List(ctx, nodes); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Cannot list the Nodes the FlannelInterop concerns")
			return nil
		}
		out := make([]reconcile.Request, 0, len(nodes.Items))
		for _, n := range nodes.Items {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKey{Name: n.Name}})
		}
		return out
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("node").
		For(&corev1.Node{}, builder.WithPredicates(nodeFactsChanged(nodeLabelsRead(r.Defaults.WindowsNodeSelector)))).
		Watches(&networkv1alpha1.RemoteSubnetRoute{}, byName, builder.OnlyMetadata, builder.WithPredicates(routeChangedByOthers())).
		// Only a WindowsNodeNetwork's existence and spec feed the Node's record: the agent's status
		// writes are no work here.
		Watches(&networkv1alpha1.WindowsNodeNetwork{}, anyByName, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&networkv1alpha1.FlannelInterop{}, everyNode).
		Complete(r)
}

// flannelInterop is the interop the FlannelInterop named default turns on (off while there is none).
func (r *NodeReconciler) flannelInterop(ctx context.Context) (FlannelInterop, error) {
	obj := &networkv1alpha1.FlannelInterop{}
	err := r.Client.Get(ctx, client.ObjectKey{Name: networkv1alpha1.FlannelInteropName}, obj)
	switch {
	case apierrors.IsNotFound(err):
		return flannelInteropFrom(nil), nil
	case err != nil:
		return FlannelInterop{}, fmt.Errorf("getting FlannelInterop %s: %w", networkv1alpha1.FlannelInteropName, err)
	}
	return flannelInteropFrom(obj), nil
}

// Reconcile converges the objects derived from one Node.
func (r *NodeReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	if r.Uninstall != nil {
		stop, err := r.Uninstall.Uninstalling(ctx)
		if err != nil {
			return ctrl.Result{}, err
		}
		if stop {
			log.V(1).Info("winnet is being uninstalled: deriving nothing from the Node")
			return ctrl.Result{}, nil
		}
	}
	node := &corev1.Node{}
	if err := r.Client.Get(ctx, req.NamespacedName, node); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("getting node %s: %w", req.Name, err)
		}
		return ctrl.Result{}, r.deleteDerived(ctx, req.Name)
	}
	if !node.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.deleteDerived(ctx, req.Name)
	}

	wnn := &networkv1alpha1.WindowsNodeNetwork{}
	if err := r.Client.Get(ctx, req.NamespacedName, wnn); apierrors.IsNotFound(err) {
		wnn = nil
	} else if err != nil {
		return ctrl.Result{}, fmt.Errorf("getting WindowsNodeNetwork %s: %w", req.Name, err)
	}
	flannel, err := r.flannelInterop(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.reconcileFlannelRecord(ctx, flannel, node, wnn); err != nil {
		return ctrl.Result{}, err
	}

	route := r.desiredRoute(flannel, node, wnn)
	if route == nil {
		log.V(1).Info("Node has no route (no Pod CIDRs or InternalIP yet, or a flannel node without interop)")
		if err := r.deleteIfOurs(ctx, &networkv1alpha1.RemoteSubnetRoute{}, node.Name); err != nil {
			return ctrl.Result{}, err
		}
	} else if err := r.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(route), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return ctrl.Result{}, fmt.Errorf("applying RemoteSubnetRoute %s: %w", node.Name, err)
	}

	derived, err := desiredNodeNetwork(node, r.Defaults)
	if err != nil {
		r.Recorder.Eventf(node, nil, corev1.EventTypeWarning, "InvalidNode", "Derive", "Cannot derive a WindowsNodeNetwork: %v", err)
		return ctrl.Result{}, reconcile.TerminalError(err)
	}
	if derived == nil {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, r.applyNodeNetwork(ctx, node, derived)
}

// desiredRoute is the node's RemoteSubnetRoute: winnet's own for a node winnet runs or any node without a
// flannel lease, the flannel route for a node whose lease flanneld published (none when interop is off: a
// winnet route could not reach it, VNI and MAC would be wrong for flannel's device).
func (r *NodeReconciler) desiredRoute(flannel FlannelInterop, node *corev1.Node, wnn *networkv1alpha1.WindowsNodeNetwork) *unstructured.Unstructured {
	if wnn != nil {
		return desiredRoute(node)
	}
	lease, ok, err := flannel.flanneldLease(node)
	switch {
	case !ok:
		return desiredRoute(node)
	case !flannel.Enabled:
		return nil
	case err != nil:
		r.Recorder.Eventf(node, nil, corev1.EventTypeWarning, "FlannelLeaseUnusable", "Route",
			"winnet nodes cannot reach this flannel node: %v", err)
		return nil
	}
	if flannel.VNI < flannelMinWindowsVNI && node.Labels[corev1.LabelOSStable] == "windows" {
		r.Recorder.Eventf(node, nil, corev1.EventTypeWarning, "FlannelVNIBelow4096", "Route",
			"This flannel Windows node skips leases with a VNI below %d (HNS refuses them), and winnet publishes VNI %d: "+
				"it will not reach winnet nodes. Set flannel's Backend.VNI and spec.vni of FlannelInterop default to 4096", flannelMinWindowsVNI, flannel.VNI)
	}
	return flannel.flannelRoute(node, lease)
}

// reconcileFlannelRecord publishes, corrects or withdraws the flannel record of a node winnet runs: published
// while interop is on and the node has a WindowsNodeNetwork, withdrawn (only if winnet wrote it) when interop
// is turned off. A node whose network is deleted while interop is on keeps the record it has until its Node
// goes: flanneld withdraws its route to a node only when it sees the Node deleted with the record still on
// it (it never acts on a record removed from a live Node), and operators delete a node's network before its
// Node (the agent's token dies with the Node), so withdrawing the record first would leave flanneld's route
// to the node's Pod CIDR behind for good.
func (r *NodeReconciler) reconcileFlannelRecord(ctx context.Context, flannel FlannelInterop, node *corev1.Node, wnn *networkv1alpha1.WindowsNodeNetwork) error {
	if flannel.Enabled && wnn == nil {
		return nil
	}
	var want map[string]string
	if flannel.Enabled && wnn != nil {
		if want = flannel.flannelRecord(node, wnn); want == nil {
			return nil // no address or Pod CIDR yet: flanneld could not use a record
		}
	}
	patch := flannel.recordPatch(node, want)
	if patch == nil {
		return nil
	}
	if want == nil {
		ctrl.LoggerFrom(ctx).Info("Withdrawing the node's flannel record")
	} else {
		ctrl.LoggerFrom(ctx).Info("Publishing the node's flannel record", "record", want)
	}
	// Through nodes/status, as flanneld writes its own record: winnet-controller may not patch Nodes.
	if err := r.Client.Status().Patch(ctx, node, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("patching the flannel record of Node %s: %w", node.Name, err)
	}
	return nil
}

// applyNodeNetwork applies the derived fields without forcing: when a user owns one of them (they
// edited nodeIP, say), the API server reports a conflict and the user's value stays.
func (r *NodeReconciler) applyNodeNetwork(ctx context.Context, node *corev1.Node, wnn *unstructured.Unstructured) error {
	err := r.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(wnn), client.FieldOwner(FieldOwner))
	switch {
	case err == nil:
		return nil
	case apierrors.IsConflict(err):
		r.Recorder.Eventf(node, nil, corev1.EventTypeNormal, "FieldsOwnedByUser", "Derive",
			"WindowsNodeNetwork %s keeps values set by someone else: %v", node.Name, err)
		return nil
	case apierrors.IsInvalid(err):
		r.Recorder.Eventf(node, nil, corev1.EventTypeWarning, "InvalidNodeNetwork", "Derive",
			"The WindowsNodeNetwork derived from this node is invalid: %v", err)
		return reconcile.TerminalError(fmt.Errorf("applying WindowsNodeNetwork %s: %w", node.Name, err))
	default:
		return fmt.Errorf("applying WindowsNodeNetwork %s: %w", node.Name, err)
	}
}

// deleteDerived removes what was derived from a Node that is gone. Owner references let the garbage
// collector do the same; doing it here does not depend on it.
func (r *NodeReconciler) deleteDerived(ctx context.Context, name string) error {
	if err := r.deleteIfOurs(ctx, &networkv1alpha1.RemoteSubnetRoute{}, name); err != nil {
		return err
	}
	return r.deleteIfOurs(ctx, &networkv1alpha1.WindowsNodeNetwork{}, name)
}

func (r *NodeReconciler) deleteIfOurs(ctx context.Context, obj client.Object, name string) error {
	if err := r.Client.Get(ctx, client.ObjectKey{Name: name}, obj); err != nil {
		return client.IgnoreNotFound(err)
	}
	if obj.GetLabels()[ManagedByLabel] != ManagedByValue {
		return nil
	}
	ctrl.LoggerFrom(ctx).Info("Deleting derived object", "kind", fmt.Sprintf("%T", obj), "name", name)
	if err := r.Client.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting %s: %w", name, err)
	}
	return nil
}
