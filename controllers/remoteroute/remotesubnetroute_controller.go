package remoteroute

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/nodenetwork"
	"github.com/winnet-io/winnet/internal/hostnet"
	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/internal/pipeline"
)

// DefaultResyncPeriod is how often routes are re-checked when nothing else triggers it.
const DefaultResyncPeriod = 2 * time.Second

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
}

// SetupWithManager registers the reconciler for RemoteSubnetRoutes and the node's WindowsNodeNetwork.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	all := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{allRoutes}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("remotesubnetroute").
		Watches(&networkv1alpha1.RemoteSubnetRoute{}, all).
		Watches(&networkv1alpha1.WindowsNodeNetwork{}, all).
		Complete(r)
}

// Reconcile converges the node's remote routes.
func (r *Reconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	resync := r.ResyncPeriod
	if resync == 0 {
		resync = DefaultResyncPeriod
	}
	rz, ok := r.State.Realized()
	if !ok {
		ctrl.LoggerFrom(ctx).V(1).Info("Node network not ready; routes wait for it")
		return ctrl.Result{RequeueAfter: resync / 2}, nil
	}
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
	for _, rt := range routes {
		rf, hr, err := r.realise(ctx, rz, rt)
		if err != nil {
			failed[rt.name] = err.Error()
			continue
		}
		flows = append(flows, rf...)
		hostRoutes = append(hostRoutes, hr)
	}
	synced, err := rz.Flows.Sync(ctx, pipeline.CategoryRoute, dedupe(flows))
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

	res := nodenetwork.RoutesResult{}
	names := map[string]bool{}
	for _, rt := range routes {
		names[rt.name] = true
	}
	for name := range failed {
		names[name] = true
	}
	res.Desired = len(names)
	for name := range names {
		if reason, bad := failed[name]; bad {
			res.Failed = append(res.Failed, name+": "+reason)
		} else {
			res.Installed++
		}
	}
	slices.Sort(res.Failed)
	r.State.SetRoutes(res)
	return ctrl.Result{RequeueAfter: resync}, nil
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
