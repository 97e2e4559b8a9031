package service

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/winnet-io/winnet/controllers/nodenetwork"
	"github.com/winnet-io/winnet/internal/hostnet"
	"github.com/winnet-io/winnet/internal/hostport"
	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/internal/pipeline"
)

// DefaultResyncPeriod is the period of the drift check (checkDrift): flows the node network found
// drifted (and invalidated) are sent again, the host's ClusterIP routes read back and repaired.
const DefaultResyncPeriod = 10 * time.Second

// fullPassEvery is how many drift checks run between two full passes that nothing else asked
// for (5 minutes with the default period): the safety net of the per-Service passes.
const fullPassEvery = 30

// serviceWorkers is how many Services' passes can be under way at once: at most that many changes
// of different Services share one of the switch's bundles. A worker waiting for the switch costs a
// goroutine.
const serviceWorkers = 16

// notReadyRetry is how soon Services look again for a node network that is not ready yet.
const notReadyRetry = 200 * time.Millisecond

// UnsupportedProtocolReason is the reason of the Warning Event on a Service with a port whose
// protocol the Windows datapath cannot track (SCTP).
const UnsupportedProtocolReason = "UnsupportedProtocol"

// IPv6NotServedReason is the reason of the Normal Event on a Service whose ClusterIPs are all IPv6
// (a dual-stack cluster's SingleStack IPv6 Service): the node does not serve it.
const IPv6NotServedReason = "IPv6NotServed"

// The work items that name no Service (every Service has a namespace; these have none):
//   - fullPass, the pass over every Service: at start-up, when the realised node network changes,
//     and from the drift check;
//   - driftCheck, every ResyncPeriod (checkDrift).
//
// Every other work item names one Service: an event of the Service or of one of its EndpointSlices
// queues it, and its pass touches that Service's groups and flows only.
var (
	fullPass   = reconcile.Request{NamespacedName: types.NamespacedName{Name: "full-pass"}}
	driftCheck = reconcile.Request{NamespacedName: types.NamespacedName{Name: "drift-check"}}
)

// serviceNameIndex indexes the cached EndpointSlices by the Service they belong to (their
// kubernetes.io/service-name label), so that a Service's pass finds its slices without a look at
// every slice of its namespace.
const serviceNameIndex = "winnet.service-name"

// Reconciler realises every Service in the node's pipeline: one select group per Service port (and
// one more for NodePort clients from outside), the flows that send new connections to them, and
// the Services' base flows. It gets the bridge through the node network's State.
//
// How one EndpointSlice change reaches the switch: the slice's event queues its Service's name
// (SetupWithManager); reconcileOne reads that Service and its slices from the cache, computes its
// groups and flows (realiseService), and sends what differs from what the Service had (its groups
// and the flows of its cookie object) in one bundle (openflow.Bridge.SyncObjectWithGroups). The
// full pass (reconcileAll) computes every Service the same way, reusing what did not change, and
// syncs the whole Service category: it repairs whatever the per-Service passes could not. It costs
// a look at every Service (about 0.1 s of CPU at 10,000), so it runs only when it is needed and,
// as a safety net, every fullPassEvery drift checks.
type Reconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	NodeName string
	State    *nodenetwork.State
	// Net routes the host's traffic to ClusterIPs into the gateway; nil leaves the host without
	// ClusterIP routes.
	Net hostnet.Routing
	// NodePorts NATs the host's own connections to its NodePorts to pipeline.NodePortVirtualIP,
	// which Net routes into the gateway and the switch balances over the ports' endpoints; nil
	// leaves the host unable to reach its own NodePorts.
	NodePorts hostnet.NodePortNAT
	// HostPorts holds the hostPort mappings of the node's Pods, realised as NodePorts with one
	// local endpoint (hostports.go); nil serves none.
	HostPorts *hostport.Registry
	// ResyncPeriod is the period of the drift check; zero means DefaultResyncPeriod.
	ResyncPeriod time.Duration
	// Clock tells when the host's routes were last read back; nil is the real clock.
	Clock clock.PassiveClock
	// IDsFile keeps the group ids, cookie objects and UDP zones the reconciler gave out, for the next
	// agent to take back (idsfile.go); empty keeps them only in memory.
	IDsFile string

	// passes lets the passes of several Services run at once (the controller's workers never run
	// two passes of one Service at once), each holding it for reading, while the full pass and the
	// drift check hold it for writing: they run alone. A Service's pass releases mu while the
	// switch commits its bundle, so that the changes of the Services queued behind it are computed
	// meanwhile and share the next bundle (the bridge commits the Syncs that wait for it together)
	// instead of each waiting for the one before to be committed. What a pass reads and changes of
	// the state below is its own Service's (its realised entry, group ids, cookie object, UDP
	// zones) or counts that other passes change by adding to them (hairpin, clusterIPs, nodePorts,
	// totals), so the order in which concurrent passes of different Services finish does not
	// matter.
	passes sync.RWMutex
	// mu guards what follows, and tests look in.
	mu sync.Mutex
	// groups holds the group id of each Service port (and kind), objects the cookie object of
	// each Service's flows.
	groups  ids[groupKey]
	objects ids[types.NamespacedName]
	// idsLoaded is set once IDsFile was read (loadIDs).
	idsLoaded bool
	// warned holds the Services (by UID and resourceVersion) already given a Warning Event for
	// ports that cannot be realised; warnedNoZone those given one for UDP ports without a zone.
	warned       map[types.UID]string
	warnedNoZone map[types.UID]string
	// warnedHeld holds the Pods (by UID or name) given a Warning Event for hostPorts a NodePort
	// holds, with the Event's message (hostports.go).
	warnedHeld map[string]string
	// udp gives UDP Service ports their conntrack zones and flushes them (udpzones.go).
	udp udpZones
	// realised holds what each Service came to, computed on the node network realisedOn with the
	// NodePort addresses realisedIPs; complete is set once a full pass installed every Service on
	// realisedOn: per-Service passes build on it until the node network changes.
	realised    map[types.NamespacedName]*realisedService
	realisedOn  nodenetwork.Realized
	realisedIPs []netip.Addr
	complete    bool
	// hairpin counts the Services of each local endpoint address; totals sums what the Services
	// came to; clusterIPs counts the Services of each ClusterIP (the host routes they need).
	hairpin    hairpinCount
	totals     counts
	clusterIPs map[netip.Addr]int
	// nodePorts counts the Services of each NodePort (the host NAT they need); natted is the set
	// the host NATs, as last applied, when nattedOK (otherwise: apply it next pass). No NodePort
	// at all is a set too: it is applied once, not on every pass.
	nodePorts map[hostnet.NodePort]int
	natted    []hostnet.NodePort
	nattedOK  bool
	// fullPasses counts the full passes that completed; checks counts the drift checks since the
	// last one; synced is the bridge's invalidation count it started from.
	fullPasses int
	checks     int
	synced     uint64
	// routed holds the ClusterIP routes the passes left on the host through the gateway
	// routedLink, whose routes were read back at routesChecked; nil: read them back next pass.
	routed        map[netip.Prefix]bool
	routedLink    int
	routesChecked time.Time
	// rejecter refuses connections to Service ports without endpoints (reject.go), answering the
	// packet-ins of the connection refusalsOn.
	rejecter   *rejecter
	refusalsOn *openflow.Bridge
}

// SetupWithManager registers the reconciler for Services, EndpointSlices and changes of the
// realised node network, and makes the Services one of the bridge's flow owners.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.State.AddFlowOwner(nodenetwork.ServiceFlows)
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &discoveryv1.EndpointSlice{}, serviceNameIndex, func(o client.Object) []string {
		if name, ok := o.GetLabels()[discoveryv1.LabelServiceName]; ok {
			return []string{name}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("indexing EndpointSlices by Service: %w", err)
	}
	// A slice's event queues its Service (both Services when its label changed: the map function
	// sees the old and the new slice).
	ofSlice := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		name, ok := o.GetLabels()[discoveryv1.LabelServiceName]
		if !ok {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
	})
	// The full pass (and the drift check) at start; the full pass again whenever the node network
	// is realised anew.
	wakes := []<-chan struct{}{r.State.Subscribe()}
	if r.HostPorts != nil {
		// A hostPort claimed or released: a full pass realises the hostPorts (hostports.go).
		wakes = append(wakes, r.HostPorts.Subscribe())
	}
	onRealized := nodenetwork.WakeSource(
		func(q nodenetwork.Queue) { q.Add(fullPass); q.Add(driftCheck) },
		func(q nodenetwork.Queue) { q.Add(fullPass) },
		wakes...)
	return ctrl.NewControllerManagedBy(mgr).
		Named("service").
		// Several workers: the passes of several Services are under way at once and their changes
		// share the switch's bundles (see passes); the drift check reads the host's routes back
		// (without the lock, listHostRoutes) while Services' passes run.
		WithOptions(controller.Options{MaxConcurrentReconciles: serviceWorkers}).
		Watches(&corev1.Service{}, &handler.EnqueueRequestForObject{}).
		Watches(&discoveryv1.EndpointSlice{}, ofSlice).
		WatchesRawSource(onRealized).
		Complete(r)
}

// Reconcile runs the full pass, the drift check, or the pass of the Service named. The outcome is
// reported to the node network reconciler, which writes it as ServicesReady.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if req != fullPass && req != driftCheck {
		if built, err := r.reconcileService(ctx, req.NamespacedName); built {
			return ctrl.Result{}, err
		}
		// Nothing to build on yet on this node network (the full pass queued when the node
		// network changed covers this Service too), or the Service took or gave back a hostPort's
		// port: the full pass.
		req = fullPass
	}
	var listed *hostRoutes
	if req == driftCheck {
		listed = r.listHostRoutes(ctx)
	}
	// The full pass and the drift check run alone: no Service's pass is under way meanwhile.
	r.passes.Lock()
	defer r.passes.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	rz, ok := r.State.Realized()
	if !ok {
		if req == driftCheck {
			return ctrl.Result{RequeueAfter: r.resync()}, nil
		}
		ctrl.LoggerFrom(ctx).V(1).Info("Node network not ready; Services wait for it")
		return ctrl.Result{RequeueAfter: notReadyRetry}, nil
	}
	var err error
	if req == fullPass {
		err = r.reconcileAll(ctx, rz)
	} else {
		err = r.checkDrift(ctx, rz, listed)
	}
	if err != nil {
		r.State.SetServices(nodenetwork.ServicesResult{Err: err.Error()})
	}
	if req == driftCheck {
		return ctrl.Result{RequeueAfter: r.resync()}, err
	}
	return ctrl.Result{}, err
}

// reconcileService runs the pass of one Service, beside the passes of other Services (see
// passes), and tells whether there was something to build it on: a full pass that completed on
// the node network realised now. A Service whose node network is not ready yet counts as built:
// the full pass covers it once the node network is.
func (r *Reconciler) reconcileService(ctx context.Context, name types.NamespacedName) (built bool, err error) {
	r.passes.RLock()
	defer r.passes.RUnlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	rz, ok := r.State.Realized()
	if !ok {
		return true, nil
	}
	if !r.complete || !r.builtOn(rz, nodeIPs(rz)) {
		return false, nil
	}
	if err := r.reconcileOne(ctx, rz, name); errors.Is(err, errFullPass) {
		return false, nil
	} else if err != nil {
		r.State.SetServices(nodenetwork.ServicesResult{Err: err.Error()})
		return true, err
	}
	return true, nil
}

// errFullPass tells reconcileService that the Service's change needs the full pass.
var errFullPass = errors.New("the Service's change needs the full pass")

// checkDrift runs every ResyncPeriod. It runs the full pass when the per-Service passes have
// nothing to build on (the node network changed, a full pass failed), when the bridge's flows were
// found drifted and invalidated since the last full pass (SyncObject would send the stale flows of
// one Service only), and every fullPassEvery checks; otherwise it reads the host's ClusterIP routes
// back (listed: read before the lock was taken, see listHostRoutes) and repairs them. Between full
// passes every Service is up to date by construction: its events queue its own pass, and a failed
// pass is retried.
func (r *Reconciler) checkDrift(ctx context.Context, rz nodenetwork.Realized, listed *hostRoutes) error {
	r.checks++
	if !r.complete || !r.builtOn(rz, nodeIPs(rz)) || rz.Flows.Invalidations() != r.synced || r.checks >= fullPassEvery {
		return r.reconcileAll(ctx, rz)
	}
	// The numbers the Services' own passes gave out since the last full pass or check: written here,
	// not by each pass, so that a churn of Services costs one write per check.
	r.saveIDs(ctx)
	if err := r.syncNodePortNAT(ctx, false); err != nil {
		return err
	}
	return r.syncHostRoutesFrom(ctx, rz, slices.Collect(maps.Keys(r.clusterIPs)), r.resync(), listed)
}

// hostRoutes are the host's routes through a gateway link, as listed at a time.
type hostRoutes struct {
	link   int
	routes []hostnet.Route
	at     time.Time
}

// listHostRoutes lists the routes through the gateway when the drift check is due to read them
// back, without holding the reconciler's lock: at 10,000 Services the listing takes tens of
// milliseconds, during which the other worker runs the Services' passes. Passes that change a
// route meanwhile make the listing stale for that route only, which the read-back tolerates: a
// route added since is ensured again, one deleted since is deleted again (a no-op). It returns
// nil when nothing is due, or the listing failed (syncHostRoutes then lists under the lock).
func (r *Reconciler) listHostRoutes(ctx context.Context) *hostRoutes {
	rz, ok := r.State.Realized()
	if !ok {
		return nil
	}
	r.mu.Lock()
	due := r.Net != nil && (r.routed == nil || r.routedLink != rz.GatewayLinkIndex || r.clock().Now().Sub(r.routesChecked) >= r.resync())
	r.mu.Unlock()
	if !due {
		return nil
	}
	at := r.clock().Now()
	routes, err := r.Net.Routes(ctx, hostnet.RouteFilter{LinkIndex: rz.GatewayLinkIndex})
	if err != nil {
		return nil
	}
	return &hostRoutes{link: rz.GatewayLinkIndex, routes: routes, at: at}
}

// builtOn tells whether what the Services came to was computed on this node network, with these
// NodePort addresses.
func (r *Reconciler) builtOn(rz nodenetwork.Realized, ips []netip.Addr) bool {
	return r.realised != nil && rz.Flows == r.realisedOn.Flows && reflect.DeepEqual(rz.Node, r.realisedOn.Node) && slices.Equal(ips, r.realisedIPs) &&
		slices.Equal(rz.ServiceCIDRs, r.realisedOn.ServiceCIDRs)
}

func (r *Reconciler) resync() time.Duration {
	if r.ResyncPeriod == 0 {
		return DefaultResyncPeriod
	}
	return r.ResyncPeriod
}

// reconcileOne converges one Service: its groups and the flows of its cookie object in one bundle,
// the shared hairpin flows when its local endpoint addresses changed the node's set, and the host
// route of its ClusterIP. Nothing is sent when its Service and EndpointSlice versions are those it
// was computed from. The caller holds passes for reading and mu, which reconcileOne releases while
// the switch commits the Service's bundle.
func (r *Reconciler) reconcileOne(ctx context.Context, rz nodenetwork.Realized, name types.NamespacedName) error {
	start := time.Now()
	svc := &corev1.Service{}
	if err := r.Client.Get(ctx, name, svc); apierrors.IsNotFound(err) {
		svc = nil
	} else if err != nil {
		return fmt.Errorf("getting Service %s: %w", name, err)
	}
	if r.HostPorts != nil && r.HostPorts.SetServiceNodePorts(name.String(), serviceNodePorts(svc)) {
		// A NodePort taken or given back on a hostPort's port: the full pass stops or starts
		// serving the hostPort with the Service's change (hostports.go).
		return errFullPass
	}
	var eps []discoveryv1.EndpointSlice
	if svc != nil {
		list := &discoveryv1.EndpointSliceList{}
		if err := r.Client.List(ctx, list, client.InNamespace(name.Namespace), client.MatchingFields{serviceNameIndex: name.Name}, client.UnsafeDisableDeepCopy); err != nil {
			return fmt.Errorf("listing the EndpointSlices of Service %s: %w", name, err)
		}
		eps = list.Items
	}
	old, known := r.realised[name]
	if !known {
		old = &realisedService{}
	}
	if svc == nil && !known || svc != nil && known && old.inputs.same(svc, eps) {
		return r.flushStaleZones(ctx, rz)
	}
	rs := r.realiseService(ctx, name, svc, eps, r.realisedOn, r.realisedIPs)
	if err := r.flushNewZones(ctx, rz); err != nil {
		return err
	}

	// The Service's groups and flows, in one bundle. A Service that has no flows now keeps the
	// object of the flows it had, to delete them.
	object := rs.object
	if !rs.hasFlows {
		object = old.object
	}
	gone := goneGroups(old, rs)
	var goneIDs []uint32
	for _, k := range gone {
		if id, ok := r.groups.lookup(k); ok {
			goneIDs = append(goneIDs, id)
		}
	}
	// mu is released while the switch commits the bundle: the passes of other Services go on
	// meanwhile, and their changes share the next bundle (see passes). This Service's state stays
	// as it was until the commit: no other pass of it runs, its group ids and cookie object stay
	// given out, and its gone groups' ids are released only once the switch deleted them.
	//
	// A Service that has no cookie object now and had none (no port realised: ExternalName, no
	// ClusterIP, only ports the pipeline does not serve) has no flows or groups to sync: object is
	// 0 then, which is sharedObject, and syncing it to no flows would delete every Service's base
	// and hairpin flows (creating, updating or deleting an ExternalName Service did, until the
	// next change of the hairpin set: same-node Service traffic was dropped meanwhile).
	r.mu.Unlock()
	var flowRes, groupRes openflow.SyncResult
	var err error
	if object != sharedObject {
		flowRes, groupRes, err = rz.Flows.SyncObjectWithGroups(ctx, openflow.ObjectFlows{
			Category: pipeline.CategoryService, Object: object, Flows: rs.flows, Groups: rs.groups, GoneGroups: goneIDs,
		})
	} else if len(rs.groups)+len(goneIDs) > 0 {
		err = fmt.Errorf("the Service %s has groups but no cookie object", name)
	}
	if err == nil && flowRes.Mods()+groupRes.Mods() > 0 {
		// Logged as soon as the switch replied to the commit: the Service's data path is the
		// versions in inputs from now on (make bench-services times its changes by this line).
		// V(1): at 100 endpoint changes a second, a line each would be the log's bulk.
		ctrl.LoggerFrom(ctx).V(1).Info("Committed Service flows", "inputs", rs.inputs.String(), "ports", rs.counts.ports, "endpoints", rs.counts.endpoints,
			"flowMods", flowRes.Mods(), "groupMods", groupRes.Mods(), "took", time.Since(start))
	}
	r.mu.Lock()
	if err != nil {
		return fmt.Errorf("installing the flows of Service %s: %w", name, err)
	}
	// The shared hairpin flows, when the node's set of local endpoint addresses changed.
	if r.hairpin.move(old, rs) {
		if _, err := rz.Flows.SyncObject(ctx, pipeline.CategoryService, sharedObject, sharedFlows(rz, r.hairpin)); err != nil {
			r.hairpin.move(rs, old)
			return fmt.Errorf("installing the Services' hairpin flows: %w", err)
		}
	}
	if err := r.routeClusterIP(ctx, rz, old.clusterIP, rs.clusterIP); err != nil {
		r.hairpin.move(rs, old)
		return err
	}

	// Record what the Service came to.
	for _, k := range gone {
		r.groups.release(k)
	}
	r.udp.endpointsGone(old.udp, rs.udp)
	for k := range old.udp {
		if _, ok := rs.udp[k]; !ok {
			r.udp.ids.release(k)
		}
	}
	if !rs.hasFlows {
		r.objects.release(name)
	}
	rs.installed()
	if svc == nil {
		delete(r.realised, name)
	} else {
		r.realised[name] = rs
	}
	r.nodePorts = countNodePorts(r.nodePorts, old.nodePorts, -1)
	r.nodePorts = countNodePorts(r.nodePorts, rs.nodePorts, 1)
	if err := r.syncNodePortNAT(ctx, false); err != nil {
		return err // applied again by the next drift check
	}
	r.totals.add(old.counts, -1)
	r.totals.add(rs.counts, 1)
	changed := flowRes.Mods()+groupRes.Mods() > 0
	observePass(r.totals, changed, time.Since(start))
	r.State.SetServices(nodenetwork.ServicesResult{Services: r.totals.services, Ports: r.totals.ports})
	return r.flushStaleZones(ctx, rz)
}

// flushNewZones flushes the zones given to UDP ports and not flushed yet, before any flow uses
// them (udpzones.go).
func (r *Reconciler) flushNewZones(ctx context.Context, rz nodenetwork.Realized) error {
	start := time.Now()
	flushed, err := r.udp.flushUnflushed(ctx, rz.Flows.FlushConntrackZone)
	if len(flushed) > 0 {
		ctrl.LoggerFrom(ctx).V(1).Info("Flushed the conntrack zones given to UDP Service ports", "zones", flushed, "took", time.Since(start))
	}
	return err
}

// flushStaleZones flushes the zones of UDP ports one of whose endpoints went, once the switch no
// longer balances to it: the ports' clients start again and are balanced afresh (udpzones.go).
func (r *Reconciler) flushStaleZones(ctx context.Context, rz nodenetwork.Realized) error {
	start := time.Now()
	flushed, err := r.udp.flushStale(ctx, rz.Flows.FlushConntrackZone)
	if len(flushed) > 0 {
		ctrl.LoggerFrom(ctx).Info("Flushed the conntrack zones of UDP Service ports whose endpoints went", "zones", flushed, "took", time.Since(start))
	}
	return err
}

// reconcileAll converges every Service: groups first (new and changed ones, so that no flow refers
// to a missing group), then the flows of the whole Service category in one bundle, then the
// removal of the groups no longer used, then the host routes. What the Services came to is
// computed again only for those whose inputs changed since they were last computed.
func (r *Reconciler) reconcileAll(ctx context.Context, rz nodenetwork.Realized) error {
	log := ctrl.LoggerFrom(ctx)
	start := time.Now()
	invalidations := rz.Flows.Invalidations()
	// The pass only reads the cached objects: listing them without a deep copy saves copying
	// every Service and EndpointSlice of the cluster on every pass.
	services := &corev1.ServiceList{}
	if err := r.Client.List(ctx, services, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing Services: %w", err)
	}
	slicesList := &discoveryv1.EndpointSliceList{}
	if err := r.Client.List(ctx, slicesList, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing EndpointSlices: %w", err)
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

	r.complete = false // until every Service is installed
	r.loadIDs(ctx)
	groups, flows, udpBefore := r.desired(ctx, rz, services.Items, bySvc)
	if err := r.flushNewZones(ctx, rz); err != nil {
		return err
	}

	if r.refusalsOn != rz.Flows {
		// A new connection: its packet-ins are the refusals to answer.
		r.refusalsOn = rz.Flows
		r.handleRefusals(ctx, rz.Flows)
	}
	// New and changed groups, keeping the old ones that flows may still refer to.
	if _, err := rz.Flows.InstallGroups(ctx, groups); err != nil {
		return fmt.Errorf("installing Service groups: %w", err)
	}
	synced, err := rz.Flows.Sync(ctx, pipeline.CategoryService, flows)
	if err != nil {
		return fmt.Errorf("installing Service flows: %w", err)
	}
	gs, err := rz.Flows.SyncGroups(ctx, groups)
	if err != nil {
		return fmt.Errorf("removing Service groups: %w", err)
	}
	inUse := make(map[groupKey]bool, len(groups))
	for _, rs := range r.realised {
		for _, k := range rs.groupKeys {
			inUse[k] = true
		}
	}
	r.groups.releaseUnused(func(k groupKey) bool { return inUse[k] })
	udpInUse := map[portKey]bool{}
	for name, rs := range r.realised {
		r.udp.endpointsGone(udpBefore[name], rs.udp)
		for k := range rs.udp {
			udpInUse[k] = true
		}
	}
	r.udp.carriedGone(func(k portKey) ([]netip.AddrPort, bool) {
		rs := r.realised[types.NamespacedName{Namespace: k.Namespace, Name: k.Name}]
		if rs == nil {
			return nil, false
		}
		p, ok := rs.udp[k]
		return p.endpoints, ok
	})
	r.udp.release(func(k portKey) bool { return udpInUse[k] })
	r.objects.releaseUnused(func(k types.NamespacedName) bool { return r.realised[k] != nil && r.realised[k].hasFlows })
	for _, rs := range r.realised {
		rs.installed()
	}
	r.complete, r.checks, r.synced = true, 0, invalidations
	r.fullPasses++
	r.saveIDs(ctx)
	r.State.FlowsSynced(ctx, nodenetwork.ServiceFlows, rz.Flows)
	if err := r.syncHostRoutes(ctx, rz, slices.Collect(maps.Keys(r.clusterIPs)), r.resync()); err != nil {
		return err
	}
	if err := r.syncNodePortNAT(ctx, true); err != nil {
		return err
	}
	if err := r.flushStaleZones(ctx, rz); err != nil {
		return err
	}
	changed := synced.Mods() > 0 || gs.Mods() > 0
	log.V(1).Info("Full Service pass", "services", r.totals.services, "changed", changed, "took", time.Since(start))
	observePass(r.totals, changed, time.Since(start))
	r.State.SetServices(nodenetwork.ServicesResult{Services: r.totals.services, Ports: r.totals.ports})
	if changed {
		log.Info("Synced Service flows", "services", r.totals.services, "ports", r.totals.ports, "endpoints", r.totals.endpoints,
			"flowMods", synced.Mods(), "groupMods", gs.Mods(), "groups", len(groups), "took", time.Since(start))
	}
	return nil
}

// desired computes the groups and flows of every Service, reusing what a Service came to when its
// inputs did not change since, on the same node network (same groups and flows, so the switch is
// sent nothing for it), and records what every Service came to. It also returns the UDP ports
// (zones and endpoints) of the Services it computed again, as they were before, so that the
// zones of the ports that lost an endpoint are flushed once the switch has the new flows.
func (r *Reconciler) desired(ctx context.Context, rz nodenetwork.Realized, services []corev1.Service, bySvc map[types.NamespacedName][]discoveryv1.EndpointSlice) ([]openflow.Group, []openflow.Flow, map[types.NamespacedName]map[portKey]udpPort) {
	if r.warned == nil {
		r.warned = map[types.UID]string{}
	}
	ips := nodeIPs(rz)
	before := r.realised // for the UDP ports, whatever node network it was computed on
	udpBefore := map[types.NamespacedName]map[portKey]udpPort{}
	if !r.builtOn(rz, ips) {
		r.realised, r.complete = nil, false // computed for another node network
	}
	r.realisedOn, r.realisedIPs = rz, ips
	realised := make(map[types.NamespacedName]*realisedService, len(services))
	r.hairpin, r.totals, r.clusterIPs, r.nodePorts = hairpinCount{}, counts{}, map[netip.Addr]int{}, map[hostnet.NodePort]int{}
	var entries []hostport.Entry
	if r.HostPorts != nil {
		entries = r.HostPorts.List()
	}
	if r.HostPorts != nil {
		r.HostPorts.ReplaceNodePorts(allNodePorts(services)) // before the hostPorts are realised
	}
	var groups []openflow.Group
	var own []openflow.Flow
	for i := range services {
		svc := &services[i]
		name := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
		rs := r.realised[name]
		if rs == nil || !rs.inputs.same(svc, bySvc[name]) {
			if old := before[name]; old != nil && len(old.udp) > 0 {
				udpBefore[name] = old.udp
			}
			rs = r.realiseService(ctx, name, svc, bySvc[name], rz, ips)
		}
		realised[name] = rs
		r.hairpin.move(&realisedService{}, rs)
		r.totals.add(rs.counts, 1)
		if rs.clusterIP.IsValid() {
			r.clusterIPs[rs.clusterIP]++
		}
		r.nodePorts = countNodePorts(r.nodePorts, rs.nodePorts, 1)
		groups = append(groups, rs.groups...)
		own = append(own, rs.flowsFor(rz.Flows)...)
	}
	if hp := r.realiseHostPorts(ctx, entries, rz, ips); len(hp.flows) > 0 {
		if old := before[hostPortsName]; old != nil && len(old.udp) > 0 {
			udpBefore[hostPortsName] = old.udp
		}
		realised[hostPortsName] = hp
		r.hairpin.move(&realisedService{}, hp)
		r.nodePorts = countNodePorts(r.nodePorts, hp.nodePorts, 1)
		groups = append(groups, hp.groups...)
		own = append(own, hp.flows...)
	} else if old := before[hostPortsName]; old != nil && len(old.udp) > 0 {
		udpBefore[hostPortsName] = old.udp
	}
	r.realised = realised
	return groups, append(sharedFlows(rz, r.hairpin), own...), udpBefore
}

// warnNoUDPZone emits one Warning Event per Service version for UDP ports that got no conntrack
// zone of their own (udpzones.go).
func (r *Reconciler) warnNoUDPZone(ctx context.Context, svc *corev1.Service, ports []string) {
	if r.warnedNoZone == nil {
		r.warnedNoZone = map[types.UID]string{}
	}
	if r.warnedNoZone[svc.UID] == svc.ResourceVersion {
		return
	}
	r.warnedNoZone[svc.UID] = svc.ResourceVersion
	ctrl.LoggerFrom(ctx).Info("Every conntrack zone of UDP Service ports is taken", "service", client.ObjectKeyFromObject(svc), "ports", ports, "budget", udpZoneBudget)
	if r.Recorder != nil {
		r.Recorder.Eventf(svc, nil, corev1.EventTypeWarning, UDPZonesExhaustedReason, "Proxy",
			"UDP ports %s share conntrack zone %d on node %s: the node's %d zones for UDP Service ports are taken, so their clients are not balanced again when an endpoint goes until their connections time out",
			strings.Join(ports, ", "), pipeline.ConntrackZone, r.NodeName, udpZoneBudget)
	}
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
	b.SetPacketInHandler(pipeline.CategoryService, rj.handle)
}

// syncHostRoutes routes every ClusterIP from the host into the gateway, through
// pipeline.ServiceNextHop (the pipeline answers its ARP), so that kubelet and host processes reach
// Services: one route per Service CIDR of the spec, and one per ClusterIP outside them
// (inServiceCIDRs); routes through that next hop that nothing wants are deleted. The next hop is the
// routes' mark: they are not winnet's owned routes, which the remote route reconciler owns.
//
// The host's routes are read back once per resync period (and after a failure), which repairs
// drift; in between, a pass changes only the routes its Services changed since the last one, so
// that one endpoint changing among 10,000 Services does not cost a listing of 10,000 routes.
func (r *Reconciler) syncHostRoutes(ctx context.Context, rz nodenetwork.Realized, clusterIPs []netip.Addr, resync time.Duration) error {
	return r.syncHostRoutesFrom(ctx, rz, clusterIPs, resync, nil)
}

// syncHostRoutesFrom is syncHostRoutes with the host's routes already listed (nil: list them when
// the read-back is due).
func (r *Reconciler) syncHostRoutesFrom(ctx context.Context, rz nodenetwork.Realized, clusterIPs []netip.Addr, resync time.Duration, listed *hostRoutes) (retErr error) {
	if r.Net == nil {
		return nil
	}
	want := make(map[netip.Prefix]bool, len(rz.ServiceCIDRs)+1)
	for _, cidr := range rz.ServiceCIDRs {
		want[cidr] = true
	}
	for _, ip := range clusterIPs {
		if !inServiceCIDRs(rz, ip) {
			want[netip.PrefixFrom(ip, 32)] = true
		}
	}
	if r.NodePorts != nil {
		// The host's own connections to its NodePorts, NATed to this address (syncNodePortNAT).
		want[netip.PrefixFrom(pipeline.NodePortVirtualIP, 32)] = true
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
	if listed != nil && listed.link != rz.GatewayLinkIndex {
		listed = nil // listed on a gateway that is gone
	}
	if listed == nil && r.routed != nil && r.routedLink == rz.GatewayLinkIndex && now.Sub(r.routesChecked) < resync {
		var missing []hostnet.Route
		for dst := range want {
			if !r.routed[dst] {
				missing = append(missing, route(dst))
			}
		}
		// The new routes first: a Service CIDR's route replacing its ClusterIPs' routes is in place
		// before they go.
		if err := r.Net.EnsureRoutes(ctx, missing); err != nil {
			return fmt.Errorf("routing ClusterIPs from the host: %w", err)
		}
		for dst := range r.routed {
			if !want[dst] {
				if err := r.Net.DeleteRoute(ctx, route(dst)); err != nil {
					return fmt.Errorf("removing the host route to %s: %w", dst, err)
				}
			}
		}
		r.routed = want
		return nil
	}
	var existing []hostnet.Route
	if listed != nil {
		existing, now = listed.routes, listed.at
	} else {
		var err error
		if existing, err = r.Net.Routes(ctx, hostnet.RouteFilter{LinkIndex: rz.GatewayLinkIndex}); err != nil {
			return fmt.Errorf("listing the host's ClusterIP routes: %w", err)
		}
	}
	have := map[netip.Prefix]bool{}
	var unwanted []hostnet.Route
	for _, e := range existing {
		if e.Gateway != pipeline.ServiceNextHop {
			continue
		}
		if want[e.Dst] {
			have[e.Dst] = true
			continue
		}
		unwanted = append(unwanted, e)
	}
	var missing []hostnet.Route
	for dst := range want {
		if !have[dst] {
			missing = append(missing, route(dst))
		}
	}
	// The new routes first (an upgrade from an agent that routed every ClusterIP: the Service CIDR's
	// route is in place before their routes go), then those no Service wants.
	if err := r.Net.EnsureRoutes(ctx, missing); err != nil {
		return fmt.Errorf("routing ClusterIPs from the host: %w", err)
	}
	for _, e := range unwanted {
		if err := r.Net.DeleteRoute(ctx, e); err != nil {
			return fmt.Errorf("removing the host route %s: %w", e, err)
		}
	}
	r.routed, r.routedLink, r.routesChecked = want, rz.GatewayLinkIndex, now
	return nil
}

// syncNodePortNAT has the host NAT its own connections to every NodePort of the Services to
// pipeline.NodePortVirtualIP (routed into the gateway by syncHostRoutes), when the set of NodePorts
// changed since it was last applied, or always when force is set (the full pass, which repairs
// drift).
func (r *Reconciler) syncNodePortNAT(ctx context.Context, force bool) error {
	if r.NodePorts == nil {
		return nil
	}
	ports := slices.SortedFunc(maps.Keys(r.nodePorts), func(a, b hostnet.NodePort) int {
		return cmp.Or(cmp.Compare(a.Protocol, b.Protocol), cmp.Compare(a.Port, b.Port))
	})
	if !force && r.nattedOK && slices.Equal(ports, r.natted) {
		return nil
	}
	ctrl.LoggerFrom(ctx).V(1).Info("NATing the host's own connections to its NodePorts", "nodePorts", len(ports), "target", pipeline.NodePortVirtualIP)
	if err := r.NodePorts.ReconcileNodePorts(ctx, pipeline.NodePortVirtualIP, ports); err != nil {
		r.nattedOK = false
		return fmt.Errorf("NATing the host's own connections to its NodePorts: %w", err)
	}
	r.natted, r.nattedOK = ports, true
	return nil
}

// countNodePorts adds sign to the count of each of ports in counts (a count reaching 0 goes).
func countNodePorts(counts map[hostnet.NodePort]int, ports []hostnet.NodePort, sign int) map[hostnet.NodePort]int {
	if counts == nil {
		counts = map[hostnet.NodePort]int{}
	}
	for _, p := range ports {
		if counts[p] += sign; counts[p] <= 0 {
			delete(counts, p)
		}
	}
	return counts
}

// routeClusterIP follows one Service's ClusterIP changing from old to new (the zero Addr for
// none) in the host's routes (see syncHostRoutes) and in clusterIPs: an address outside the Service
// CIDRs is routed while a Service has it; one inside them is carried by its CIDR's route.
func (r *Reconciler) routeClusterIP(ctx context.Context, rz nodenetwork.Realized, old, new netip.Addr) error {
	if old == new {
		return nil
	}
	route := func(ip netip.Addr) hostnet.Route {
		return hostnet.Route{Dst: netip.PrefixFrom(ip, 32), Gateway: pipeline.ServiceNextHop, LinkIndex: rz.GatewayLinkIndex, OnLink: true}
	}
	if new.IsValid() && r.clusterIPs[new] == 0 && r.Net != nil && !inServiceCIDRs(rz, new) {
		if err := r.Net.EnsureRoutes(ctx, []hostnet.Route{route(new)}); err != nil {
			return fmt.Errorf("routing ClusterIP %s from the host: %w", new, err)
		}
		if r.routed != nil {
			r.routed[netip.PrefixFrom(new, 32)] = true
		}
	}
	if old.IsValid() && r.clusterIPs[old] == 1 && r.Net != nil && !inServiceCIDRs(rz, old) {
		if err := r.Net.DeleteRoute(ctx, route(old)); err != nil {
			return fmt.Errorf("removing the host route to ClusterIP %s: %w", old, err)
		}
		if r.routed != nil {
			delete(r.routed, netip.PrefixFrom(old, 32))
		}
	}
	if new.IsValid() {
		r.clusterIPs[new]++
	}
	if old.IsValid() {
		if r.clusterIPs[old]--; r.clusterIPs[old] <= 0 {
			delete(r.clusterIPs, old)
		}
	}
	return nil
}

// inServiceCIDRs reports whether ip lies in one of the node's Service CIDRs, whose host routes carry
// it: a ClusterIP there needs no route of its own. One route per Service CIDR instead of one per
// ClusterIP keeps the host's routing table small (10,000 Services were 10,000 routes, each added
// and removed with its Service and read back by every drift check); a ClusterIP outside them (a
// Service CIDR added to the cluster but not to the spec) still gets its own.
func inServiceCIDRs(rz nodenetwork.Realized, ip netip.Addr) bool {
	for _, p := range rz.ServiceCIDRs {
		if p.Contains(ip) {
			return true
		}
	}
	return false
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

// warnUnsupported emits one Warning Event per Service version for ports that cannot be realised.
// reportIPv6Only says once per version of an IPv6-only Service that the node does not serve it.
func (r *Reconciler) reportIPv6Only(ctx context.Context, svc *corev1.Service) {
	if r.warned[svc.UID] == svc.ResourceVersion {
		return
	}
	r.warned[svc.UID] = svc.ResourceVersion
	ctrl.LoggerFrom(ctx).V(1).Info("Service is IPv6 only: not served", "service", client.ObjectKeyFromObject(svc), "clusterIPs", svc.Spec.ClusterIPs)
	if r.Recorder != nil {
		r.Recorder.Eventf(svc, nil, corev1.EventTypeNormal, IPv6NotServedReason, "Proxy",
			"Not served on node %s: the Service's ClusterIPs %v are IPv6, and winnet's Windows data plane is IPv4 (its Pods reach IPv4 and dual-stack Services)",
			r.NodeName, svc.Spec.ClusterIPs)
	}
}

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
