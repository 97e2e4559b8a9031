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
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

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

// HostNet is the host plumbing remote routes need: the routes and their next hops, and a watch
// that reports when someone removed one.
type HostNet interface {
	hostnet.Routing
	hostnet.Watches
}

// Reconciler installs the host routes and flows of every RemoteSubnetRoute but the node's own, and
// reports the outcome through the node network's State (the node network reconciler writes it into
// the WindowsNodeNetwork's status as RoutesReady and remoteRoutes).
type Reconciler struct {
	// Client reads the node's objects; RemoteSubnetRoutes come from a cache of their own.
	Client   client.Client
	NodeName string
	Net      HostNet
	State    *nodenetwork.State
	// ResyncPeriod is the drift check period; zero means DefaultResyncPeriod.
	ResyncPeriod time.Duration
	// Recorder emits the Events of tunnel admission (admission.go); nil emits none.
	Recorder events.EventRecorder

	// installed holds, per RemoteSubnetRoute, what was installed for it; a change to one route is
	// applied against it without a pass over all routes. The full pass at start-up and every
	// ResyncPeriod rebuilds it from the host. failed holds the failures among them, so that a report
	// costs the failures, not a pass over every route.
	installed map[string]routeState
	failed    map[string]string
	// accepted holds the last version of each route winnet-controller accepted, installed while it has
	// not judged a newer generation (keepAccepted).
	accepted map[string]networkv1alpha1.RemoteSubnetRoute
	// routes is the cache of RemoteSubnetRoutes (see SetupWithManager).
	routes cache.Cache
	// peers maps the object part of the routes' cookies to their routes; admission what the
	// last reads of tunnel admission's counters saw (admission.go).
	peers     map[uint64]peer
	admission admissionReport
	// last is what the last full pass computed the flows from, and the host routes it desired; nil
	// when the next full pass must compute them (see unchanged).
	last *lastPass
}

// routeState is what was installed for one RemoteSubnetRoute.
type routeState struct {
	// version is the resourceVersion of the RemoteSubnetRoute it was computed from: an event for
	// that same version (the informer's initial list after the full pass, say) needs no work.
	version    string
	hostRoutes []hostnet.Route
	// failure says why the route is not installed; empty when it is.
	failure string
	// peers are its realised routes, as the egress reconciler reads them (nodenetwork.Peer).
	peers []nodenetwork.Peer
}

// SetupWithManager registers the reconciler for RemoteSubnetRoutes and the node's WindowsNodeNetwork.
//
// RemoteSubnetRoutes are cached apart from the manager's other objects: a source of
// controller-runtime's waits for every informer of its cache to sync, so with the cluster's
// thousands of routes in the shared cache, the node network (and Pods) would wait for all of them
// to be listed before starting. With their own cache, the node network converges while the routes
// are listed. What the reconciler does not read of them is not kept (TrimRoute).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	routes, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
		ByObject:                    map[client.Object]cache.ByObject{&networkv1alpha1.RemoteSubnetRoute{}: {}},
		ReaderFailOnMissingInformer: true,
		DefaultTransform:            TrimRoute,
	})
	if err != nil {
		return fmt.Errorf("creating the RemoteSubnetRoute cache: %w", err)
	}
	if _, err := routes.GetInformer(context.Background(), &networkv1alpha1.RemoteSubnetRoute{}, cache.BlockUntilSynced(false)); err != nil {
		return fmt.Errorf("creating the RemoteSubnetRoute informer: %w", err)
	}
	if err := mgr.Add(routes); err != nil {
		return fmt.Errorf("adding the RemoteSubnetRoute cache: %w", err)
	}
	r.routes = routes

	all := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{allRoutes}
	})
	one := handler.TypedEnqueueRequestsFromMapFunc(func(_ context.Context, o *networkv1alpha1.RemoteSubnetRoute) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.Name}}}
	})
	// A route removed from the host (by someone else, or with an address) on the interfaces the
	// routes use (the bridge's and the gateway's) wakes a full pass at once; the periodic pass stays
	// as a safety net.
	drift := make(chan event.GenericEvent, 1)
	follow := manager.RunnableFunc(func(ctx context.Context) error {
		nodenetwork.FollowAddresses(ctx, r.Net, r.routeLinks, func() {
			select {
			case drift <- event.GenericEvent{Object: &networkv1alpha1.RemoteSubnetRoute{}}:
			default: // a wake-up is pending already
			}
		})
		return nil
	})
	if err := mgr.Add(follow); err != nil {
		return fmt.Errorf("adding the route watch: %w", err)
	}
	// Tunnel admission's drop counters are read when Prometheus scrapes the agent (admission.go),
	// while the manager runs (several agents run in the tests' process).
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error { return admissionMetrics.sources.While(ctx, r) })); err != nil {
		return fmt.Errorf("adding the tunnel admission counters: %w", err)
	}
	// The routes' flows depend on the realised node network (its VNI, tunnel port and UDP port,
	// admission): a change to it wakes a full pass at once rather than at the next ResyncPeriod.
	var realized []<-chan struct{}
	if r.State != nil {
		realized = append(realized, r.State.Subscribe())
	}
	onRealized := nodenetwork.WakeSource(nil, func(q nodenetwork.Queue) { q.Add(allRoutes) }, realized...)
	return ctrl.NewControllerManagedBy(mgr).
		Named("remotesubnetroute").
		WatchesRawSource(source.Channel(drift, all)).
		WatchesRawSource(onRealized).
		WatchesRawSource(source.Kind(routes, &networkv1alpha1.RemoteSubnetRoute{}, one)).
		// Spec changes only: the node network's status changes with every route reported.
		Watches(&networkv1alpha1.WindowsNodeNetwork{}, all, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Complete(r)
}

// routeLinks returns the indexes of the interfaces the routes use, nil (any) before the node
// network is realised.
func (r *Reconciler) routeLinks() []int {
	if r.State == nil {
		return nil
	}
	rz, ok := r.State.Realized()
	if !ok {
		return nil
	}
	return []int{rz.BridgeLinkIndex, rz.GatewayLinkIndex}
}

// reader is where RemoteSubnetRoutes are read: their own cache once set up, else Client.
func (r *Reconciler) reader() client.Reader {
	if r.routes != nil {
		return r.routes
	}
	return r.Client
}

// Reconcile converges the node's remote routes: all of them for allRoutes (at start-up, when the
// node network changes, and every ResyncPeriod), or the one RemoteSubnetRoute named.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	resync := r.ResyncPeriod
	if resync == 0 {
		resync = DefaultResyncPeriod
	}
	if req != allRoutes && r.installed == nil {
		return ctrl.Result{}, nil // the first full pass, queued with the node network, covers it
	}
	rz, ok := r.State.Realized()
	if !ok {
		ctrl.LoggerFrom(ctx).V(1).Info("Node network not ready; routes wait for it")
		return ctrl.Result{RequeueAfter: notReadyRetry}, nil
	}
	if req != allRoutes {
		return ctrl.Result{}, r.reconcileOne(ctx, rz, req.Name)
	}
	return r.reconcileAll(ctx, rz, resync)
}

// reconcileAll converges every route as one desired set: the flows in one bundle (the routes' share
// of the bridge's flows, reported to the node network's State), the host routes, then one report.
func (r *Reconciler) reconcileAll(ctx context.Context, rz nodenetwork.Realized, resync time.Duration) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	start := time.Now()
	// Read-only: the routes are only read, and copying thousands of them would cost more than
	// computing their flows.
	list := &networkv1alpha1.RemoteSubnetRouteList{}
	if err := r.reader().List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing RemoteSubnetRoutes: %w", err)
	}
	routes, skips := desiredRoutes(r.NodeName, rz, keepAccepted(list.Items, r.acceptedRoutes(), true))
	if r.last.unchanged(rz, routes, skips) {
		if done := r.checkHostRoutes(ctx, rz, routes, list.Items); done {
			return ctrl.Result{RequeueAfter: resync}, nil
		}
	}
	r.last = nil
	installed := make(map[string]routeState, len(routes))
	failed := map[string]string{}
	for _, sk := range skips {
		if sk.failed {
			failed[sk.name] = sk.reason
		}
	}

	flows := make([]openflow.Flow, 0, 2*len(routes))
	hostRoutes := make([]hostnet.Route, 0, len(routes))
	r.peers = make(map[uint64]peer, len(routes))
	for _, rt := range routes {
		r.rememberPeer(rt.name, rt.nodeIP)
		rf, hr, err := r.realise(ctx, rz, rt)
		if err != nil {
			failed[rt.name] = err.Error()
			continue
		}
		flows = append(flows, rf...)
		hostRoutes = append(hostRoutes, hr)
		st := installed[rt.name]
		st.hostRoutes = append(st.hostRoutes, hr)
		st.peers = append(st.peers, rt.peer())
		installed[rt.name] = st
	}
	computed := time.Since(start)

	// Flows first, then host routes: the switch forwards before the host sends to it. Not at the
	// same time: ovs-vswitchd re-reads the routing table on route notifications, and installing
	// both at once measured slower than one after the other (bench-routes at 5,000: the flows took
	// 1.1-1.3 s instead of 0.12-0.3 s).
	flowStart := time.Now()
	synced, err := rz.Flows.Sync(ctx, pipeline.CategoryRoute, dedupe(flows))
	flowsTook := time.Since(flowStart)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("installing route flows: %w", err)
	}
	if synced.Mods() > 0 {
		log.Info("Synced route flows", "routes", len(routes), "flowMods", synced.Mods(),
			"added", synced.Added, "modified", synced.Modified, "deleted", synced.Deleted)
	}
	r.State.FlowsSynced(ctx, nodenetwork.RouteFlows, rz.Flows)
	hostStart := time.Now()
	for name, err := range r.syncHostRoutes(ctx, rz, routes, hostRoutes) {
		failed[name] = err.Error()
	}
	hostTook := time.Since(hostStart)
	log.V(1).Info("Reconciled routes", "routes", len(routes), "computed", computed, "flows", flowsTook, "hostRoutes", hostTook, "total", time.Since(start))

	for name, reason := range failed {
		st := installed[name]
		st.failure = reason
		installed[name] = st
	}
	for i := range list.Items {
		if st, ok := installed[list.Items[i].Name]; ok {
			st.version = list.Items[i].ResourceVersion
			installed[list.Items[i].Name] = st
		}
	}
	r.installed, r.failed = installed, failed
	r.last = newLastPass(rz, routes, skips, hostRoutes, failed)
	r.publishRoutes()
	peers := make(map[string][]nodenetwork.Peer, len(installed))
	for name, st := range installed {
		peers[name] = st.realisedPeers()
	}
	r.State.SetPeers(peers)
	r.readAdmission(ctx, rz)
	return ctrl.Result{RequeueAfter: resync}, nil
}

// reconcileOne converges one RemoteSubnetRoute: its flows as one object of the route category, and
// its host routes against what was installed for it.
func (r *Reconciler) reconcileOne(ctx context.Context, rz nodenetwork.Realized, name string) error {
	start := time.Now()
	defer func() { ctrl.LoggerFrom(ctx).V(1).Info("Reconciled route", "took", time.Since(start)) }()
	var list []networkv1alpha1.RemoteSubnetRoute
	rsr := &networkv1alpha1.RemoteSubnetRoute{}
	if err := r.reader().Get(ctx, types.NamespacedName{Name: name}, rsr); err == nil {
		if st, ok := r.installed[name]; ok && st.version == rsr.ResourceVersion {
			return nil // applied already; drift is the full pass's business
		}
		list = append(list, *rsr)
	} else if !apierrors.IsNotFound(err) {
		return fmt.Errorf("getting RemoteSubnetRoute %s: %w", name, err)
	} else {
		delete(r.acceptedRoutes(), name)
	}
	// The next full pass computes every route again: this one changes what the last one installed.
	r.last = nil
	routes, skips := desiredRoutes(r.NodeName, rz, keepAccepted(list, r.acceptedRoutes(), false))
	state := routeState{version: rsr.ResourceVersion}
	for _, sk := range skips {
		if sk.failed {
			state.failure = sk.reason
		}
	}
	var flows []openflow.Flow
	for _, rt := range routes {
		r.rememberPeer(rt.name, rt.nodeIP)
		rf, hr, err := r.realise(ctx, rz, rt)
		if err != nil {
			state.failure = err.Error()
			continue
		}
		flows = append(flows, rf...)
		state.hostRoutes = append(state.hostRoutes, hr)
		state.peers = append(state.peers, rt.peer())
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
	r.record(name, state, len(routes) > 0 || state.failure != "")
	r.publishRoutes()
	r.State.SetRoutePeers(name, state.realisedPeers())
	return nil
}

// acceptedRoutes returns the last accepted version of every route (keepAccepted), made on first use.
func (r *Reconciler) acceptedRoutes() map[string]networkv1alpha1.RemoteSubnetRoute {
	if r.accepted == nil {
		r.accepted = map[string]networkv1alpha1.RemoteSubnetRoute{}
	}
	return r.accepted
}

// record keeps what was installed for a route, or forgets the route when keep is false.
func (r *Reconciler) record(name string, st routeState, keep bool) {
	delete(r.failed, name)
	if !keep {
		delete(r.installed, name)
		return
	}
	r.installed[name] = st
	if st.failure != "" {
		r.failed[name] = st.failure
	}
}

func sameHostRoute(a, b hostnet.Route) bool {
	return a.Dst == b.Dst && a.Gateway == b.Gateway && a.LinkIndex == b.LinkIndex
}

// publishRoutes reports the routes' outcome to the node network reconciler.
func (r *Reconciler) publishRoutes() {
	res := nodenetwork.RoutesResult{Desired: len(r.installed), Installed: len(r.installed) - len(r.failed)}
	for name, reason := range r.failed {
		res.Failed = append(res.Failed, name+": "+reason)
	}
	slices.Sort(res.Failed)
	r.State.SetRoutes(res)
}

// realisedPeers are the route's peers the egress reconciler may use: none while it failed.
func (st routeState) realisedPeers() []nodenetwork.Peer {
	if st.failure != "" {
		return nil
	}
	return st.peers
}

// peer is the route as the egress reconciler reads it: the peer's node, its tunnel endpoint, VNI,
// inner MAC and Pod CIDR.
func (rt route) peer() nodenetwork.Peer {
	return nodenetwork.Peer{NodeName: rt.nodeName, Route: pipeline.RemoteRoute{CIDR: rt.cidr, Tunnel: rt.tunnel, NodeIP: rt.nodeIP, VNI: rt.vni, DstMAC: rt.dstMAC}}
}

// realise returns the flows and the host route of one route.
func (r *Reconciler) realise(ctx context.Context, rz nodenetwork.Realized, rt route) ([]openflow.Flow, hostnet.Route, error) {
	id := objectID(rt.name)
	rr := pipeline.RemoteRoute{CIDR: rt.cidr, Tunnel: rt.tunnel, NodeIP: rt.nodeIP, VNI: rt.vni, DstMAC: rt.dstMAC, Peer: id}
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
	type key struct {
		table    uint8
		priority uint16
		match    string
	}
	seen := make(map[key]bool, len(flows))
	out := flows[:0]
	for _, f := range flows {
		k := key{f.Table, f.Priority, f.MatchString()}
		if seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, f)
	}
	return out
}
