package service

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/winnet-io/winnet/controllers/nodenetwork"
	"github.com/winnet-io/winnet/internal/hostnet"
	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/internal/pipeline"
)

// DefaultResyncPeriod is how often every Service is re-checked against the switch and the host when
// nothing else triggers it: flows the node network found drifted (and invalidated) are sent again,
// host routes repaired.
const DefaultResyncPeriod = 10 * time.Second

// notReadyRetry is how soon Services look again for a node network that is not ready yet.
const notReadyRetry = 200 * time.Millisecond

// UnsupportedProtocolReason is the reason of the Warning Event on a Service with a port whose
// protocol the Windows datapath cannot track (SCTP).
const UnsupportedProtocolReason = "UnsupportedProtocol"

// allServices is the reconciler's single work item: the node's Services are one desired set of
// groups and flows, synced as one flow category, so every change is applied as its difference.
var allServices = reconcile.Request{NamespacedName: types.NamespacedName{Name: "services"}}

// Reconciler realises every Service in the node's pipeline: one select group per Service port (and
// one more for NodePort clients from outside), the flows that send new connections to them, and
// the Services' base flows. It gets the bridge through the node network's State.
type Reconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	NodeName string
	State    *nodenetwork.State
	// Net routes the host's traffic to ClusterIPs into the gateway; nil leaves the host without
	// ClusterIP routes.
	Net hostnet.Interface
	// ResyncPeriod is the drift check period; zero means DefaultResyncPeriod.
	ResyncPeriod time.Duration
	// Clock tells when the host's routes were last read back; nil is the real clock.
	Clock clock.PassiveClock

	// groupIDs holds the group of each Service port (and kind); nextGroup is the highest id
	// allocated, freeGroups the ids below it whose groups are gone (lowest first), given out again.
	groupIDs   map[groupKey]uint32
	nextGroup  uint32
	freeGroups []uint32
	// bridge and groups are the connection the groups were last synced on, and those groups.
	bridge *openflow.Bridge
	groups []openflow.Group
	// warned holds the Services (by UID and resourceVersion) already given a Warning Event.
	warned map[types.UID]string
	// realised holds what each Service came to in the last pass, computed on the node network
	// realisedOn with the NodePort addresses realisedIPs.
	realised    map[types.NamespacedName]*realisedService
	realisedOn  nodenetwork.Realized
	realisedIPs []netip.Addr
	// routed holds the ClusterIP routes the last pass left on the host through the gateway
	// routedLink, whose routes were read back at routesChecked; nil: read them back next pass.
	routed        map[netip.Prefix]bool
	routedLink    int
	routesChecked time.Time
	// rejecter refuses connections to Service ports without endpoints (reject.go).
	rejecter *rejecter
}

// groupKey identifies the group of a Service port: the cluster one, or the external one.
type groupKey struct {
	port     portKey
	external bool
}

// SetupWithManager registers the reconciler for Services, EndpointSlices and changes of the
// realised node network, and makes the Services one of the bridge's flow owners.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.State.AddFlowOwner(nodenetwork.ServiceFlows)
	all := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{allServices}
	})
	realized := r.State.Subscribe()
	onRealized := source.Func(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		q.Add(allServices)
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-realized:
					q.Add(allServices)
				}
			}
		}()
		return nil
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("service").
		Watches(&corev1.Service{}, all).
		Watches(&discoveryv1.EndpointSlice{}, all).
		WatchesRawSource(onRealized).
		Complete(r)
}

// Reconcile converges every Service: groups first (new and changed ones, so that no flow refers to
// a missing group), then the flows in one bundle, then the removal of the groups no longer used.
// The outcome is reported to the node network reconciler, which writes it as ServicesReady.
func (r *Reconciler) Reconcile(ctx context.Context, _ ctrl.Request) (_ ctrl.Result, retErr error) {
	log := ctrl.LoggerFrom(ctx)
	rz, ok := r.State.Realized()
	if !ok {
		log.V(1).Info("Node network not ready; Services wait for it")
		return ctrl.Result{RequeueAfter: notReadyRetry}, nil
	}
	defer func() {
		if retErr != nil {
			r.State.SetServices(nodenetwork.ServicesResult{Err: retErr.Error()})
		}
	}()
	start := time.Now()
	// The pass only reads the cached objects: listing them without a deep copy saves copying
	// every Service and EndpointSlice of the cluster on every pass.
	services := &corev1.ServiceList{}
	if err := r.Client.List(ctx, services, client.UnsafeDisableDeepCopy); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing Services: %w", err)
	}
	slicesList := &discoveryv1.EndpointSliceList{}
	if err := r.Client.List(ctx, slicesList, client.UnsafeDisableDeepCopy); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing EndpointSlices: %w", err)
	}
	bySvc := map[types.NamespacedName][]discoveryv1.EndpointSlice{}
	for _, s := range slicesList.Items {
		name, ok := s.Labels[discoveryv1.LabelServiceName]
		if !ok {
			continue
		}
		key := types.NamespacedName{Namespace: s.Namespace, Name: name}
		bySvc[key] = append(bySvc[key], s)
	}

	groups, flows, clusterIPs, counts := r.desired(ctx, rz, services.Items, bySvc)

	if r.bridge != rz.Flows {
		// A new connection knows none of the switch's groups: they are all added (or replaced).
		r.bridge, r.groups = rz.Flows, nil
		r.handleRefusals(ctx, rz.Flows)
	}
	// New and changed groups, keeping the old ones that flows may still refer to.
	union := slices.Clone(groups)
	desiredIDs := make(map[uint32]bool, len(groups))
	for _, g := range groups {
		desiredIDs[g.ID] = true
	}
	for _, g := range r.groups {
		if !desiredIDs[g.ID] {
			union = append(union, g)
		}
	}
	added, err := rz.Flows.SyncGroups(ctx, union)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("installing Service groups: %w", err)
	}
	r.groups = union
	synced, err := rz.Flows.Sync(ctx, pipeline.CategoryService, flows)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("installing Service flows: %w", err)
	}
	gs, err := rz.Flows.SyncGroups(ctx, groups)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("removing Service groups: %w", err)
	}
	r.groups = groups
	r.forgetGroups(groups)
	r.State.FlowsSynced(ctx, nodenetwork.ServiceFlows, rz.Flows)
	resync := r.ResyncPeriod
	if resync == 0 {
		resync = DefaultResyncPeriod
	}
	if err := r.syncHostRoutes(ctx, rz, clusterIPs, resync); err != nil {
		return ctrl.Result{}, err
	}
	changed := synced.Mods() > 0 || added.Mods() > 0 || gs.Mods() > 0
	observePass(counts, changed, time.Since(start))
	r.State.SetServices(nodenetwork.ServicesResult{Services: counts.services, Ports: counts.ports, Endpoints: counts.endpoints})
	if changed {
		log.Info("Synced Service flows", "services", counts.services, "ports", counts.ports, "endpoints", counts.endpoints,
			"flowMods", synced.Mods(), "groupMods", added.Mods()+gs.Mods(), "groups", len(groups), "took", time.Since(start))
	}
	return ctrl.Result{RequeueAfter: resync}, nil
}

type counts struct{ services, ports, endpoints int }

// realisedService is what one Service came to in the last pass that computed it, and from what:
// a later pass whose inputs are the same reuses it instead of computing it again, so that one
// endpoint changing among 10,000 Services costs that Service's computation, not 10,000.
type realisedService struct {
	// inputs identifies the Service and EndpointSlice versions it was computed from.
	inputs    string
	d         desiredService
	groups    []openflow.Group
	flows     []openflow.Flow
	clusterIP netip.Addr
	counts    counts
}

// serviceInputs identifies the versions of a Service and of its EndpointSlices.
func serviceInputs(svc *corev1.Service, eps []discoveryv1.EndpointSlice) string {
	versions := make([]string, 0, 1+len(eps))
	versions = append(versions, string(svc.UID)+"/"+svc.ResourceVersion)
	for i := range eps {
		versions = append(versions, string(eps[i].UID)+"/"+eps[i].ResourceVersion)
	}
	slices.Sort(versions[1:]) // the cache lists slices in no particular order
	return strings.Join(versions, ",")
}

// desired computes the groups and flows of every Service, emitting a Warning Event for ports that
// cannot be realised. A Service whose inputs did not change since the last pass, on the same node
// network, reuses what that pass computed (same groups and flows, so the switch is sent nothing
// for it).
func (r *Reconciler) desired(ctx context.Context, rz nodenetwork.Realized, services []corev1.Service, bySvc map[types.NamespacedName][]discoveryv1.EndpointSlice) ([]openflow.Group, []openflow.Flow, []netip.Addr, counts) {
	var c counts
	var clusterIPs []netip.Addr
	flows := rz.Node.ServiceBaseFlows()
	var groups []openflow.Group
	if r.groupIDs == nil {
		r.groupIDs, r.warned = map[groupKey]uint32{}, map[types.UID]string{}
	}
	ips := nodeIPs(rz)
	if rz.Flows != r.realisedOn.Flows || !reflect.DeepEqual(rz.Node, r.realisedOn.Node) || !slices.Equal(ips, r.realisedIPs) {
		r.realised = nil // computed for another node network
	}
	r.realisedOn, r.realisedIPs = rz, ips
	realised := make(map[types.NamespacedName]*realisedService, len(services))
	hairpin := map[netip.Addr]bool{}
	for i := range services {
		svc := &services[i]
		name := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
		inputs := serviceInputs(svc, bySvc[name])
		rs := r.realised[name]
		if rs == nil || rs.inputs != inputs {
			rs = r.realiseService(ctx, svc, bySvc[name], rz, ips)
			rs.inputs = inputs
		}
		realised[name] = rs
		if len(rs.d.ports) == 0 {
			continue
		}
		c.services++
		c.ports += rs.counts.ports
		c.endpoints += rs.counts.endpoints
		if rs.clusterIP.IsValid() {
			clusterIPs = append(clusterIPs, rs.clusterIP)
		}
		for _, p := range rs.d.ports {
			for _, ep := range p.endpoints {
				if ep.local {
					hairpin[ep.addr.Addr()] = true
				}
			}
		}
		groups = append(groups, rs.groups...)
		flows = append(flows, rs.flows...)
	}
	r.realised = realised
	for _, ip := range slices.SortedFunc(maps.Keys(hairpin), netip.Addr.Compare) {
		flows = append(flows, rz.Node.HairpinFlows(ip)...)
	}
	return groups, flows, clusterIPs, c
}

// realiseService computes the groups and flows of one Service.
func (r *Reconciler) realiseService(ctx context.Context, svc *corev1.Service, eps []discoveryv1.EndpointSlice, rz nodenetwork.Realized, ips []netip.Addr) *realisedService {
	rs := &realisedService{d: desiredPorts(svc, eps, r.NodeName)}
	if len(rs.d.unsupported) > 0 {
		r.warnUnsupported(ctx, svc, rs.d.unsupported)
	}
	if len(rs.d.ports) == 0 {
		return rs
	}
	rs.clusterIP = rs.d.ports[0].clusterIP
	for _, p := range rs.d.ports {
		rs.counts.ports++
		rs.counts.endpoints += len(p.endpoints)
		sp := pipeline.ServicePort{
			ClusterIP: p.clusterIP, Protocol: p.protocol, Port: uint16(p.key.Port), NodePort: p.nodePort,
			ExternalIPs: p.externalIPs, LoadBalancerIPs: p.loadBalancerIPs, SourceRanges: p.sourceRanges,
			InternalLocal: p.internalLocal, ExternalLocal: p.externalLocal, AffinityTimeout: p.affinityTimeout,
			ClusterGroup: r.groupID(groupKey{port: p.key}),
		}
		if p.nodePort != 0 {
			sp.NodeIPs = ips
		}
		if p.nodePort != 0 || len(p.externalIPs) > 0 || len(p.loadBalancerIPs) > 0 {
			sp.ExternalGroup = r.groupID(groupKey{port: p.key, external: true})
		}
		for _, ep := range p.endpoints {
			sp.Endpoints = append(sp.Endpoints, pipeline.Endpoint{Addr: ep.addr, Local: ep.local})
		}
		g, f := rz.Node.ServiceFlows(sp)
		rs.groups = append(rs.groups, g...)
		rs.flows = append(rs.flows, f...)
	}
	return rs
}

// handleRefusals has the bridge's packet-ins answered by the rejecter (reject.go).
func (r *Reconciler) handleRefusals(ctx context.Context, b *openflow.Bridge) {
	if r.rejecter == nil {
		r.rejecter = newRejecter()
		log := ctrl.LoggerFrom(ctx)
		r.rejecter.onError = func(err error) {
			log.V(1).Info("Could not refuse a connection to a Service without endpoints", "error", err.Error())
		}
	}
	rj := *r.rejecter
	rj.send = b.SendPacketOut
	b.SetPacketInHandler(rj.handle)
}

// syncHostRoutes routes every ClusterIP from the host into the gateway, through
// pipeline.ServiceNextHop (the pipeline answers its ARP), so that kubelet and host processes reach
// Services; routes through that next hop that no Service wants are deleted. The next hop is the
// routes' mark: they are not winnet's owned routes, which the remote route reconciler owns.
//
// The host's routes are read back once per resync period (and after a failure), which repairs
// drift; in between, a pass changes only the routes its Services changed since the last one, so
// that one endpoint changing among 10,000 Services does not cost a listing of 10,000 routes.
func (r *Reconciler) syncHostRoutes(ctx context.Context, rz nodenetwork.Realized, clusterIPs []netip.Addr, resync time.Duration) (retErr error) {
	if r.Net == nil {
		return nil
	}
	want := make(map[netip.Prefix]bool, len(clusterIPs))
	for _, ip := range clusterIPs {
		want[netip.PrefixFrom(ip, 32)] = true
	}
	route := func(dst netip.Prefix) hostnet.Route {
		return hostnet.Route{Dst: dst, Gateway: pipeline.ServiceNextHop, LinkIndex: rz.GatewayLinkIndex, OnLink: true}
	}
	now := r.clock().Now()
	defer func() {
		if retErr != nil {
			r.routed = nil // read the host's routes back next time
		}
	}()
	if r.routed != nil && r.routedLink == rz.GatewayLinkIndex && now.Sub(r.routesChecked) < resync {
		var missing []hostnet.Route
		for dst := range want {
			if !r.routed[dst] {
				missing = append(missing, route(dst))
			}
		}
		for dst := range r.routed {
			if !want[dst] {
				if err := r.Net.DeleteRoute(ctx, route(dst)); err != nil {
					return fmt.Errorf("removing the host route to %s: %w", dst, err)
				}
			}
		}
		if err := r.Net.EnsureRoutes(ctx, missing); err != nil {
			return fmt.Errorf("routing ClusterIPs from the host: %w", err)
		}
		r.routed = want
		return nil
	}
	existing, err := r.Net.Routes(ctx, hostnet.RouteFilter{LinkIndex: rz.GatewayLinkIndex})
	if err != nil {
		return fmt.Errorf("listing the host's ClusterIP routes: %w", err)
	}
	have := map[netip.Prefix]bool{}
	for _, e := range existing {
		if e.Gateway != pipeline.ServiceNextHop {
			continue
		}
		if want[e.Dst] {
			have[e.Dst] = true
			continue
		}
		if err := r.Net.DeleteRoute(ctx, e); err != nil {
			return fmt.Errorf("removing the host route %s: %w", e, err)
		}
	}
	var missing []hostnet.Route
	for dst := range want {
		if !have[dst] {
			missing = append(missing, route(dst))
		}
	}
	if err := r.Net.EnsureRoutes(ctx, missing); err != nil {
		return fmt.Errorf("routing ClusterIPs from the host: %w", err)
	}
	r.routed, r.routedLink, r.routesChecked = want, rz.GatewayLinkIndex, now
	return nil
}

func (r *Reconciler) clock() clock.PassiveClock {
	if r.Clock == nil {
		return clock.RealClock{}
	}
	return r.Clock
}

// nodeIPs are the node's addresses NodePorts are served on: the node IP, then every other IPv4
// address the bridge interface holds (kube-proxy's default, every node address), except
// link-local ones (169.254.0.0/16, the system's own per link) and addresses in the Pod subnet (the
// gateway's). The set follows the bridge interface's addresses as the node network last saw them:
// an address added or removed there changes the realised node network, which wakes the reconciler.
func nodeIPs(rz nodenetwork.Realized) []netip.Addr {
	ips := []netip.Addr{rz.Node.NodeIP}
	for _, p := range rz.BridgeAddresses {
		ip := p.Addr().Unmap()
		if !ip.Is4() || ip.IsLinkLocalUnicast() || ip.IsLoopback() || ip.IsMulticast() || ip.IsUnspecified() ||
			ip == rz.Node.GatewayIP || rz.Node.PodCIDR.Contains(ip) || slices.Contains(ips, ip) {
			continue
		}
		ips = append(ips, ip)
	}
	return ips
}

// groupID returns the group of a Service port, allocating one the first time.
func (r *Reconciler) groupID(k groupKey) uint32 {
	if id, ok := r.groupIDs[k]; ok {
		return id
	}
	var id uint32
	if len(r.freeGroups) > 0 {
		id, r.freeGroups = r.freeGroups[0], r.freeGroups[1:]
	} else {
		r.nextGroup++
		id = r.nextGroup
	}
	r.groupIDs[k] = id
	return id
}

// forgetGroups frees the ids of groups that are gone, for groupID to give out again: it runs once
// the switch no longer has those groups and no flow refers to them, so a reused id never meets a
// stale flow. Ids stay few and low however many Services come and go.
func (r *Reconciler) forgetGroups(installed []openflow.Group) {
	keep := map[uint32]bool{}
	for _, g := range installed {
		keep[g.ID] = true
	}
	for k, id := range r.groupIDs {
		if !keep[id] {
			delete(r.groupIDs, k)
			r.freeGroups = append(r.freeGroups, id)
		}
	}
	slices.Sort(r.freeGroups)
}

// warnUnsupported emits one Warning Event per Service version for ports that cannot be realised.
func (r *Reconciler) warnUnsupported(ctx context.Context, svc *corev1.Service, ports []string) {
	if r.warned[svc.UID] == svc.ResourceVersion {
		return
	}
	r.warned[svc.UID] = svc.ResourceVersion
	ctrl.LoggerFrom(ctx).Info("Service has ports the Windows datapath cannot track", "service", client.ObjectKeyFromObject(svc), "ports", ports)
	if r.Recorder != nil {
		r.Recorder.Eventf(svc, nil, corev1.EventTypeWarning, UnsupportedProtocolReason, "Proxy",
			"Ports %s are not served on node %s: the Windows datapath's conntrack tracks only TCP, UDP and ICMP", strings.Join(ports, ", "), r.NodeName)
	}
}
