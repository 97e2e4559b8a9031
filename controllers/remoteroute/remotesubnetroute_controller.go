package remoteroute

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/nodenetwork"
	"github.com/winnet-io/winnet/internal/hostnet"
	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/internal/pipeline"
)

// DefaultResyncPeriod is how often all routes are re-checked against the host when nothing else
// triggers it (drift repair, and the node network's realised state changing); a change to one route
// is applied at once on its own.
const DefaultResyncPeriod = 10 * time.Second

// notReadyRetry is how soon routes look again for a node network that is not ready yet.
const notReadyRetry = 200 * time.Millisecond

// allRoutes is the reconciler's single work item: the node's routes are one desired set, synced as
// one flow category, so every change is applied as the difference of that set.
var allRoutes = reconcile.Request{NamespacedName: types.NamespacedName{Name: "remote-subnet-routes"}}

// Reconciler installs the host routes and flows of every RemoteSubnetRoute but the node's own, and
// reports the outcome through the node network's State (the node network reconciler writes it into
// the WindowsNodeNetwork's status as RoutesReady and remoteRoutes).
type Reconciler struct {
	Client   client.Client
	NodeName string
	Net      hostnet.Interface
	State    *nodenetwork.State
	// ResyncPeriod is the drift check period; zero means DefaultResyncPeriod.
	ResyncPeriod time.Duration

	// installed holds, per RemoteSubnetRoute, the host routes installed for it and why it failed
	// (empty when it did not); a change to one route is applied against it without a pass over
	// all routes. The full pass at start-up and every ResyncPeriod rebuilds it from the host.
	installed map[string]routeState
}

type routeState struct {
	hostRoutes []hostnet.Route
	failure    string
}

// SetupWithManager registers the reconciler for RemoteSubnetRoutes and the node's WindowsNodeNetwork.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	all := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{allRoutes}
	})
	one := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.GetName()}}}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("remotesubnetroute").
		Watches(&networkv1alpha1.RemoteSubnetRoute{}, one).
		// Spec changes only: the node network's status changes with every route reported.
		Watches(&networkv1alpha1.WindowsNodeNetwork{}, all, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Complete(r)
}

// Reconcile converges the node's remote routes: all of them for allRoutes (at start-up, when the
// node network changes, and every ResyncPeriod), or the one RemoteSubnetRoute named.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	resync := r.ResyncPeriod
	if resync == 0 {
		resync = DefaultResyncPeriod
	}
	rz, ok := r.State.Realized()
	if !ok {
		ctrl.LoggerFrom(ctx).V(1).Info("Node network not ready; routes wait for it")
		return ctrl.Result{RequeueAfter: notReadyRetry}, nil
	}
	if req != allRoutes {
		if r.installed == nil {
			return ctrl.Result{}, nil // the first full pass, queued with the node network, covers it
		}
		return ctrl.Result{}, r.reconcileOne(ctx, rz, req.Name)
	}
	return r.reconcileAll(ctx, rz, resync)
}

// reconcileAll converges every route as one desired set.
func (r *Reconciler) reconcileAll(ctx context.Context, rz nodenetwork.Realized, resync time.Duration) (ctrl.Result, error) {
	start := time.Now()
	list := &networkv1alpha1.RemoteSubnetRouteList{}
	if err := r.Client.List(ctx, list); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing RemoteSubnetRoutes: %w", err)
	}
	routes, skips := desiredRoutes(r.NodeName, rz, list.Items)
	failed := map[string]string{}
	for _, s := range skips {
		if s.failed {
			failed[s.name] = s.reason
		}
	}

	var flows []openflow.Flow
	var hostRoutes []hostnet.Route
	byName := map[string][]hostnet.Route{}
	for _, rt := range routes {
		rf, hr, err := r.realise(ctx, rz, rt)
		if err != nil {
			failed[rt.name] = err.Error()
			continue
		}
		flows = append(flows, rf...)
		hostRoutes = append(hostRoutes, hr)
		byName[rt.name] = append(byName[rt.name], hr)
	}
	listed := time.Since(start)
	synced, err := rz.Flows.Sync(ctx, pipeline.CategoryRoute, dedupe(flows))
	flowed := time.Since(start)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("installing route flows: %w", err)
	}
	if synced.Mods() > 0 {
		ctrl.LoggerFrom(ctx).Info("Synced route flows", "routes", len(routes), "flowMods", synced.Mods(),
			"added", synced.Added, "modified", synced.Modified, "deleted", synced.Deleted)
	}
	for name, err := range r.syncHostRoutes(ctx, rz, routes, hostRoutes) {
		failed[name] = err.Error()
	}
	ctrl.LoggerFrom(ctx).V(1).Info("Reconciled routes", "routes", len(routes), "computed", listed, "flowsSynced", flowed, "total", time.Since(start))

	r.installed = map[string]routeState{}
	for _, rt := range routes {
		r.installed[rt.name] = routeState{hostRoutes: byName[rt.name], failure: failed[rt.name]}
	}
	for name, reason := range failed {
		r.installed[name] = routeState{hostRoutes: byName[name], failure: reason}
	}
	r.publish()
	return ctrl.Result{RequeueAfter: resync}, nil
}

// reconcileOne converges one RemoteSubnetRoute: its flows as one object of the route category, and
// its host routes against what was installed for it.
func (r *Reconciler) reconcileOne(ctx context.Context, rz nodenetwork.Realized, name string) error {
	start := time.Now()
	defer func() { ctrl.LoggerFrom(ctx).V(1).Info("Reconciled route", "took", time.Since(start)) }()
	var list []networkv1alpha1.RemoteSubnetRoute
	rsr := &networkv1alpha1.RemoteSubnetRoute{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: name}, rsr); err == nil {
		list = append(list, *rsr)
	} else if !apierrors.IsNotFound(err) {
		return fmt.Errorf("getting RemoteSubnetRoute %s: %w", name, err)
	}
	routes, skips := desiredRoutes(r.NodeName, rz, list)
	state := routeState{}
	for _, sk := range skips {
		if sk.failed {
			state.failure = sk.reason
		}
	}
	var flows []openflow.Flow
	for _, rt := range routes {
		rf, hr, err := r.realise(ctx, rz, rt)
		if err != nil {
			state.failure = err.Error()
			continue
		}
		flows = append(flows, rf...)
		state.hostRoutes = append(state.hostRoutes, hr)
	}
	synced, err := rz.Flows.SyncObject(ctx, pipeline.CategoryRoute, objectID(name), dedupe(flows))
	if err != nil {
		return fmt.Errorf("installing the flows of route %s: %w", name, err)
	}
	if synced.Mods() > 0 {
		ctrl.LoggerFrom(ctx).Info("Synced route flows", "route", name, "flowMods", synced.Mods(),
			"added", synced.Added, "modified", synced.Modified, "deleted", synced.Deleted)
	}
	before := r.installed[name]
	for _, old := range before.hostRoutes {
		if !slices.ContainsFunc(state.hostRoutes, func(h hostnet.Route) bool { return sameHostRoute(h, old) }) {
			if err := r.Net.DeleteRoute(ctx, old); err != nil {
				return fmt.Errorf("removing the host route %s of route %s: %w", old, name, err)
			}
		}
	}
	var missing []hostnet.Route
	for _, h := range state.hostRoutes {
		if !slices.ContainsFunc(before.hostRoutes, func(old hostnet.Route) bool { return sameHostRoute(h, old) }) {
			missing = append(missing, h)
		}
	}
	if err := r.Net.EnsureRoutes(ctx, missing); err != nil {
		state.failure = err.Error()
	}
	if len(routes) == 0 && state.failure == "" {
		delete(r.installed, name)
	} else {
		r.installed[name] = state
	}
	r.publish()
	return nil
}

func sameHostRoute(a, b hostnet.Route) bool {
	return a.Dst == b.Dst && a.Gateway == b.Gateway && a.LinkIndex == b.LinkIndex
}

// publish reports the routes' outcome to the node network reconciler.
func (r *Reconciler) publish() {
	res := nodenetwork.RoutesResult{Desired: len(r.installed)}
	for name, st := range r.installed {
		if st.failure != "" {
			res.Failed = append(res.Failed, name+": "+st.failure)
		} else {
			res.Installed++
		}
	}
	slices.Sort(res.Failed)
	r.State.SetRoutes(res)
}

// realise returns the flows and the host route of one route.
func (r *Reconciler) realise(ctx context.Context, rz nodenetwork.Realized, rt route) ([]openflow.Flow, hostnet.Route, error) {
	rr := pipeline.RemoteRoute{CIDR: rt.cidr, Tunnel: rt.tunnel, NodeIP: rt.nodeIP, VNI: rt.vni, DstMAC: rt.dstMAC}
	host := hostnet.Route{Dst: rt.cidr, Owned: true}
	if rt.tunnel {
		rr.GatewayIP = rt.gatewayIP
		host.Gateway, host.LinkIndex, host.OnLink = rt.gatewayIP, rz.GatewayLinkIndex, true
	} else {
		mac, err := r.Net.Neighbor(ctx, rt.nodeIP)
		if err != nil {
			return nil, host, fmt.Errorf("resolving next hop %s: %w", rt.nodeIP, err)
		}
		rr.NextHopMAC, rr.UplinkMAC = mac, rz.UplinkMAC
		host.Gateway, host.LinkIndex = rt.nodeIP, rz.BridgeLinkIndex
	}
	flows := rz.Node.RouteFlows(rr)
	id := objectID(rt.name)
	for i := range flows {
		flows[i].Cookie = id
	}
	return flows, host, nil
}

// syncHostRoutes creates the missing host routes and removes winnet's routes that are no longer
// desired (the node's own Pod CIDR route belongs to the node network reconciler). It lists the
// routes once rather than once per route.
func (r *Reconciler) syncHostRoutes(ctx context.Context, rz nodenetwork.Realized, routes []route, desired []hostnet.Route) map[string]error {
	failed := map[string]error{}
	existing, err := r.Net.Routes(ctx, hostnet.RouteFilter{OwnedOnly: true})
	if err != nil {
		for _, rt := range routes {
			failed[rt.name] = err
		}
		return failed
	}
	byDst := map[netip.Prefix]hostnet.Route{}
	for _, e := range existing {
		byDst[e.Dst] = e
	}
	want := map[netip.Prefix]bool{}
	var missing []hostnet.Route
	for _, d := range desired {
		want[d.Dst] = true
		if e, ok := byDst[d.Dst]; ok && e.Gateway == d.Gateway && e.LinkIndex == d.LinkIndex {
			continue
		}
		missing = append(missing, d)
	}
	if err := r.Net.EnsureRoutes(ctx, missing); err != nil {
		// Find which: one at a time, on this rare path only.
		for _, d := range missing {
			if err := r.Net.EnsureRoute(ctx, d); err != nil {
				failed[nameOf(routes, d.Dst)] = err
			}
		}
	}
	var errs []error
	for _, e := range existing {
		if want[e.Dst] || e.Dst == rz.Node.PodCIDR {
			continue
		}
		if err := r.Net.DeleteRoute(ctx, e); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		ctrl.LoggerFrom(ctx).Error(errors.Join(errs...), "Removing stale routes")
	}
	return failed
}

func nameOf(routes []route, dst netip.Prefix) string {
	for _, rt := range routes {
		if rt.cidr == dst {
			return rt.name
		}
	}
	return dst.String()
}

// objectID is the object part of a route's flow cookies (40 bits), for finding a route's flows in
// dump-flows.
func objectID(name string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	return h.Sum64() & (1<<40 - 1)
}

// dedupe drops repeated flows (two routes answering ARP for the same gateway, say): a flow table
// holds one flow per match.
func dedupe(flows []openflow.Flow) []openflow.Flow {
	seen := map[string]bool{}
	out := flows[:0]
	for _, f := range flows {
		k := fmt.Sprintf("%d/%d/%s", f.Table, f.Priority, f.MatchString())
		if seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, f)
	}
	return out
}
