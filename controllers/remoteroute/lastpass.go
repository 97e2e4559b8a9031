package remoteroute

import (
	"bytes"
	"context"
	"reflect"
	"slices"
	"strings"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/nodenetwork"
	"github.com/winnet-io/winnet/internal/hostnet"
)

// lastPass is what a full pass computed the routes' flows from. The flows are a function of the
// routes desiredRoutes computed and of the realised node network, and the bridge keeps them
// installed (it replays them to a new ovs-vswitchd, its flow monitor puts back what someone else
// deleted): a periodic pass whose inputs are the same installs nothing new, so it checks the host
// routes alone. Computing every route's flows again every ResyncPeriod was most of an idle agent's
// CPU and garbage in a cluster of 5,000 Nodes (40,000 flows, tens of MB every 10 s, which set the
// heap's high-water mark; bench-scale, issue 64).
//
// A route through a next hop (not tunnelled) is never taken as unchanged: its flows carry the next
// hop's MAC, which the pass resolves anew. A pass with a failure is not either: the next one tries
// again.
type lastPass struct {
	rz            nodenetwork.Realized
	invalidations uint64
	routes        []route
	skips         []skipped
	hostRoutes    []hostnet.Route
}

// newLastPass records a full pass, or returns nil when the next one must compute again.
func newLastPass(rz nodenetwork.Realized, routes []route, skips []skipped, hostRoutes []hostnet.Route, failed map[string]string) *lastPass {
	if len(failed) > 0 || rz.Flows == nil || slices.ContainsFunc(routes, func(rt route) bool { return !rt.tunnel }) {
		return nil
	}
	return &lastPass{rz: rz, invalidations: rz.Flows.Invalidations(), routes: routes, skips: sortedSkips(skips), hostRoutes: hostRoutes}
}

// sortedSkips returns the skips by name: they come in the cache's order, which is any.
func sortedSkips(skips []skipped) []skipped {
	out := slices.Clone(skips)
	slices.SortFunc(out, func(a, b skipped) int { return strings.Compare(a.name, b.name) })
	return out
}

// unchanged reports whether a pass over routes and skips on rz would compute the flows the last
// one installed.
func (l *lastPass) unchanged(rz nodenetwork.Realized, routes []route, skips []skipped) bool {
	if l == nil || rz.Flows != l.rz.Flows || rz.Flows.Invalidations() != l.invalidations ||
		!slices.EqualFunc(routes, l.routes, sameRoute) || !slices.Equal(sortedSkips(skips), l.skips) {
		return false
	}
	a, b := rz, l.rz
	a.Flows, b.Flows = nil, nil
	return reflect.DeepEqual(a, b)
}

func sameRoute(a, b route) bool {
	return a.name == b.name && a.nodeName == b.nodeName && a.cidr == b.cidr && a.tunnel == b.tunnel && a.nodeIP == b.nodeIP &&
		a.gatewayIP == b.gatewayIP && a.vni == b.vni && bytes.Equal(a.dstMAC, b.dstMAC) && a.created.Equal(b.created)
}

// checkHostRoutes is the periodic pass of unchanged routes: the host routes the last pass desired are
// checked against the host, and the routes' versions recorded. It returns false when a host route
// failed: the full pass then says which route, as it does.
func (r *Reconciler) checkHostRoutes(ctx context.Context, rz nodenetwork.Realized, routes []route, items []networkv1alpha1.RemoteSubnetRoute) bool {
	start := time.Now()
	if failed := r.syncHostRoutes(ctx, rz, routes, r.last.hostRoutes); len(failed) > 0 {
		return false
	}
	for i := range items {
		if st, ok := r.installed[items[i].Name]; ok {
			st.version = items[i].ResourceVersion
			r.installed[items[i].Name] = st
		}
	}
	r.State.FlowsSynced(ctx, nodenetwork.RouteFlows, rz.Flows)
	r.readAdmission(ctx, rz)
	ctrl.LoggerFrom(ctx).V(1).Info("Routes unchanged; checked the host routes", "routes", len(routes), "took", time.Since(start))
	return true
}
