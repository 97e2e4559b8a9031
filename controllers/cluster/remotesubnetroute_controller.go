package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
)

// DefaultConflictResyncPeriod is how often every route's conflicts are recomputed from scratch; in
// between, a change to one route or Node is checked against the in-memory claim index only.
const DefaultConflictResyncPeriod = 10 * time.Minute

// conflictRequest is a work item of RouteConflictReconciler: one RemoteSubnetRoute or Node whose
// claims changed, or (the zero value) a full pass over every route.
type conflictRequest struct {
	kind, name string
}

// fullPass recomputes every route's conflicts from the cache.
var fullPass = conflictRequest{}

func (r conflictRequest) String() string {
	if r == fullPass {
		return "all routes"
	}
	return r.kind + " " + r.name
}

// RouteConflictReconciler sets Accepted and Conflict on every RemoteSubnetRoute: a route whose CIDRs
// overlap another route's, or another node's Pod CIDRs, has Conflict=True naming the other object and
// is not Accepted; agents skip it.
//
// It keeps every claim in an index: a change to one route or Node is checked against the index
// (O(log n) plus the overlaps found) and touches the status of that route and of the routes it
// overlapped before or overlaps now. A full pass rebuilds the index at start-up and every
// ResyncPeriod.
type RouteConflictReconciler struct {
	Client client.Client
	// ResyncPeriod is the full pass period; zero means DefaultConflictResyncPeriod.
	ResyncPeriod time.Duration

	// index holds the claims of the routes and Nodes in the cache; nil until the first full pass.
	// Only Reconcile touches it, and the controller runs one worker.
	index *claimIndex
}

// SetupWithManager registers the reconciler for changes of routes and of Nodes' Pod CIDRs, and
// queues the first full pass.
func (r *RouteConflictReconciler) SetupWithManager(mgr ctrl.Manager) error {
	of := func(kind string) handler.TypedEventHandler[client.Object, conflictRequest] {
		return handler.TypedEnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []conflictRequest {
			return []conflictRequest{{kind: kind, name: o.GetName()}}
		})
	}
	start := source.TypedFunc[conflictRequest](func(_ context.Context, q workqueue.TypedRateLimitingInterface[conflictRequest]) error {
		q.Add(fullPass)
		return nil
	})
	return builder.TypedControllerManagedBy[conflictRequest](mgr).
		Named("remotesubnetroute-conflicts").
		Watches(&networkv1alpha1.RemoteSubnetRoute{}, of(routeKind)).
		Watches(&corev1.Node{}, of(nodeKind), builder.WithPredicates(nodeCIDRsChanged())).
		WatchesRawSource(start).
		WithLogConstructor(func(req *conflictRequest) logr.Logger {
			log := mgr.GetLogger().WithValues("controller", "remotesubnetroute-conflicts")
			if req != nil {
				log = log.WithValues("object", req.String())
			}
			return log
		}).
		Complete(r)
}

// Reconcile updates the conflicts that the change of one object can affect, or all of them.
func (r *RouteConflictReconciler) Reconcile(ctx context.Context, req conflictRequest) (ctrl.Result, error) {
	if req == fullPass || r.index == nil {
		if err := r.reconcileAll(ctx); err != nil {
			return ctrl.Result{}, err
		}
		if req != fullPass {
			return ctrl.Result{}, nil
		}
		resync := r.ResyncPeriod
		if resync == 0 {
			resync = DefaultConflictResyncPeriod
		}
		return ctrl.Result{RequeueAfter: resync}, nil
	}
	return ctrl.Result{}, r.reconcileOne(ctx, req)
}

// reconcileAll rebuilds the index from the cache and writes the status of every route whose
// conflicts changed.
func (r *RouteConflictReconciler) reconcileAll(ctx context.Context) error {
	// Read-only lists straight from the cache: copying every route on every pass would cost more
	// than the overlap check itself. Only the routes whose status changes are copied.
	routes := &networkv1alpha1.RemoteSubnetRouteList{}
	if err := r.Client.List(ctx, routes, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing RemoteSubnetRoutes: %w", err)
	}
	nodes := &corev1.NodeList{}
	if err := r.Client.List(ctx, nodes, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing Nodes: %w", err)
	}
	var claims []Claim
	for i := range routes.Items {
		claims = append(claims, routeClaims(&routes.Items[i])...)
	}
	for i := range nodes.Items {
		claims = append(claims, nodeClaims(&nodes.Items[i])...)
	}
	r.index = newClaimIndex(claims)
	overlaps := FindOverlaps(claims)

	var errs []error
	for i := range routes.Items {
		if err := r.writeStatus(ctx, &routes.Items[i], overlaps[routes.Items[i].Name]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// reconcileOne updates the index with the current claims of one route or Node and writes the
// status of the routes whose conflicts it can change: the route itself, and the routes its claims
// overlapped before the change or overlap after it.
func (r *RouteConflictReconciler) reconcileOne(ctx context.Context, req conflictRequest) error {
	var claims []Claim
	var self *networkv1alpha1.RemoteSubnetRoute
	switch req.kind {
	case routeKind:
		rsr := &networkv1alpha1.RemoteSubnetRoute{}
		if err := r.Client.Get(ctx, client.ObjectKey{Name: req.name}, rsr); err == nil {
			self, claims = rsr, routeClaims(rsr)
		} else if !apierrors.IsNotFound(err) {
			return fmt.Errorf("getting RemoteSubnetRoute %s: %w", req.name, err)
		}
	case nodeKind:
		node := &corev1.Node{}
		if err := r.Client.Get(ctx, client.ObjectKey{Name: req.name}, node); err == nil {
			claims = nodeClaims(node)
		} else if !apierrors.IsNotFound(err) {
			return fmt.Errorf("getting Node %s: %w", req.name, err)
		}
	}
	o := owner{req.kind, req.name}
	before := r.index.set(o, claims)

	affected := map[string]bool{}
	if !slices.Equal(before, claims) {
		for _, c := range append(before, r.index.claimsOf(o)...) {
			for _, other := range r.index.conflicting(c) {
				if other.Kind == routeKind && other.Name != req.name {
					affected[other.Name] = true
				}
			}
		}
	}
	var errs []error
	if self != nil {
		errs = append(errs, r.writeStatus(ctx, self, r.index.overlaps(self.Name)))
	}
	for name := range affected {
		rsr := &networkv1alpha1.RemoteSubnetRoute{}
		if err := r.Client.Get(ctx, client.ObjectKey{Name: name}, rsr); err != nil {
			errs = append(errs, client.IgnoreNotFound(err))
			continue
		}
		errs = append(errs, r.writeStatus(ctx, rsr, r.index.overlaps(name)))
	}
	return errors.Join(errs...)
}

// writeStatus patches the route's Conflict and Accepted conditions when they do not say what its
// overlaps mean yet. route may be a shared cache object: it is copied before it is changed.
func (r *RouteConflictReconciler) writeStatus(ctx context.Context, route *networkv1alpha1.RemoteSubnetRoute, overlaps []Overlap) error {
	if routeStatusCurrent(route, overlaps) {
		return nil
	}
	updated := route.DeepCopy()
	setRouteConditions(updated, overlaps)
	if err := r.Client.Status().Patch(ctx, updated, client.MergeFrom(route)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("writing the status of RemoteSubnetRoute %s: %w", route.Name, err)
	}
	return nil
}

// routeClaims lists the CIDRs a route claims. The API server has validated them.
func routeClaims(rt *networkv1alpha1.RemoteSubnetRoute) []Claim {
	var claims []Claim
	for _, c := range rt.Spec.PodCIDRs {
		if p, err := netip.ParsePrefix(string(c)); err == nil {
			claims = append(claims, Claim{Kind: routeKind, Name: rt.Name, Node: rt.Spec.NodeName, CIDR: p.Masked(),
				Created: rt.CreationTimestamp.Time})
		}
	}
	return claims
}

// nodeClaims lists the Pod CIDRs a Node claims; an unparsable one claims nothing.
func nodeClaims(node *corev1.Node) []Claim {
	var claims []Claim
	for _, c := range factsOf(node).podCIDRs {
		if p, err := netip.ParsePrefix(c); err == nil {
			claims = append(claims, Claim{Kind: nodeKind, Name: node.Name, Node: node.Name, CIDR: p.Masked()})
		}
	}
	return claims
}
