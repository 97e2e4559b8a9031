package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
)

// allRoutes is the single work item of RouteConflictReconciler: whether one route conflicts depends
// on every other route and Node, so any change re-evaluates the whole set at once.
var allRoutes = reconcile.Request{NamespacedName: client.ObjectKey{Name: "all-remote-subnet-routes"}}

// RouteConflictReconciler sets Accepted and Conflict on every RemoteSubnetRoute: a route whose CIDRs
// overlap another route's, or another node's Pod CIDRs, has Conflict=True naming the other object and
// is not Accepted; agents skip it.
type RouteConflictReconciler struct {
	Client client.Client
}

// SetupWithManager registers the reconciler for changes of routes and of Nodes' Pod CIDRs.
func (r *RouteConflictReconciler) SetupWithManager(mgr ctrl.Manager) error {
	all := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{allRoutes}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("remotesubnetroute-conflicts").
		Watches(&networkv1alpha1.RemoteSubnetRoute{}, all).
		Watches(&corev1.Node{}, all).
		Complete(r)
}

// Reconcile recomputes the conflicts of all routes and writes the status of those that changed.
func (r *RouteConflictReconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	// Read-only lists straight from the cache: copying every route on every pass would cost more
	// than the overlap check itself. Only the routes whose status changes are copied.
	routes := &networkv1alpha1.RemoteSubnetRouteList{}
	if err := r.Client.List(ctx, routes, client.UnsafeDisableDeepCopy); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing RemoteSubnetRoutes: %w", err)
	}
	nodes := &corev1.NodeList{}
	if err := r.Client.List(ctx, nodes, client.UnsafeDisableDeepCopy); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing Nodes: %w", err)
	}
	overlaps := FindOverlaps(claimsOf(routes.Items, nodes.Items))

	var errs []error
	for i := range routes.Items {
		cached := &routes.Items[i]
		if routeStatusCurrent(cached, overlaps[cached.Name]) {
			continue
		}
		route := cached.DeepCopy()
		setRouteConditions(route, overlaps[route.Name])
		if err := r.Client.Status().Patch(ctx, route, client.MergeFrom(cached)); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("writing the status of RemoteSubnetRoute %s: %w", route.Name, err))
		}
	}
	return ctrl.Result{}, errors.Join(errs...)
}

// claimsOf lists the CIDRs claimed by routes and by Nodes. The API server has validated the routes'
// CIDRs; a Node's unparsable Pod CIDR claims nothing.
func claimsOf(routes []networkv1alpha1.RemoteSubnetRoute, nodes []corev1.Node) []Claim {
	var claims []Claim
	for _, rt := range routes {
		for _, c := range rt.Spec.PodCIDRs {
			if p, err := netip.ParsePrefix(string(c)); err == nil {
				claims = append(claims, Claim{Kind: routeKind, Name: rt.Name, Node: rt.Spec.NodeName, CIDR: p})
			}
		}
	}
	for i := range nodes {
		for _, c := range factsOf(&nodes[i]).podCIDRs {
			if p, err := netip.ParsePrefix(c); err == nil {
				claims = append(claims, Claim{Kind: nodeKind, Name: nodes[i].Name, Node: nodes[i].Name, CIDR: p})
			}
		}
	}
	return claims
}
