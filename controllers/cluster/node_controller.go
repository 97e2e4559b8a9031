package cluster

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
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
	return ctrl.NewControllerManagedBy(mgr).
		Named("node").
		For(&corev1.Node{}).
		Watches(&networkv1alpha1.RemoteSubnetRoute{}, byName, builder.OnlyMetadata).
		Watches(&networkv1alpha1.WindowsNodeNetwork{}, byName, builder.OnlyMetadata).
		Complete(r)
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

	route := desiredRoute(node)
	if route == nil {
		log.V(1).Info("Node has no Pod CIDRs or InternalIP yet; it has no route")
		if err := r.deleteIfOurs(ctx, &networkv1alpha1.RemoteSubnetRoute{}, node.Name); err != nil {
			return ctrl.Result{}, err
		}
	} else if err := r.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(route), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return ctrl.Result{}, fmt.Errorf("applying RemoteSubnetRoute %s: %w", node.Name, err)
	}

	wnn, err := desiredNodeNetwork(node, r.Defaults)
	if err != nil {
		r.Recorder.Eventf(node, nil, corev1.EventTypeWarning, "InvalidNode", "Derive", "Cannot derive a WindowsNodeNetwork: %v", err)
		return ctrl.Result{}, reconcile.TerminalError(err)
	}
	if wnn == nil {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, r.applyNodeNetwork(ctx, node, wnn)
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
