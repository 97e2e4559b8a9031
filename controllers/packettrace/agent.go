package packettrace

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/nodenetwork"
	"github.com/winnet-io/winnet/controllers/podendpoint"
	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/internal/pipeline"
)

// Limits of the reports a node takes: per second and in a burst. Beyond them a packet-in is
// dropped (its trace then times out): each is an upcall on Windows, and the trace flows match only
// tagged packets, so only traces (at most 63 at once, a handful of reports each) send them.
const (
	reportRate  = 100
	reportBurst = 200
	// reportQueue is how many reports wait for the agent's worker.
	reportQueue = 256
)

// Attachments lists the Pods attached on the node (the Pod network's store).
type Attachments interface {
	List() []*podendpoint.Attachment
}

// AgentReconciler is one agent's side of PacketTraces: it installs the flows of every running trace
// on its node (CategoryTrace), injects the packet of the traces whose source Pod is on its node once
// the agents of status.nodes are ready (their hops exist), and writes its own node's hop from the
// packet-ins of the trace flows. It writes nothing but its node's hop (server-side apply, field
// manager "winnet-agent-<node>"), which the admission policy enforces.
type AgentReconciler struct {
	Client   client.Client
	NodeName string
	State    *nodenetwork.State
	Local    Attachments
	// Services finds the endpoints the node balances a Service address over, so that the source
	// node DNATs a trace's packet to one of them without committing it (nil: through the
	// Service's group, which commits).
	Services ServiceEndpoints

	mu sync.Mutex
	// byTag maps the tags of the running traces to them; observed holds what the node observed of
	// each, written the hop count of observations last written, injected the traces this node
	// injected (when, and how many times).
	byTag    map[uint8]traceRef
	observed map[types.UID][]networkv1alpha1.PacketTraceObservation
	written  map[types.UID]int
	injected map[types.UID]injection
	// installed is when the node first installed each running trace's flows.
	installed map[types.UID]time.Time
	// reported holds the (point, argument) pairs (reportKey) each trace reported on this node since
	// its last injection here: a packet-in for one of them again costs no lookup and adds nothing.
	reported map[types.UID]map[uint32]bool
	// bridge is the connection whose packet-ins the reconciler handles.
	bridge *openflow.Bridge

	limiter *rate.Limiter
	reports chan openflow.PacketIn
	queue   workqueue.TypedRateLimitingInterface[reconcile.Request]
}

// injection is when this node last injected a trace's packet, and how many times.
type injection struct {
	at       time.Time
	attempts int
}

// A trace's packet is injected again when no node reported its end within reinjectAfter, at most
// maxAttempts times in all: a packet can be lost on its way without a report, the first one a
// node tunnels to a peer whose underlay MAC it has not resolved yet above all (Windows and the
// userspace datapath drop it while they resolve).
const (
	reinjectAfter = 2 * time.Second
	maxAttempts   = 3
)

// settle is how long a node waits after installing a trace's flows before it says it is ready (or,
// at the source, injects): the datapath's flow cache (the kernel's on Windows, the userspace
// datapath's megaflows here) keeps forwarding a microflow like the one just seen until
// ovs-vswitchd has revalidated it against the new flows, and a trace packet that hits such an
// entry passes the node without a report. ovs-vswitchd revalidates at most every 500 ms
// (other_config:max-revalidator) and at once after a flow table change.
const settle = time.Second

type traceRef struct {
	key types.NamespacedName
	uid types.UID
	tr  networkv1alpha1.PacketTrace
}

// allTraces is the one request the agent reconciles: every trace at once (there are few).
var allTraces = reconcile.Request{NamespacedName: types.NamespacedName{Name: "packettraces"}}

// SetupWithManager registers the reconciler: every PacketTrace event, every change of the realised
// node network and of the NetworkPolicy index, and every report queue the one pass.
func (r *AgentReconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.byTag = map[uint8]traceRef{}
	r.observed = map[types.UID][]networkv1alpha1.PacketTraceObservation{}
	r.written = map[types.UID]int{}
	r.injected = map[types.UID]injection{}
	r.installed = map[types.UID]time.Time{}
	r.reported = map[types.UID]map[uint32]bool{}
	r.limiter = rate.NewLimiter(reportRate, reportBurst)
	r.reports = make(chan openflow.PacketIn, reportQueue)
	realized := r.State.Subscribe()
	policies := r.State.PolicyIndexChanges()
	egresses := r.State.HeldEgressChanges()
	wake := source.Func(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		r.mu.Lock()
		r.queue = q
		r.mu.Unlock()
		q.Add(allTraces)
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-realized:
					q.Add(allTraces)
				case <-policies:
					q.Add(allTraces)
				case <-egresses:
					q.Add(allTraces)
				case p := <-r.reports:
					r.report(ctx, p)
					q.Add(allTraces)
				}
			}
		}()
		return nil
	})
	all := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request { return []reconcile.Request{allTraces} })
	return ctrl.NewControllerManagedBy(mgr).
		Named("packettrace-agent").
		Watches(&networkv1alpha1.PacketTrace{}, all).
		WatchesRawSource(wake).
		Complete(r)
}

// handlePacketIn takes a trace flow's packet-in on the OpenFlow connection's reader: it never
// blocks, and drops what the rate or the queue does not allow.
func (r *AgentReconciler) handlePacketIn(p openflow.PacketIn) {
	if !r.limiter.Allow() {
		return
	}
	select {
	case r.reports <- p:
	default:
	}
}

// Reconcile installs the running traces' flows, acknowledges them, injects this node's traces and
// writes this node's hops.
func (r *AgentReconciler) Reconcile(ctx context.Context, _ reconcile.Request) (ctrl.Result, error) {
	rz, ok := r.State.Realized()
	if !ok {
		return ctrl.Result{}, nil
	}
	r.mu.Lock()
	if r.bridge != rz.Flows {
		rz.Flows.SetPacketInHandler(pipeline.CategoryTrace, r.handlePacketIn)
		r.bridge = rz.Flows
	}
	r.mu.Unlock()
	list := &networkv1alpha1.PacketTraceList{}
	if err := r.Client.List(ctx, list); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing PacketTraces: %w", err)
	}
	policy := r.State.PolicyIndex().TracePolicy()
	for _, e := range r.State.HeldEgresses() {
		policy.Egresses = append(policy.Egresses, e.ID)
	}
	byTag := map[uint8]traceRef{}
	var flows []openflow.Flow
	var routes *networkv1alpha1.RemoteSubnetRouteList
	// awaitingService holds this node's traces to a Service whose port the node has not realised
	// yet: injected now, their packet would go through the port's group, which commits.
	awaitingService := map[types.UID]bool{}
	for i := range list.Items {
		tr := &list.Items[i]
		t, ok := pipelineTrace(tr)
		if !ok {
			continue
		}
		byTag[t.Tag] = traceRef{key: client.ObjectKeyFromObject(tr), uid: tr.UID, tr: *tr}
		if !needsFlows(tr) {
			continue
		}
		if routes == nil {
			routes = &networkv1alpha1.RemoteSubnetRouteList{}
			if err := r.Client.List(ctx, routes); err != nil {
				return ctrl.Result{}, fmt.Errorf("listing RemoteSubnetRoutes for the packet traces' paths: %w", err)
			}
		}
		t.Path = tracePath(tr, r.NodeName, routes.Items)
		if tr.Status.SourceNode == r.NodeName {
			dst, _ := netip.ParseAddr(string(tr.Status.DestinationIP))
			t.Service = traceService(r.Services, t, dst, tr.Spec.Packet.DstPort)
			awaitingService[tr.UID] = r.Services != nil && tr.Spec.Destination.Service != nil && t.Service == nil
		}
		flows = append(flows, rz.Node.TraceFlows(t, policy)...)
	}
	r.mu.Lock()
	r.byTag = byTag
	r.mu.Unlock()
	if _, err := rz.Flows.Sync(ctx, pipeline.CategoryTrace, flows); err != nil {
		return ctrl.Result{}, fmt.Errorf("installing packet trace flows: %w", err)
	}
	r.forget(list.Items)
	var retry bool
	now := time.Now()
	for i := range list.Items {
		tr := &list.Items[i]
		_, running := pipelineTrace(tr)
		settled := true
		if running {
			r.mu.Lock()
			at, ok := r.installed[tr.UID]
			if !ok {
				at = now
				r.installed[tr.UID] = at
			}
			r.mu.Unlock()
			settled = now.Sub(at) >= settle
			retry = retry || !settled
		}
		if running && tr.Status.SourceNode == r.NodeName {
			inj := r.injection(tr.UID)
			_, _, ended := PathVerdict(&tr.Status)
			switch {
			case inj.attempts == 0 && (!settled || !acknowledged(tr, r.NodeName)):
				retry = true
			case inj.attempts == 0 && awaitingService[tr.UID] && now.Sub(r.installedAt(tr.UID)) < serviceWait:
				retry = true
			case inj.attempts == 0 && awaitingService[tr.UID]:
				// Never through the Service's group: its buckets commit the connection and learn
				// session affinity, state a trace must not leave.
				r.observe(tr.UID, networkv1alpha1.PacketTraceObservation{Component: networkv1alpha1.PacketTraceComponentSource,
					Action: networkv1alpha1.PacketTraceActionDropped,
					Detail: fmt.Sprintf("not injected: node %s has not realised the Service port %s:%d within %v", r.NodeName, tr.Status.DestinationIP, tr.Spec.Packet.DstPort, serviceWait)})
				r.setInjected(tr.UID, maxAttempts)
			case inj.attempts == 0 || (!ended && inj.attempts < maxAttempts && time.Since(inj.at) >= reinjectAfter):
				if err := r.inject(ctx, rz, tr, inj.attempts+1); err != nil {
					r.observe(tr.UID, networkv1alpha1.PacketTraceObservation{Component: networkv1alpha1.PacketTraceComponentSource,
						Action: networkv1alpha1.PacketTraceActionDropped, Detail: printable("the packet could not be injected: " + err.Error())})
					r.setInjected(tr.UID, maxAttempts)
				}
				retry = true
			case !ended && inj.attempts < maxAttempts:
				retry = true
			}
		}
		// A finished trace still gets the observations that were on their way when it finished;
		// a running one is acknowledged once its flows have settled.
		if !settled {
			continue
		}
		if err := r.writeHop(ctx, tr); err != nil {
			return ctrl.Result{}, err
		}
	}
	if retry {
		return ctrl.Result{RequeueAfter: 250 * time.Millisecond}, nil
	}
	return ctrl.Result{}, nil
}

// pipelineTrace is the running trace as the pipeline matches it; false when it is not running.
func pipelineTrace(tr *networkv1alpha1.PacketTrace) (pipeline.Trace, bool) {
	if tr.Status.Phase != networkv1alpha1.PacketTraceRunning || tr.Status.Tag < 1 || tr.Status.Tag > 63 {
		return pipeline.Trace{}, false
	}
	src, err := netip.ParseAddr(string(tr.Status.SourceIP))
	if err != nil || !src.Is4() {
		return pipeline.Trace{}, false
	}
	return pipeline.Trace{Tag: uint8(tr.Status.Tag), Protocol: protocolNumber(tr.Spec.Packet.Protocol), Src: src, SrcPort: uint16(tr.Status.SourcePort)}, true
}

func protocolNumber(p networkv1alpha1.PacketTraceProtocol) uint8 {
	switch p {
	case networkv1alpha1.PacketTraceUDP:
		return openflow.ProtoUDP
	case networkv1alpha1.PacketTraceICMP:
		return openflow.ProtoICMP
	}
	return openflow.ProtoTCP
}

// acknowledged: every node of status.nodes but this one has written its hop (its flows are in).
func acknowledged(tr *networkv1alpha1.PacketTrace, self string) bool {
	for _, n := range tr.Status.Nodes {
		if n == self {
			continue
		}
		if !slices.ContainsFunc(tr.Status.Hops, func(h networkv1alpha1.PacketTraceHop) bool { return h.Node == n }) {
			return false
		}
	}
	return true
}

// forget drops what the reconciler remembers of traces that are gone.
func (r *AgentReconciler) forget(traces []networkv1alpha1.PacketTrace) {
	r.mu.Lock()
	defer r.mu.Unlock()
	live := map[types.UID]bool{}
	for i := range traces {
		live[traces[i].UID] = true
	}
	for uid := range r.observed {
		if !live[uid] {
			delete(r.observed, uid)
		}
	}
	for uid := range r.written {
		if !live[uid] {
			delete(r.written, uid)
		}
	}
	for uid := range r.injected {
		if !live[uid] {
			delete(r.injected, uid)
		}
	}
	for uid := range r.installed {
		if !live[uid] {
			delete(r.installed, uid)
		}
	}
	for uid := range r.reported {
		if !live[uid] {
			delete(r.reported, uid)
		}
	}
}

func (r *AgentReconciler) injection(uid types.UID) injection {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.injected[uid]
}

func (r *AgentReconciler) setInjected(uid types.UID, attempts int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.injected[uid] = injection{at: time.Now(), attempts: attempts}
}

func (r *AgentReconciler) observe(uid types.UID, o networkv1alpha1.PacketTraceObservation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.observed[uid]) < networkv1alpha1.MaxPacketTraceObservations {
		r.observed[uid] = append(r.observed[uid], o)
	}
}

// inject sends the trace's packet as if its source Pod sent it: a packet-out whose in_port is the
// Pod's port (pipeline.TracePacketOut).
func (r *AgentReconciler) inject(ctx context.Context, rz nodenetwork.Realized, tr *networkv1alpha1.PacketTrace, attempt int) error {
	src, _ := netip.ParseAddr(string(tr.Status.SourceIP))
	dst, err := netip.ParseAddr(string(tr.Status.DestinationIP))
	if err != nil {
		return fmt.Errorf("destination %q: %w", tr.Status.DestinationIP, err)
	}
	var from *podendpoint.Attachment
	var dstMAC net.HardwareAddr
	for _, a := range r.Local.List() {
		if a.IP.Addr() == src && a.OFPort > 0 {
			from = a
		}
		if a.IP.Addr() == dst {
			dstMAC, _ = net.ParseMAC(a.MAC)
		}
	}
	if from == nil {
		return fmt.Errorf("source Pod %s (%s) has no attachment with a port on node %s", tr.Spec.Source.Pod.Name, src, r.NodeName)
	}
	srcMAC, err := net.ParseMAC(from.MAC)
	if err != nil {
		return fmt.Errorf("source Pod's MAC %q: %w", from.MAC, err)
	}
	if dstMAC == nil || !rz.Node.PodCIDR.Contains(dst) {
		dstMAC = rz.Node.GatewayMAC // routed: the Pod's next hop is its gateway
	}
	p := Packet{SrcMAC: srcMAC, DstMAC: dstMAC, Src: src, Dst: dst, Protocol: protocolNumber(tr.Spec.Packet.Protocol),
		SrcPort: uint16(tr.Status.SourcePort), DstPort: uint16(tr.Spec.Packet.DstPort), Tag: uint8(tr.Status.Tag)}
	frame, err := p.Frame()
	if err != nil {
		return err
	}
	out := pipeline.TracePacketOut(uint32(from.OFPort), p.Tag)
	ctrl.LoggerFrom(ctx).Info("Injecting a trace packet", "packetTrace", client.ObjectKeyFromObject(tr), "ofPort", from.OFPort, "tag", p.Tag, "attempt", attempt)
	// Record the injection first: the reports of the packet-out come back on the reader.
	again := ""
	if attempt > 1 {
		again = fmt.Sprintf(" (attempt %d: no node reported the packet's end within %v)", attempt, reinjectAfter)
	}
	r.observe(tr.UID, networkv1alpha1.PacketTraceObservation{Component: networkv1alpha1.PacketTraceComponentSource,
		Action: networkv1alpha1.PacketTraceActionInjected,
		Detail: truncate(fmt.Sprintf("%s %s:%d -> %s:%d from Pod %s/%s (port %d), DSCP tag %d%s", tr.Spec.Packet.Protocol, src, p.SrcPort, dst, p.DstPort,
			from.PodNamespace, from.PodName, from.OFPort, p.Tag, again))})
	r.setInjected(tr.UID, attempt)
	// This injection's packet reports anew where it goes (a packet lost on its way reported no end).
	r.mu.Lock()
	delete(r.reported, tr.UID)
	r.mu.Unlock()
	if err := rz.Flows.SendPacketOut(out.InPort, out.Actions, frame); err != nil {
		return fmt.Errorf("sending the trace packet: %w", err)
	}
	return nil
}

// writeHop writes this node's hop of the trace when the node must acknowledge it or observed
// something new: server-side apply of status.hops[node] alone, as field manager
// winnet-agent-<node>.
func (r *AgentReconciler) writeHop(ctx context.Context, tr *networkv1alpha1.PacketTrace) error {
	r.mu.Lock()
	obs := slices.Clone(r.observed[tr.UID])
	written, wrote := r.written[tr.UID]
	r.mu.Unlock()
	_, running := pipelineTrace(tr)
	mine := running && (slices.Contains(tr.Status.Nodes, r.NodeName) || tr.Status.SourceNode == r.NodeName)
	if wrote && written == len(obs) {
		return nil
	}
	if !wrote && len(obs) == 0 && !mine {
		return nil
	}
	hop := map[string]any{"node": r.NodeName}
	if len(obs) > 0 {
		items := make([]any, 0, len(obs))
		for _, o := range obs {
			m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&o)
			if err != nil {
				return fmt.Errorf("encoding an observation: %w", err)
			}
			items = append(items, m)
		}
		hop["observations"] = items
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": networkv1alpha1.GroupVersion.String(), "kind": "PacketTrace",
		"metadata": map[string]any{"name": tr.Name, "namespace": tr.Namespace},
		"status":   map[string]any{"hops": []any{hop}},
	}}
	if err := r.Client.Status().Patch(ctx, u, client.Apply, client.FieldOwner("winnet-agent-"+r.NodeName), client.ForceOwnership); err != nil {
		return fmt.Errorf("writing node %s's hop of PacketTrace %s/%s: %w", r.NodeName, tr.Namespace, tr.Name, err)
	}
	r.mu.Lock()
	r.written[tr.UID] = len(obs)
	r.mu.Unlock()
	return nil
}

// report turns one packet-in of a trace flow into an observation of its trace.
func (r *AgentReconciler) report(ctx context.Context, p openflow.PacketIn) {
	tag, point, arg := pipeline.ParseTraceCookieObject(p.Cookie & openflow.ObjectMask)
	r.mu.Lock()
	ref, ok := r.byTag[tag]
	// A point already recorded for this trace (a packet the source Pod sent with the trace's
	// header and that another node took for the trace's, a reinjection reaching a node again)
	// is dropped here, before any lookup.
	if ok {
		if r.reported[ref.uid][reportKey(point, arg)] {
			ok = false
		} else {
			if r.reported[ref.uid] == nil {
				r.reported[ref.uid] = map[uint32]bool{}
			}
			r.reported[ref.uid][reportKey(point, arg)] = true
		}
	}
	r.mu.Unlock()
	if !ok {
		return
	}
	o, contained, err := containmentObservation(point, p)
	if !contained {
		o, err = r.observation(ctx, &ref.tr, point, arg, p)
	}
	if err != nil {
		o = networkv1alpha1.PacketTraceObservation{Component: "Unknown", Action: "Unknown", Detail: printable(err.Error())}
	}
	r.observe(ref.uid, o)
}

// observation says what the pipeline decided at point, naming what the trace's disclosure allows.
func (r *AgentReconciler) observation(ctx context.Context, tr *networkv1alpha1.PacketTrace, point pipeline.TracePoint, arg uint32, p openflow.PacketIn) (networkv1alpha1.PacketTraceObservation, error) {
	h, err := parseFrame(p.Frame)
	if err != nil {
		return networkv1alpha1.PacketTraceObservation{}, fmt.Errorf("report of trace point %d: %w", point, err)
	}
	d := disclosureOf(tr)
	index := r.State.PolicyIndex()
	np := func(action string, policy types.NamespacedName, rule string, detail func(name string) string) networkv1alpha1.PacketTraceObservation {
		ref, name := d.networkPolicy(policy, rule)
		return networkv1alpha1.PacketTraceObservation{Component: networkv1alpha1.PacketTraceComponentNetworkPolicy, Action: action,
			Detail: printable(detail(name)), Policy: ref}
	}
	switch point {
	case pipeline.TraceServiceDNAT:
		return networkv1alpha1.PacketTraceObservation{Component: networkv1alpha1.PacketTraceComponentService, Action: networkv1alpha1.PacketTraceActionDNAT,
			Detail: printable(fmt.Sprintf("to endpoint %s%s", endpointText(h), r.endpointNode(ctx, tr, h.Dst)))}, nil
	case pipeline.TraceEgressRule, pipeline.TraceIngressRule:
		name, ok := index.Rules[arg]
		if !ok {
			return networkv1alpha1.PacketTraceObservation{Component: networkv1alpha1.PacketTraceComponentNetworkPolicy, Action: networkv1alpha1.PacketTraceActionAdmitted,
				Detail: fmt.Sprintf("by a rule (conjunction %d) the agent no longer knows", arg)}, nil
		}
		return np(networkv1alpha1.PacketTraceActionAdmitted, name.Policy, name.Rule(), func(policy string) string {
			if strings.HasPrefix(policy, "a ") {
				return "admitted by a rule of " + policy
			}
			return fmt.Sprintf("admitted by %s rule %s", policy, name.Rule())
		}), nil
	case pipeline.TraceEgressDrop, pipeline.TraceIngressDrop:
		dir, isolation := "ingress", index.IngressIsolation[arg]
		if point == pipeline.TraceEgressDrop {
			dir, isolation = "egress", index.EgressIsolation[arg]
		}
		var first types.NamespacedName
		if len(isolation) > 0 {
			first = isolation[0]
		}
		return np(networkv1alpha1.PacketTraceActionDropped, first, "default deny", func(string) string {
			var names []string
			for _, n := range isolation {
				_, name := d.networkPolicy(n, "")
				names = append(names, name)
			}
			return fmt.Sprintf("dropped: the Pod on port %d is isolated for %s by %s and no rule admits the packet", arg, dir, strings.Join(slices.Compact(names), ", "))
		}), nil
	case pipeline.TraceClusterAccept, pipeline.TraceClusterDeny, pipeline.TraceClusterPass:
		return clusterObservation(index, point, arg, d.clusterNetworkPolicy()), nil
	case pipeline.TraceExternal:
		return networkv1alpha1.PacketTraceObservation{Component: networkv1alpha1.PacketTraceComponentForwarding, Action: networkv1alpha1.PacketTraceActionForwardedExternally,
			Detail: fmt.Sprintf("to external address %s: SNAT to the node's address, out of the uplink (the trace packet is consumed here)", h.Dst)}, nil
	case pipeline.TraceEgress:
		return networkv1alpha1.PacketTraceObservation{Component: networkv1alpha1.PacketTraceComponentForwarding, Action: networkv1alpha1.PacketTraceActionForwardedExternally,
			Detail: printable(fmt.Sprintf("to external address %s: SNAT to %s, out of the uplink (the trace packet is consumed here)", h.Dst, r.egressText(d, arg)))}, nil
	case pipeline.TraceEgressRelay:
		return networkv1alpha1.PacketTraceObservation{Component: networkv1alpha1.PacketTraceComponentForwarding, Action: networkv1alpha1.PacketTraceActionForwarded,
			Detail: printable(fmt.Sprintf("to external address %s: relayed through the tunnel to %s%s, which holds the egress IP of the Egress that selects the Pod", h.Dst, p.TunDst, r.nodeOf(ctx, p.TunDst)))}, nil
	case pipeline.TraceTunnel:
		return networkv1alpha1.PacketTraceObservation{Component: networkv1alpha1.PacketTraceComponentForwarding, Action: networkv1alpha1.PacketTraceActionForwarded,
			Detail: printable(fmt.Sprintf("tunnel to %s%s", p.TunDst, r.nodeOf(ctx, p.TunDst)))}, nil
	case pipeline.TraceUplink:
		return networkv1alpha1.PacketTraceObservation{Component: networkv1alpha1.PacketTraceComponentForwarding, Action: networkv1alpha1.PacketTraceActionForwarded,
			Detail: fmt.Sprintf("routed out of the uplink towards %s", h.Dst)}, nil
	case pipeline.TraceHost:
		return networkv1alpha1.PacketTraceObservation{Component: networkv1alpha1.PacketTraceComponentOutput, Action: networkv1alpha1.PacketTraceActionDelivered,
			Detail: fmt.Sprintf("to the node's host through the gateway (%s; consumed before the host's stack)", h.Dst)}, nil
	case pipeline.TraceDeliver:
		if p.Regs[pipeline.OFPortFoundField.Reg]&(1<<pipeline.OFPortFoundField.Start) == 0 {
			return networkv1alpha1.PacketTraceObservation{Component: networkv1alpha1.PacketTraceComponentOutput, Action: networkv1alpha1.PacketTraceActionDropped,
				Detail: fmt.Sprintf("no output port for %s on this node", h.Dst)}, nil
		}
		port := p.Regs[pipeline.TargetOFPortField.Reg]
		return networkv1alpha1.PacketTraceObservation{Component: networkv1alpha1.PacketTraceComponentOutput, Action: networkv1alpha1.PacketTraceActionDelivered,
			Detail: printable(fmt.Sprintf("to %s (port %d)%s; consumed before the Pod's application", endpointText(h), port, r.localPod(d, port)))}, nil
	}
	return networkv1alpha1.PacketTraceObservation{}, fmt.Errorf("unknown trace point %d", point)
}

// clusterObservation says what the ClusterNetworkPolicy rule of a trace flow (its tier, direction
// and priority in arg) did with the packet: the flow's point says the action it took, the index
// names the rule when the trace may name ClusterNetworkPolicies (named).
func clusterObservation(index nodenetwork.PolicyIndex, point pipeline.TracePoint, arg uint32, named bool) networkv1alpha1.PacketTraceObservation {
	action, verb := networkv1alpha1.PacketTraceActionAdmitted, "admitted"
	switch point {
	case pipeline.TraceClusterDeny:
		action, verb = networkv1alpha1.PacketTraceActionDropped, "dropped"
	case pipeline.TraceClusterPass:
		action, verb = networkv1alpha1.PacketTraceActionPassed, "passed"
	}
	tier, dir, priority := nodenetwork.TierAdmin, "ingress", uint16(arg)
	if arg>>17&1 == 1 {
		tier = nodenetwork.TierBaseline
	}
	if arg>>16&1 == 1 {
		dir = "egress"
	}
	o := networkv1alpha1.PacketTraceObservation{Component: networkv1alpha1.PacketTraceComponentClusterNetworkPolicy, Action: action}
	name, ok := index.ClusterRules[pipeline.ParseTraceClusterArg(arg)]
	if !ok {
		o.Detail = fmt.Sprintf("%s by a %s tier %s rule (priority %d) the agent no longer knows", verb, tier, dir, priority)
		return o
	}
	next := ""
	if name.FailClosed {
		next = ": the rule cannot be realised as written and drops instead (fail closed; see the policy's Realised condition)"
	}
	if point == pipeline.TraceClusterPass {
		next = ": NetworkPolicy decides next"
		if name.Tier == nodenetwork.TierBaseline {
			next = ": no tier is left, the default admits"
		}
	}
	if !named {
		// The tier and the action say what decided; the policy's name and rule are the cluster
		// administrator's, which the trace's creator may not read.
		o.Detail = fmt.Sprintf("%s by a ClusterNetworkPolicy %s rule (%s tier, %s)%s", verb, dir, name.Tier, name.Action, next)
		o.Policy = &networkv1alpha1.PolicyRuleReference{Kind: string(nodenetwork.KindClusterNetworkPolicy)}
		return o
	}
	o.Detail = printable(fmt.Sprintf("%s by ClusterNetworkPolicy %s rule %s (%s tier, %s)%s", verb, name.Policy.Name, name.Rule(), name.Tier, name.Action, next))
	o.Policy = &networkv1alpha1.PolicyRuleReference{Kind: string(nodenetwork.KindClusterNetworkPolicy), Name: name.Policy.Name, Rule: name.Rule()}
	return o
}

// egressText names the egress IP of the Egress the node holds with id, and the Egress as far as the
// trace's disclosure allows: an Egress is cluster-scoped, the cluster administrator's, and a trace
// names it only at the Cluster level. The egress IP is the source address the external host sees of
// the trace's own source Pod: every disclosure says it.
func (r *AgentReconciler) egressText(d disclosure, id uint32) string {
	for _, e := range r.State.HeldEgresses() {
		if e.ID != id {
			continue
		}
		if d.cluster {
			return fmt.Sprintf("egress IP %s (Egress %s)", e.IP, e.Name)
		}
		return fmt.Sprintf("egress IP %s (an Egress selects the Pod)", e.IP)
	}
	return fmt.Sprintf("the egress IP of an Egress (id %d) the agent no longer holds", id)
}

func endpointText(h frameHeader) string {
	if h.DstPort != 0 {
		return netip.AddrPortFrom(h.Dst, h.DstPort).String()
	}
	return h.Dst.String()
}

// localPod names the local Pod on port, as the trace's disclosure allows.
func (r *AgentReconciler) localPod(d disclosure, port uint32) string {
	for _, a := range r.Local.List() {
		if uint32(a.OFPort) == port {
			return ", " + d.pod(a.PodNamespace, a.PodName)
		}
	}
	return ""
}

// endpointNode names the node of the Service endpoint ip chose by the DNAT, from the EndpointSlices
// the agent caches for its Services (no API request per report): only for a trace to a Service, whose
// slices it reads by the Service's label. The endpoint's Pod is named by the node that delivers to it.
func (r *AgentReconciler) endpointNode(ctx context.Context, tr *networkv1alpha1.PacketTrace, ip netip.Addr) string {
	svc := tr.Spec.Destination.Service
	if svc == nil {
		return ""
	}
	list := &discoveryv1.EndpointSliceList{}
	if err := r.Client.List(ctx, list, client.InNamespace(orDefault(svc.Namespace, tr.Namespace)),
		client.MatchingLabels{discoveryv1.LabelServiceName: svc.Name}); err != nil {
		return ""
	}
	for _, s := range list.Items {
		for _, e := range s.Endpoints {
			if e.NodeName != nil && *e.NodeName != "" && slices.Contains(e.Addresses, ip.String()) {
				return " on node " + *e.NodeName
			}
		}
	}
	return ""
}

// nodeOf names the peer whose tunnel endpoint is ip.
func (r *AgentReconciler) nodeOf(ctx context.Context, ip netip.Addr) string {
	routes := &networkv1alpha1.RemoteSubnetRouteList{}
	if err := r.Client.List(ctx, routes); err != nil {
		return ""
	}
	for _, rt := range routes.Items {
		if string(rt.Spec.NodeIP) == ip.String() && rt.Spec.NodeName != "" {
			return " (node " + rt.Spec.NodeName + ")"
		}
	}
	return ""
}

func truncate(s string) string {
	const max = 512
	if len(s) <= max {
		return s
	}
	return s[:max-3] + "..."
}
