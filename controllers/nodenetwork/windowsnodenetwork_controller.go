package nodenetwork

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/hns"
	"github.com/winnet-io/winnet/internal/hostnet"
	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/internal/ovs/ovsdb"
	"github.com/winnet-io/winnet/internal/pipeline"
	"github.com/winnet-io/winnet/internal/vtep"
)

// Finalizer keeps a WindowsNodeNetwork until the agent has given the host its network back.
const Finalizer = "network.winnet.io/node-network"

// DefaultResyncPeriod is how often the reconciler re-checks the host for drift (a deleted port,
// flow, route or address) when nothing else triggers it.
const DefaultResyncPeriod = 2 * time.Second

// verifyResyncs is how many resync periods the flows' verification waits by default.
const verifyResyncs = 5

// verifyDue reports whether the flows of bridge are due for verification at now: a new bridge
// connection's at once, then every VerifyPeriod.
func (r *Reconciler) verifyDue(bridge *openflow.Bridge, now time.Time) bool {
	period := r.VerifyPeriod
	if period == 0 {
		resync := r.ResyncPeriod
		if resync == 0 {
			resync = DefaultResyncPeriod
		}
		period = verifyResyncs * resync
	}
	return bridge != r.verified || now.Sub(r.lastVerify) >= period
}

// Reconciler converges the host toward the node's WindowsNodeNetwork.
type Reconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	// NodeName is the node this agent runs on; other nodes' objects are ignored.
	NodeName string
	Host     Host
	// ResyncPeriod is the drift check period; zero means DefaultResyncPeriod.
	ResyncPeriod time.Duration
	// VerifyPeriod is how often the drift check also dumps the switch's flows and compares them
	// with the bridge's (Bridge.Verify): a dump of every table grows with the cluster (routes,
	// Services, policies), and the flow monitor reports flows changed behind the agent's back as
	// they happen. Zero means verifyResyncs resync periods (10 s by default).
	VerifyPeriod time.Duration
	// lastVerify is when the flows of verified, the bridge connection, were last verified.
	lastVerify time.Time
	verified   *openflow.Bridge
	// State is shared with the reconcilers built on the node network; nil gets a private one.
	State *State
	// Teardown, when set, is told once the node network is gone, before the finalizer goes.
	Teardown TeardownListener
	// Preflight, when set, holds the agent's preflight result, written as the Preflight condition.
	Preflight *Preflight
	// preflightReported is the sequence number of the preflight result last reported by an Event.
	preflightReported int

	flows    flowConn
	adapters adapterRecords
	// watched names the bridge and the ports the last converge realised: the OVSDB rows whose
	// change wakes the reconciler (see watchHost).
	watched atomic.Pointer[[]string]
	// watchedLinks are the indexes of the host interfaces the last converge realised (uplink,
	// bridge, gateway): address and route changes on other links (a Pod's vNIC) do not wake it.
	watchedLinks atomic.Pointer[[]int]
	stateOnce    sync.Once
	// apiReader reads past the cache, when a routes report finds the cached object stale.
	apiReader client.Reader
}

// TeardownListener is told when the agent has removed the node network because its
// WindowsNodeNetwork was deleted (the agent's Pod network retires the node's CNI configuration).
// An error keeps the finalizer and the deletion is retried.
type TeardownListener interface {
	NodeNetworkRemoved(ctx context.Context) error
}

func (r *Reconciler) state() *State {
	r.stateOnce.Do(func() {
		if r.State == nil {
			r.State = NewState()
		}
		r.adapters.dir = r.Host.StateDir
	})
	return r.State
}

// SetupWithManager registers the reconciler for the node's WindowsNodeNetwork and its Node.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.apiReader = mgr.GetAPIReader()
	ownNode := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		if o.GetName() != r.NodeName {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: r.NodeName}}}
	})
	// The OpenFlow connection lives as long as the manager; the flows stay on the switch for the
	// next agent to take over.
	closeFlows := manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		r.flows.close()
		return nil
	})
	if err := mgr.Add(closeFlows); err != nil {
		return fmt.Errorf("adding the OpenFlow connection's closer: %w", err)
	}
	drift := make(chan event.GenericEvent, 1)
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error { return r.watchHost(ctx, drift) })); err != nil {
		return fmt.Errorf("adding the host watch: %w", err)
	}
	b := ctrl.NewControllerManagedBy(mgr)
	if r.Preflight != nil {
		b = b.WatchesRawSource(source.Channel(r.Preflight.changed, ownNode))
	}
	return b.
		Named("windowsnodenetwork").
		For(&networkv1alpha1.WindowsNodeNetwork{}, builder.WithPredicates(notOwnStatusWrite())).
		Watches(&corev1.Node{}, ownNode).
		WatchesRawSource(source.Channel(drift, ownNode)).
		WatchesRawSource(source.Channel(r.state().watchReports(r.NodeName), handler.EnqueueRequestsFromMapFunc(
			func(_ context.Context, o client.Object) []reconcile.Request {
				return []reconcile.Request{routesReport(o.GetName())}
			}))).
		Complete(r)
}

// routesReportNamespace marks the work item of a routes report: WindowsNodeNetworks are
// cluster-scoped, so it cannot name an object, and a report is not merged with the node network's
// own work item.
const routesReportNamespace = "routes-report"

func routesReport(node string) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: routesReportNamespace, Name: node}}
}

// Reconcile converges the node network and writes its status once; for a routes report on a
// converged node network, it only writes the routes' status.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	if req.Name != r.NodeName {
		return ctrl.Result{}, nil
	}
	if req.Namespace == routesReportNamespace {
		if done, err := r.reportRoutes(ctx); done || err != nil {
			return ctrl.Result{}, err
		}
		req.Namespace = ""
	}
	wnn := &networkv1alpha1.WindowsNodeNetwork{}
	if err := r.Client.Get(ctx, req.NamespacedName, wnn); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !wnn.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.reconcileDelete(ctx, wnn)
	}
	if controllerutil.AddFinalizer(wnn, Finalizer) {
		return ctrl.Result{}, r.Client.Update(ctx, wnn)
	}

	before := wnn.DeepCopy()
	if c := r.setPreflightCondition(wnn); c != nil {
		r.preflightEvent(wnn, c)
	}
	defer func() {
		// A converged node network is reconciled every resync period and on every report: when
		// nothing changed, nothing is written (controller-runtime would send an empty patch, one API
		// write per node per period).
		if equality.Semantic.DeepEqual(before.Status, wnn.Status) {
			return
		}
		if err := r.Client.Status().Patch(ctx, wnn, client.MergeFrom(before)); err != nil && !apierrors.IsNotFound(err) {
			retErr = errors.Join(retErr, fmt.Errorf("writing the status of WindowsNodeNetwork %s: %w", wnn.Name, err))
		}
	}()

	resync := r.ResyncPeriod
	if resync == 0 {
		resync = DefaultResyncPeriod
	}
	err := r.converge(ctx, wnn)
	var invalidErr *invalidSpecError
	switch {
	case errors.As(err, &invalidErr):
		setInvalidSpec(wnn, networkv1alpha1.InvalidSpecReason, err)
		r.Recorder.Eventf(wnn, nil, corev1.EventTypeWarning, networkv1alpha1.InvalidSpecReason, "Converge", "%v", err)
		return ctrl.Result{}, reconcile.TerminalError(err)
	case err != nil:
		return ctrl.Result{}, err
	}
	wnn.Status.ObservedGeneration = wnn.Generation
	return ctrl.Result{RequeueAfter: resync}, nil
}

// reportRoutes writes what the remote route reconciler reported into the status, without
// converging the node network again, when the node network is converged for the current spec. It
// returns false when it is not (the caller converges it, which writes the routes too). The patch
// carries the resourceVersion read: the other conditions are written back as read, so a stale read
// must fail rather than undo a newer status. The cache lags behind the node network's own status
// writes, so a conflict is retried once with the object read from the API server.
func (r *Reconciler) reportRoutes(ctx context.Context) (bool, error) {
	done, err := r.patchRoutesStatus(ctx, r.Client)
	if apierrors.IsConflict(err) && r.apiReader != nil {
		done, err = r.patchRoutesStatus(ctx, r.apiReader)
	}
	if err != nil {
		return true, fmt.Errorf("writing the routes' status of WindowsNodeNetwork %s: %w", r.NodeName, err)
	}
	return done, nil
}

// patchRoutesStatus reads the node's WindowsNodeNetwork from reader and patches the routes' part of
// its status; false when the node network is not converged for its current spec.
func (r *Reconciler) patchRoutesStatus(ctx context.Context, reader client.Reader) (bool, error) {
	routes, reported := r.state().routesResult()
	_, realized := r.state().Realized()
	wnn := &networkv1alpha1.WindowsNodeNetwork{}
	if err := reader.Get(ctx, types.NamespacedName{Name: r.NodeName}, wnn); err != nil {
		return true, client.IgnoreNotFound(err)
	}
	_, servicesReported := r.state().servicesResult()
	_, policiesReported := r.state().policiesResult()
	_, egressReported := r.state().EgressIPs()
	if (!reported && !servicesReported && !policiesReported && !egressReported) || !realized || !wnn.DeletionTimestamp.IsZero() || wnn.Status.ObservedGeneration != wnn.Generation {
		return false, nil
	}
	before := wnn.DeepCopy()
	if reported {
		setRoutesCondition(wnn, routes)
	}
	if services, ok := r.state().servicesResult(); ok {
		setServicesCondition(wnn, services)
	}
	if policies, ok := r.state().policiesResult(); ok {
		setPoliciesCondition(wnn, policies)
	}
	if ips, ok := r.state().EgressIPs(); ok {
		setEgressIPs(wnn, ips)
	}
	setReadyCondition(wnn)
	if equality.Semantic.DeepEqual(before.Status, wnn.Status) {
		return true, nil // the report changes nothing: no write (the optimistic lock would make it one)
	}
	return true, client.IgnoreNotFound(r.Client.Status().Patch(ctx, wnn, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})))
}

// step is one component of the node network, converged in order.
type step struct {
	condition string
	run       func(ctx context.Context, s *state) (outcome, error)
}

// state carries what the steps realised to the steps after them and to the status.
type state struct {
	wnn     *networkv1alpha1.WindowsNodeNetwork
	desired desired
	facts   facts
	// uplink, bridge and gateway are the host interfaces in use.
	uplink, bridge, gateway hostnet.Link
	ofports                 map[string]int32
	// network is the HNS network.
	network *hns.Network
	// nodeSubnet is the node IP with its prefix length, as the bridge interface holds it.
	nodeSubnet netip.Prefix
	// bridgeAddresses are all the addresses the bridge interface holds (see
	// Realized.BridgeAddresses).
	bridgeAddresses []netip.Prefix
	flows           *openflow.Bridge
	node            pipeline.Node
}

// converge observes the host, computes the desired node network and converges each component in
// order, recording one condition per component.
func (r *Reconciler) converge(ctx context.Context, wnn *networkv1alpha1.WindowsNodeNetwork) error {
	s := &state{wnn: wnn, ofports: map[string]int32{}}
	var err error
	if s.facts, s.uplink, err = r.observe(ctx, wnn.Spec); err != nil {
		r.state().setRealized(nil)
		setComponentConditions(wnn, nil, err)
		return err
	}
	if s.desired, err = desiredState(wnn.Spec, s.facts); err != nil {
		r.state().setRealized(nil)
		return err
	}
	s.desired.vtepMAC = vtep.MAC(wnn.Name, wnn.Spec.Encapsulation)
	steps := []step{
		{networkv1alpha1.HostSwitchReadyCondition, r.ensureHostSwitch},
		{networkv1alpha1.BridgeReadyCondition, r.ensureBridge},
		{networkv1alpha1.UplinkReadyCondition, r.ensureUplink},
		{networkv1alpha1.GatewayReadyCondition, r.ensureGateway},
		{networkv1alpha1.TunnelReadyCondition, r.ensureTunnel},
		{networkv1alpha1.PipelineReadyCondition, r.ensurePipeline},
	}
	var done []outcome
	for _, st := range steps {
		o, err := st.run(ctx, s)
		if err != nil {
			r.state().setRealized(nil)
			setComponentConditions(wnn, done, err)
			return fmt.Errorf("%s: %w", st.condition, err)
		}
		done = append(done, o)
	}
	r.state().setRealized(&Realized{
		Flows: s.flows, Node: s.node, Mode: wnn.Spec.Encapsulation.Mode, VNI: s.desired.vni, NodeSubnet: s.nodeSubnet,
		BridgeAddresses: s.bridgeAddresses, UplinkMAC: s.facts.uplinkMAC, BridgeLinkIndex: s.bridge.Index, GatewayLinkIndex: s.gateway.Index,
		ServiceCIDRs: serviceCIDRs(wnn.Spec.ServiceCIDRs),
	})
	r.state().FlowsSynced(ctx, NodeNetworkFlows, s.flows)
	watched := []string{s.desired.bridge.Name}
	for name := range s.ofports {
		watched = append(watched, name)
	}
	if s.desired.tunnel == nil {
		// NoEncap: a tunnel port someone adds is removed.
		watched = append(watched, networkv1alpha1.DefaultTunnelPortName)
	}
	r.watched.Store(&watched)
	links := []int{s.uplink.Index, s.bridge.Index, s.gateway.Index}
	r.watchedLinks.Store(&links)
	if routes, ok := r.state().routesResult(); ok {
		setRoutesCondition(wnn, routes)
	}
	if services, ok := r.state().servicesResult(); ok {
		setServicesCondition(wnn, services)
	}
	if policies, ok := r.state().policiesResult(); ok {
		setPoliciesCondition(wnn, policies)
	}
	if ips, ok := r.state().EgressIPs(); ok {
		setEgressIPs(wnn, ips)
	}
	setComponentConditions(wnn, done, nil)
	wnn.Status.MTU = int32(s.desired.mtu)
	return nil
}

// observe finds the uplink and reads the Node's Pod CIDRs. The uplink is the configured adapter,
// or the one the HNS network is bound to, or the one the bridge records (after a reboot, when the
// network is gone), or the one holding the node IP (before anything was built).
func (r *Reconciler) observe(ctx context.Context, spec networkv1alpha1.WindowsNodeNetworkSpec) (facts, hostnet.Link, error) {
	var f facts
	node := &corev1.Node{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: r.NodeName}, node); err == nil {
		f.nodePodCIDRs = node.Spec.PodCIDRs
	} else if !apierrors.IsNotFound(err) {
		return f, hostnet.Link{}, fmt.Errorf("getting Node %s: %w", r.NodeName, err)
	}

	name := spec.Uplink.Interface
	if name == "" {
		if network, err := r.Host.HNS.GetNetworkByName(ctx, spec.HNSNetwork.Name); err == nil {
			name = network.AdapterName
		} else if !errors.Is(err, hns.ErrNotFound) {
			return f, hostnet.Link{}, failed(networkv1alpha1.HNSNetworkFailedReason, err)
		}
	}
	if name == "" {
		if ids, err := r.Host.OVSDB.BridgeExternalIDs(ctx, string(spec.Bridge.Name)); err == nil {
			name = ids[UplinkKey]
		}
	}
	var link hostnet.Link
	var err error
	switch {
	case name != "":
		link, err = r.Host.Net.LinkByName(ctx, name)
	case spec.NodeIP != "":
		ip, perr := netip.ParseAddr(string(spec.NodeIP))
		if perr != nil {
			return f, link, &invalidSpecError{msg: fmt.Sprintf("spec.nodeIP %q: %v", spec.NodeIP, perr)}
		}
		link, err = r.Host.Net.LinkByAddress(ctx, ip)
	default:
		return f, link, &invalidSpecError{msg: "spec.nodeIP is empty and spec.uplink.interface is not set: winnet cannot find the uplink"}
	}
	if err != nil {
		return f, link, failed(networkv1alpha1.UplinkNotFoundReason, fmt.Errorf("no uplink adapter (name %q, node IP %q): %w", name, spec.NodeIP, err))
	}
	f.uplinkName, f.uplinkMAC, f.uplinkMTU = link.Name, link.MAC, link.MTU
	return f, link, nil
}

// hostIPWait bounds how long the agent waits for HNS to put the node IP on the management vNIC
// before it re-adds it from the adapter's record. HNS moves it while it creates the network; on
// Windows the address can take a moment to show (DHCP, duplicate address detection).
const hostIPWait = 10 * time.Second

// ensureHostSwitch makes the HNS Transparent network exist on the uplink with the node IP on its
// management vNIC and the OVS extension enabled, in the order Windows needs (Antrea
// PrepareHNSNetwork): record the adapter's IP configuration, create the network (HNS moves the
// configuration to the vNIC), wait for the node IP on the vNIC (re-adding it from the record only
// if HNS did not move it), then enable the extension. A missing network next to a bridge winnet
// built means the host rebooted (HNS networks do not persist): the stale bridge goes first.
func (r *Reconciler) ensureHostSwitch(ctx context.Context, s *state) (outcome, error) {
	d := s.desired
	network, err := r.Host.HNS.GetNetworkByName(ctx, d.hnsNetwork.Name)
	switch {
	case errors.Is(err, hns.ErrNotFound):
		if err := r.removeStaleBridge(ctx, s); err != nil {
			return outcome{}, failed(networkv1alpha1.HNSNetworkFailedReason, err)
		}
		if err := r.recordAdapter(ctx, s); err != nil {
			return outcome{}, failed(networkv1alpha1.HNSNetworkFailedReason, err)
		}
		ctrl.LoggerFrom(ctx).Info("Creating the HNS network", "network", d.hnsNetwork.Name, "adapter", d.hnsNetwork.AdapterName)
		network, err = r.Host.HNS.CreateTransparentNetwork(ctx, d.hnsNetwork)
		if err != nil {
			msg := err
			if errors.Is(err, hns.ErrAdapterInUse) {
				msg = fmt.Errorf("adapter %q cannot take the HNS network (0x57): remove the network that holds it or choose another uplink: %w", d.hnsNetwork.AdapterName, err)
			}
			return outcome{}, failed(networkv1alpha1.HNSNetworkFailedReason, msg)
		}
		r.event(s.wnn, "HNSNetworkCreated", "Created HNS Transparent network %s (%s) on %s; its management vNIC is %s",
			network.Name, network.ID, d.hnsNetwork.AdapterName, network.ManagementVNIC)
	case err != nil:
		return outcome{}, failed(networkv1alpha1.HNSNetworkFailedReason, err)
	}
	s.network = network
	s.wnn.Status.HNSNetworkID = network.ID

	enabled, err := r.Host.HNS.OVSExtensionEnabled(ctx, network.ID)
	if err != nil {
		return outcome{}, failed(networkv1alpha1.OVSExtensionDisabledReason, err)
	}
	if !enabled {
		// Only once the node IP is on the vNIC: enabling the extension earlier can break DHCP.
		if err := r.ensureHostIPOnVNIC(ctx, s); err != nil {
			return outcome{}, failed(networkv1alpha1.HostAddressMoveFailedReason, err)
		}
		if err := r.Host.HNS.EnableOVSExtension(ctx, network.ID); err != nil {
			return outcome{}, failed(networkv1alpha1.OVSExtensionDisabledReason, err)
		}
		r.event(s.wnn, "OVSExtensionEnabled", "Enabled the Open vSwitch extension on HNS network %s", network.Name)
	}
	return outcome{networkv1alpha1.ReadyReason, fmt.Sprintf("HNS network %s runs the OVS extension", network.Name)}, nil
}

// recordAdapter records the uplink's IP configuration before HNS takes it. An uplink that does not
// hold the node IP keeps the earlier record (the agent stopped after HNS had moved it).
func (r *Reconciler) recordAdapter(ctx context.Context, s *state) error {
	cfg, err := r.Host.Net.ReadIPConfig(ctx, s.uplink.Index)
	if err != nil {
		return fmt.Errorf("reading the IP configuration of %s: %w", s.uplink.Name, err)
	}
	if _, ok := cfg.Holds(s.desired.nodeIP); ok {
		return r.adapters.put(s.uplink.Name, cfg)
	}
	if _, known, err := r.adapters.get(s.uplink.Name); err != nil || known {
		return err
	}
	return fmt.Errorf("adapter %s does not hold the node IP %s and winnet has no record of its configuration", s.uplink.Name, s.desired.nodeIP)
}

// managementVNIC returns the management vNIC: under the name HNS gave it, or under the bridge name
// once renamed. Not found when neither exists.
func (r *Reconciler) managementVNIC(ctx context.Context, s *state) (hostnet.Link, error) {
	l, err := r.Host.Net.LinkByName(ctx, s.network.ManagementVNIC)
	if err == nil || !errors.Is(err, hostnet.ErrNotFound) {
		return l, err
	}
	return r.Host.Net.LinkByName(ctx, s.desired.bridge.Name)
}

// ensureHostIPOnVNIC waits, bounded, for HNS to put the node IP on the management vNIC, and re-adds
// the adapter's recorded configuration there when it did not (a DHCP adapter stays on DHCP).
func (r *Reconciler) ensureHostIPOnVNIC(ctx context.Context, s *state) error {
	ip := s.desired.nodeIP
	deadline := time.Now().Add(hostIPWait)
	for {
		vnic, err := r.managementVNIC(ctx, s)
		switch {
		case err == nil:
			if p, err := addressOf(ctx, r.Host.Net, vnic.Index, ip); err != nil {
				return err
			} else if p.IsValid() {
				return nil
			}
			if time.Now().After(deadline) {
				return r.restoreHostIP(ctx, s, vnic, "HNS did not move it to the management vNIC")
			}
		case !errors.Is(err, hostnet.ErrNotFound):
			return err
		case time.Now().After(deadline):
			return fmt.Errorf("the management vNIC %s of HNS network %s did not appear within %s", s.network.ManagementVNIC, s.network.Name, hostIPWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// restoreHostIP gives link the uplink's recorded IP configuration.
func (r *Reconciler) restoreHostIP(ctx context.Context, s *state, link hostnet.Link, why string) error {
	cfg, known, err := r.adapters.get(s.uplink.Name)
	if err != nil {
		return err
	}
	if !known {
		return fmt.Errorf("the node IP %s is not on %s (%s) and winnet has no record of adapter %s's configuration", s.desired.nodeIP, link.Name, why, s.uplink.Name)
	}
	ctrl.LoggerFrom(ctx).Info("Re-adding the host's IP configuration", "link", link.Name, "adapter", s.uplink.Name, "dhcp", cfg.DHCP, "why", why)
	if err := r.Host.Net.ApplyIPConfig(ctx, link.Index, cfg); err != nil {
		return fmt.Errorf("re-adding adapter %s's IP configuration on %s: %w", s.uplink.Name, link.Name, err)
	}
	r.Recorder.Eventf(s.wnn, nil, corev1.EventTypeWarning, "HostIPRestored", "Converge",
		"Re-added adapter %s's recorded IP configuration on %s: %s", s.uplink.Name, link.Name, why)
	return nil
}

// removeStaleBridge removes a bridge left from before a reboot. The reboot took the management vNIC
// it had adopted and gave the adapter its configuration back; the bridge is rebuilt on the new vNIC.
func (r *Reconciler) removeStaleBridge(ctx context.Context, s *state) error {
	name := s.desired.bridge.Name
	if _, err := r.Host.OVSDB.BridgeExternalIDs(ctx, name); errors.Is(err, ovsdb.ErrNotFound) {
		return nil
	} else if err != nil {
		return err
	}
	r.Recorder.Eventf(s.wnn, nil, corev1.EventTypeWarning, networkv1alpha1.HostRebootedReason, "Converge",
		"HNS network %s is gone but bridge %s remains: the host rebooted; rebuilding the node network", s.desired.hnsNetwork.Name, name)
	return r.deleteBridge(ctx, name)
}

// deleteBridge deletes the bridge and waits for OVS to close its LOCAL interface.
func (r *Reconciler) deleteBridge(ctx context.Context, name string) error {
	r.flows.close()
	if _, err := r.Host.OVSDB.DeleteBridge(ctx, name); err != nil {
		return fmt.Errorf("deleting stale bridge %q: %w", name, err)
	}
	return waitLinkGone(ctx, r.Host.Net, name)
}

// ensureBridge renames the management vNIC to the bridge name and makes the OVS bridge exist, so
// that its LOCAL port is that vNIC with the node IP on it, and the adapter's MAC
// (other_config:hwaddr). No address or route moves: HNS did that.
func (r *Reconciler) ensureBridge(ctx context.Context, s *state) (outcome, error) {
	d := s.desired
	vnic, err := r.Host.Net.LinkByName(ctx, s.network.ManagementVNIC)
	switch {
	case err == nil:
		if _, err := r.Host.Net.LinkByName(ctx, d.bridge.Name); err == nil {
			// A bridge built on another interface (before HNS made this vNIC) stands in the way.
			if err := r.deleteBridge(ctx, d.bridge.Name); err != nil {
				return outcome{}, failed(networkv1alpha1.OVSUnavailableReason, err)
			}
		}
		ctrl.LoggerFrom(ctx).Info("Renaming the management vNIC to the bridge name", "vnic", vnic.Name, "bridge", d.bridge.Name)
		if err := r.Host.Net.RenameLink(ctx, vnic.Index, d.bridge.Name); err != nil {
			return outcome{}, failed(networkv1alpha1.HostAddressMoveFailedReason, err)
		}
		r.event(s.wnn, "ManagementVNICRenamed", "Renamed the management vNIC %s of HNS network %s to %s", vnic.Name, s.network.Name, d.bridge.Name)
	case !errors.Is(err, hostnet.ErrNotFound):
		return outcome{}, failed(networkv1alpha1.HostAddressMoveFailedReason, err)
	}
	changed, err := r.Host.OVSDB.EnsureBridge(ctx, d.bridge)
	if err != nil {
		return outcome{}, failed(networkv1alpha1.OVSUnavailableReason, err)
	}
	if changed {
		r.event(s.wnn, "BridgeConfigured", "Configured OVS bridge %s (datapath %s)", d.bridge.Name, d.bridge.DatapathType)
	}
	if s.bridge, err = waitLink(ctx, r.Host.Net, d.bridge.Name); err != nil {
		return outcome{}, failed(networkv1alpha1.OVSUnavailableReason, err)
	}
	if err := r.Host.Net.SetUp(ctx, s.bridge.Index); err != nil {
		return outcome{}, failed(networkv1alpha1.HostAddressMoveFailedReason, err)
	}
	if s.nodeSubnet, err = addressOf(ctx, r.Host.Net, s.bridge.Index, d.nodeIP); err != nil {
		return outcome{}, failed(networkv1alpha1.HostAddressMoveFailedReason, err)
	}
	if !s.nodeSubnet.IsValid() {
		// The vNIC lost the node IP (someone removed it, or the bridge's interface was recreated).
		if err := r.restoreHostIP(ctx, s, s.bridge, "the bridge interface lost it"); err != nil {
			return outcome{}, failed(networkv1alpha1.HostAddressMoveFailedReason, err)
		}
		if s.nodeSubnet, err = addressOf(ctx, r.Host.Net, s.bridge.Index, d.nodeIP); err != nil {
			return outcome{}, failed(networkv1alpha1.HostAddressMoveFailedReason, err)
		} else if !s.nodeSubnet.IsValid() {
			return outcome{}, failed(networkv1alpha1.HostAddressMoveFailedReason, fmt.Errorf("node IP %s is not on %s", d.nodeIP, d.bridge.Name))
		}
	}
	if s.bridgeAddresses, err = r.Host.Net.Addresses(ctx, s.bridge.Index); err != nil {
		return outcome{}, failed(networkv1alpha1.HostAddressMoveFailedReason, fmt.Errorf("reading the addresses of %s: %w", d.bridge.Name, err))
	}
	// The egress IPs the node holds are not its own addresses.
	if held := r.state().egressAddressesOf(); len(held) > 0 {
		s.bridgeAddresses = slices.DeleteFunc(s.bridgeAddresses, func(p netip.Prefix) bool { return p.IsSingleIP() && slices.Contains(held, p.Addr()) })
	}
	slices.SortFunc(s.bridgeAddresses, netip.Prefix.Compare)
	// winnet-controller places on this node only the egress IPs of this subnet.
	s.wnn.Status.NodeSubnet = networkv1alpha1.InterfaceAddress(s.nodeSubnet.String())
	return outcome{networkv1alpha1.ReadyReason, fmt.Sprintf("Bridge %s is the management vNIC and holds the node IP %s", d.bridge.Name, d.nodeIP)}, nil
}

// ensurePort makes a port exist and returns its OpenFlow port number.
func (r *Reconciler) ensurePort(ctx context.Context, s *state, spec ovsdb.PortSpec, what string) (int32, error) {
	changed, err := r.Host.OVSDB.EnsurePort(ctx, s.desired.bridge.Name, spec)
	if err != nil {
		return 0, err
	}
	ofport, err := r.Host.OVSDB.WaitOFPort(ctx, spec.Name)
	if err != nil {
		return 0, err
	}
	if changed {
		r.event(s.wnn, "PortConfigured", "Configured %s port %s (ofport %d)", what, spec.Name, ofport)
	}
	s.ofports[spec.Name] = ofport
	return ofport, nil
}

func (r *Reconciler) ensureUplink(ctx context.Context, s *state) (outcome, error) {
	ofport, err := r.ensurePort(ctx, s, s.desired.uplink, "uplink")
	if err != nil {
		return outcome{}, failed(networkv1alpha1.OVSUnavailableReason, err)
	}
	// What arrives on the uplink is the switch's: the host sees it through the bridge interface.
	if err := r.Host.Net.SetSwitchPort(ctx, s.uplink.Index, true); err != nil {
		return outcome{}, err
	}
	s.wnn.Status.Uplink = &networkv1alpha1.PortStatus{Name: s.uplink.Name, MAC: s.uplink.MAC.String(), OFPort: ofport}
	return outcome{networkv1alpha1.ReadyReason, fmt.Sprintf("Uplink %s is port %d of the bridge", s.uplink.Name, ofport)}, nil
}

// ensureGateway makes the gateway port exist with its address and MTU, forwarding on, so that the
// local Pod CIDR is routed through it.
func (r *Reconciler) ensureGateway(ctx context.Context, s *state) (outcome, error) {
	d := s.desired
	ofport, err := r.ensurePort(ctx, s, d.gatewayPort, "gateway")
	if err != nil {
		return outcome{}, failed(networkv1alpha1.OVSUnavailableReason, err)
	}
	gw, err := waitLink(ctx, r.Host.Net, d.gatewayPort.Name)
	if err != nil {
		return outcome{}, failed(networkv1alpha1.OVSUnavailableReason, err)
	}
	s.gateway = gw
	for _, op := range []func() error{
		func() error { return r.Host.Net.SetMTU(ctx, gw.Index, d.mtu) },
		func() error { return r.Host.Net.EnsureAddress(ctx, gw.Index, d.gateway) },
		func() error { return r.Host.Net.SetUp(ctx, gw.Index) },
		func() error { return r.Host.Net.EnsureForwarding(ctx, gw.Index) },
		func() error { return r.Host.Net.EnsureForwarding(ctx, s.bridge.Index) },
		func() error {
			return r.Host.Net.EnsureRoute(ctx, hostnet.Route{Dst: d.podCIDR, LinkIndex: gw.Index, Owned: true})
		},
	} {
		if err := op(); err != nil {
			return outcome{}, fmt.Errorf("configuring gateway %s: %w", gw.Name, err)
		}
	}
	s.wnn.Status.Gateway = &networkv1alpha1.GatewayStatus{IP: d.gateway.Addr().String(), MAC: gw.MAC.String(), OFPort: ofport}
	return outcome{networkv1alpha1.ReadyReason, fmt.Sprintf("Gateway %s has %s; Pod CIDR %s is routed through it", gw.Name, d.gateway, d.podCIDR)}, nil
}

// ensureTunnel makes the tunnel port match the encapsulation settings, or removes it in NoEncap mode.
func (r *Reconciler) ensureTunnel(ctx context.Context, s *state) (outcome, error) {
	d := s.desired
	if d.tunnel == nil {
		changed, err := r.Host.OVSDB.DeletePort(ctx, d.bridge.Name, networkv1alpha1.DefaultTunnelPortName)
		if err != nil {
			return outcome{}, failed(networkv1alpha1.OVSUnavailableReason, err)
		}
		if changed {
			r.event(s.wnn, "TunnelRemoved", "Removed tunnel port %s: encapsulation mode is NoEncap", networkv1alpha1.DefaultTunnelPortName)
		}
		s.wnn.Status.Tunnel = nil
		return outcome{networkv1alpha1.TunnelNotRequiredReason, "NoEncap mode needs no tunnel"}, nil
	}
	ofport, err := r.ensurePort(ctx, s, *d.tunnel, string(s.wnn.Spec.Encapsulation.TunnelType))
	if err != nil {
		return outcome{}, failed(networkv1alpha1.OVSUnavailableReason, err)
	}
	port := int32(tunnelPort(s.wnn.Spec.Encapsulation))
	s.wnn.Status.Tunnel = &networkv1alpha1.TunnelStatus{Type: s.wnn.Spec.Encapsulation.TunnelType, Port: port, OFPort: ofport,
		VNI: int32(d.vni), VTEPMAC: d.vtepMAC.String()}
	return outcome{networkv1alpha1.ReadyReason, fmt.Sprintf("%s tunnel from %s on UDP %d, VNI %d, VTEP MAC %s", d.tunnel.Type, d.nodeIP, port, d.vni, d.vtepMAC)}, nil
}

// ensurePipeline installs the base pipeline, after checking the switch's flows for drift.
func (r *Reconciler) ensurePipeline(ctx context.Context, s *state) (outcome, error) {
	flows, err := r.flows.get(ctx, r.Host, s.desired.bridge.Name)
	if err != nil {
		return outcome{}, failed(networkv1alpha1.OVSUnavailableReason, err)
	}
	if now := time.Now(); r.verifyDue(flows, now) {
		diffs, err := flows.Verify(ctx)
		if err != nil {
			return outcome{}, failed(networkv1alpha1.FlowInstallFailedReason, err)
		}
		r.lastVerify, r.verified = now, flows
		if len(diffs) > 0 {
			ctrl.LoggerFrom(ctx).Info("Flows drifted from the desired set; reinstalling", "differences", len(diffs), "first", diffs[0].Flow)
			flows.Invalidate()
		}
	}
	node := s.desired.pipelineNode(s.gateway.MAC, s.ofports)
	s.flows, s.node = flows, node
	total := 0
	for _, category := range pipeline.BaseCategories {
		res, err := flows.Sync(ctx, category, node.Features()[category])
		if err != nil {
			return outcome{}, failed(networkv1alpha1.FlowInstallFailedReason, err)
		}
		if res.Mods() > 0 {
			ctrl.LoggerFrom(ctx).V(1).Info("Synced flows", "category", category, "added", res.Added, "modified", res.Modified, "deleted", res.Deleted)
		}
	}
	for _, category := range pipeline.InstalledCategories {
		total += flows.Count(category)
	}
	s.wnn.Status.FlowCount = int32(total)
	return outcome{networkv1alpha1.ReadyReason, s.desired.readyMessage(total)}, nil
}

func (r *Reconciler) event(wnn *networkv1alpha1.WindowsNodeNetwork, reason, format string, args ...any) {
	r.Recorder.Eventf(wnn, nil, corev1.EventTypeNormal, reason, "Converge", format, args...)
}
