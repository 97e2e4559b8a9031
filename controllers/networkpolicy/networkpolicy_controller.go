package networkpolicy

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	cnpv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/nodenetwork"
	"github.com/winnet-io/winnet/controllers/podendpoint"
	"github.com/winnet-io/winnet/internal/auditlog"
	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/internal/pipeline"
	"github.com/winnet-io/winnet/internal/servedcrd"
)

// DefaultResyncPeriod is how often the node's policy is re-checked against the switch when nothing
// else triggers it (flows the node network found drifted are sent again, Pods attached since are
// covered).
const DefaultResyncPeriod = 10 * time.Second

// notReadyRetry is how soon the reconciler looks again for a node network that is not ready yet.
const notReadyRetry = 200 * time.Millisecond

// UnsupportedProtocolReason is the reason of the Warning Event on a NetworkPolicy with ports the
// Windows datapath cannot realise (SCTP).
const UnsupportedProtocolReason = "UnsupportedProtocol"

// RuleRefusedReason is the reason of the Warning Event on a NetworkPolicy with a rule above the
// size limit (MaxExceptsPerRule).
const RuleRefusedReason = "RuleRefused"

// allPolicies is the reconciler's work item for the full pass: the node's policy is one desired set
// of flows, synced as one flow category, so every change is applied as its difference, in one
// bundle. podChanges is the work item for the Pods queued since (incremental.go), which a full pass
// covers too.
var (
	allPolicies = reconcile.Request{NamespacedName: types.NamespacedName{Name: "networkpolicies"}}
	podChanges  = reconcile.Request{NamespacedName: types.NamespacedName{Name: "pods"}}
)

// Attachments lists the Pods attached on this node (podendpoint.Store).
type Attachments interface {
	List() []*podendpoint.Attachment
}

// Reconciler realises the NetworkPolicies that select the node's Pods. It reads NetworkPolicies,
// Namespaces and the node's own Pods through Client (the agent's manager caches Pods by
// spec.nodeName), the Pods its policies' peers name through Peers (watches opened per peer,
// peers.go), and the node's attachments for the local Pods' ports; it gets the bridge through the
// node network's State.
type Reconciler struct {
	Client client.Client
	// Peers holds the Pods the local policies' peers select, and no other remote Pod.
	Peers *PeerPods
	// Nodes holds the Nodes the ClusterNetworkPolicies' nodes peers select (nil: nodes peers
	// match nothing, and the policies say so).
	Nodes *PeerNodes
	// APIReader reads past the caches: whether a Pod the gate waits for exists at all (gate.go).
	APIReader client.Reader
	Local     Attachments
	Recorder  events.EventRecorder
	NodeName  string
	State     *nodenetwork.State
	// ResyncPeriod is the drift check period; zero means DefaultResyncPeriod.
	ResyncPeriod time.Duration
	// ClusterPolicies, when set, realises the ClusterNetworkPolicies (policy.networking.k8s.io/v1beta1,
	// the Admin and Baseline tiers) too, while the cluster serves their CRD: from the time it
	// starts to, and none from the time it stops (the CRD deleted), without a restart. The
	// first full pass waits until it knows whether the CRD serves them (Decided): a pass that
	// read none before would remove the Admin tier's flows a restarted agent finds in the switch.
	ClusterPolicies *servedcrd.Kind
	// Audit is the node's audit log (audit.go): the audited policies' decisions go to it. nil:
	// nothing is audited, whatever the annotations say, and no flow sends a packet-in.
	Audit *auditlog.Logger

	ids conjIDs
	// warned holds the policies (by UID and generation) already given a Warning Event, per reason.
	warned map[warnKey]int64
	// inputsHash is what the last full pass was compiled from (inputsHash) and invalidations the
	// bridge's count of Invalidate when its flows were last sent: a resync whose inputs hash the
	// same recompiles nothing, and sends the flows again only when the bridge was invalidated (the
	// node network found drift, or ovs-vswitchd restarted).
	inputsHash    uint64
	invalidations uint64
	// last is the last full pass's result, and index what it resolved for the Pods' changes that
	// follow (nil: the next pass is a full one); indexFlows is the bridge it was realised on.
	last       Desired
	index      *peerIndex
	indexFlows *openflow.Bridge
	// changedMu guards changedAt, the time of the first change not yet realised, needFull (a
	// change only the full pass covers) and pods (the Pods changed since, for the incremental path).
	changedMu sync.Mutex
	changedAt time.Time
	needFull  bool
	pods      map[types.NamespacedName]bool
	// nsRead is what the last full pass read of the namespaces (changedMu): the label keys its
	// policies' namespace selectors read, and every namespace's labels then. nil before the first
	// full pass: every Namespace event counts.
	nsRead *namespacesRead
	// localRead is attachmentsSum of the attachments the last full pass read (changedMu).
	localRead uint64
	// reading: a full pass is reading its inputs and has not recorded nsRead yet (changedMu); a
	// Namespace event then counts whatever it changed, since the keys being read are not known.
	reading bool
	// gate tells the Pod network when a new Pod's policies are in the switch (gate.go).
	gate gate
	// clusterServed: the last full pass read the ClusterNetworkPolicies (their CRD was served).
	clusterServed bool
	// clusterActive: the last full pass had ClusterNetworkPolicies; the incremental path then
	// recompiles them too (applyClusterPods).
	clusterActive bool
	// clusterLast is what the last pass realised of them, clusterIn what it was compiled from
	// (the Pods updated by the incremental passes since), clusterObjs its flows by cookie object
	// (one per rule).
	clusterLast ClusterDesired
	clusterIn   Inputs
	clusterObjs map[uint64][]openflow.Flow
	// checked are the peer Pods' resource versions the periodic check found applied as the
	// watches hold them since the index was built (peerIndex.stale).
	checked map[types.NamespacedName]string
	// suspects are the peer Pods (and their versions) the last periodic check found stale.
	suspects map[types.NamespacedName]string
	// auditBridge is the bridge whose policy packet-ins go to Audit; auditWarned the objects (and
	// annotation values) given a Warning Event for an audit annotation that is neither true nor false.
	auditBridge *openflow.Bridge
	auditWarned map[types.UID]string
	// auditSuspended is what of the audit log was suspended when the last pass compiled (auditing);
	// auditIsolations what its default drops' lines say of the policies that isolate each Pod, for
	// the OpenFlow reader.
	auditSuspended  auditlog.Suspensions
	auditIsolations atomic.Pointer[auditIsolations]
}

// SetupWithManager registers the reconciler for NetworkPolicies, Namespaces, the node's Pods, the
// peer Pod watches, the node's PodEndpoints and changes of the realised node network, and makes policy one of
// the bridge's flow owners.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.State.AddFlowOwner(nodenetwork.PolicyFlows)
	// The node's rule counters are exposed while the manager runs (counters.go).
	counters := newRuleCounters(r.State)
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error { return ruleCounterCollector.sources.While(ctx, counters) })); err != nil {
		return fmt.Errorf("adding the policy rule counters: %w", err)
	}
	// A NetworkPolicy selects Pods of its own namespace only: one in a namespace without a local
	// Pod has no flows here, whatever it says (a Pod attached later brings its own full pass).
	policies := handler.TypedFuncs[client.Object, reconcile.Request]{
		CreateFunc: func(_ context.Context, e event.TypedCreateEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			r.policyChanged(q, e.Object)
		},
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			r.policyChanged(q, e.ObjectNew)
		},
		DeleteFunc: func(_ context.Context, e event.TypedDeleteEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			r.policyChanged(q, e.Object)
		},
		GenericFunc: func(_ context.Context, e event.TypedGenericEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			r.policyChanged(q, e.Object)
		},
	}
	// A Namespace matters through its labels, to the namespace selectors of the policies: only a
	// change of a label one of them reads needs a pass. A new namespace has no Pods yet (its Pods'
	// events find it unknown to the last pass and take the full pass); a namespace created again
	// under the name of one the last pass saw counts if its labels differ there.
	namespaces := handler.TypedFuncs[client.Object, reconcile.Request]{
		CreateFunc: func(_ context.Context, e event.TypedCreateEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			r.namespaceChanged(q, e.Object.GetName(), nil, e.Object.GetLabels(), true)
		},
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			// The audit annotation of a namespace of local Pods changes its policies' flows.
			if r.Audit != nil && auditAnnotationChanged(e.ObjectOld, e.ObjectNew) && r.localNamespaces()[e.ObjectNew.GetName()] {
				r.markChanged(nil)
				q.Add(allPolicies)
				return
			}
			r.namespaceChanged(q, e.ObjectNew.GetName(), e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels(), false)
		},
	}
	// A PodEndpoint event says the node's attachments may have changed: it counts only when what
	// the pass reads of them did (attachmentsSum); the agent's own status writes, which change
	// conditions and ids the pass does not read, take no pass.
	endpoints := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		if !r.attachmentsChanged() {
			return nil
		}
		return []reconcile.Request{allPolicies}
	})
	// The node's own Pods (the manager's cache): a change of what the pass reads of an attached
	// one (labels, addresses, ports) takes the full pass, it may be a policy's target; kubelet's
	// other status writes take none. As a peer, a local Pod comes through the peer watches too.
	localPods := handler.TypedFuncs[client.Object, reconcile.Request]{
		CreateFunc: func(_ context.Context, e event.TypedCreateEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			r.localPodChanged(q, e.Object)
		},
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			o, ok1 := e.ObjectOld.(*corev1.Pod)
			n, ok2 := e.ObjectNew.(*corev1.Pod)
			if ok1 && ok2 && !policyRelevantChange(o, n) {
				return
			}
			r.localPodChanged(q, e.ObjectNew)
		},
		DeleteFunc: func(_ context.Context, e event.TypedDeleteEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			r.localPodChanged(q, e.Object)
		},
	}
	// The peer watches run in the manager's context; a Pod event after a watch's list queues the
	// Pod for the incremental path, a watch's list done (one the pass did not wait for) a full pass.
	peerSource := source.Func(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		r.Peers.start(ctx, func(key types.NamespacedName) {
			r.markChanged(&key)
			q.Add(podChanges)
		}, func() {
			r.markChanged(nil)
			q.Add(allPolicies)
		})
		if r.Nodes != nil {
			r.Nodes.start(ctx, func() {
				r.markChanged(nil)
				q.Add(allPolicies)
			})
		}
		return nil
	})
	r.gate.mu.Lock()
	r.gate.init()
	wake := r.gate.wake
	r.gate.mu.Unlock()
	// A full pass at start, whenever the node network is realised anew, and when a new Pod waits
	// for its policies (WaitPolicies).
	everything := func(q nodenetwork.Queue) {
		r.markChanged(nil)
		q.Add(allPolicies)
	}
	onRealized := nodenetwork.WakeSource(everything, everything, r.State.Subscribe(), wake)
	b := ctrl.NewControllerManagedBy(mgr)
	if r.Audit != nil {
		// The audit log suspended or resumed: the audited flows lose or regain their packet-ins.
		b = b.WatchesRawSource(source.Func(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
			go func() {
				for {
					select {
					case <-ctx.Done():
						return
					case <-r.Audit.Changes():
						r.markChanged(nil)
						q.Add(allPolicies)
					}
				}
			}()
			return nil
		}))
	}
	if r.ClusterPolicies != nil {
		// A ClusterNetworkPolicy selects Pods of any namespace: each of its events takes the full
		// pass, and so does its CRD served or gone (gone, the pass reads none: their flows go).
		b = b.WatchesRawSource(r.ClusterPolicies.Source(servedcrd.Watch{
			Handler: handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
				r.markChanged(nil)
				return []reconcile.Request{allPolicies}
			}),
			Served: func(q workqueue.TypedRateLimitingInterface[reconcile.Request], _ bool) {
				r.markChanged(nil)
				q.Add(allPolicies)
			},
		}))
	}
	return b.
		Named("networkpolicy").
		Watches(&networkingv1.NetworkPolicy{}, policies).
		Watches(&corev1.Namespace{}, namespaces).
		Watches(&networkv1alpha1.PodEndpoint{}, endpoints).
		Watches(&corev1.Pod{}, localPods).
		WatchesRawSource(peerSource).
		WatchesRawSource(onRealized).
		Complete(r)
}

// markChanged records a change: of Pod pod, or (nil) one that only the full pass covers.
func (r *Reconciler) markChanged(pod *types.NamespacedName) {
	r.changedMu.Lock()
	defer r.changedMu.Unlock()
	if r.changedAt.IsZero() {
		r.changedAt = time.Now()
	}
	if pod == nil {
		r.needFull = true
		return
	}
	if r.pods == nil {
		r.pods = map[types.NamespacedName]bool{}
	}
	r.pods[*pod] = true
}

// localPodChanged queues the full pass for an event of a Pod of this node that is attached here.
func (r *Reconciler) localPodChanged(q workqueue.TypedRateLimitingInterface[reconcile.Request], pod client.Object) {
	for _, a := range r.Local.List() {
		if a.PodNamespace == pod.GetNamespace() && a.PodName == pod.GetName() {
			r.markChanged(nil)
			q.Add(allPolicies)
			return
		}
	}
}

// policyChanged queues the full pass for a NetworkPolicy's event when its namespace holds a Pod
// attached on this node.
func (r *Reconciler) policyChanged(q workqueue.TypedRateLimitingInterface[reconcile.Request], np client.Object) {
	if !r.localNamespaces()[np.GetNamespace()] {
		return
	}
	r.markChanged(nil)
	q.Add(allPolicies)
}

// localNamespaces are the namespaces of the Pods attached on this node.
func (r *Reconciler) localNamespaces() map[string]bool {
	out := map[string]bool{}
	for _, a := range r.Local.List() {
		out[a.PodNamespace] = true
	}
	return out
}

// namespaceChanged queues the full pass for a Namespace's event when a label that the last full
// pass's namespace selectors read differs between old and now (created: between what that pass
// saw of a namespace of this name, if any, and now).
func (r *Reconciler) namespaceChanged(q workqueue.TypedRateLimitingInterface[reconcile.Request], name string, old, now map[string]string, created bool) {
	r.changedMu.Lock()
	read, reading := r.nsRead, r.reading
	r.changedMu.Unlock()
	if read != nil && !reading {
		seen, ok := read.labels[name]
		switch {
		case created && !ok:
			// A namespace new to the pass counts when a namespace selector selects it: a peer
			// of every Pod of the namespaces it selects opens a watch per namespace
			// (peerWatchKeys), and a peer with a podSelector of its own may already have
			// brought its Pods through the cluster-wide watch, before the namespace was in
			// the cache (the watches are not ordered): the full pass those Pods took could
			// not match them then.
			if !read.selects(now) {
				return
			}
		case created:
			if !read.differ(seen, now) {
				return
			}
		case !read.differ(old, now):
			return
		}
	}
	r.markChanged(nil)
	q.Add(allPolicies)
}

// attachmentsChanged marks the full pass when what the pass reads of the node's attachments
// differs from what the last full pass read (or one is reading, or none ran yet).
func (r *Reconciler) attachmentsChanged() bool {
	sum := attachmentsSum(r.Local.List())
	r.changedMu.Lock()
	same := r.nsRead != nil && !r.reading && sum == r.localRead
	r.changedMu.Unlock()
	if same {
		return false
	}
	r.markChanged(nil)
	return true
}

// attachmentsMoved tells whether what the pass reads of the attachments differs from what the last
// full pass read.
func (r *Reconciler) attachmentsMoved() bool {
	sum := attachmentsSum(r.Local.List())
	r.changedMu.Lock()
	defer r.changedMu.Unlock()
	return sum != r.localRead
}

// attachmentsSum is a hash of what the pass reads of the attachments: each one's Pod, whether it
// is being detached, its ofport, MAC and address. It is the same for two lists exactly when the
// pass would read the same of them, in any order.
func attachmentsSum(attached []*podendpoint.Attachment) uint64 {
	var sum setSum
	for _, a := range attached {
		sum.add(a.PodNamespace, a.PodName, strconv.FormatBool(a.Deleting), strconv.Itoa(int(a.OFPort)), a.MAC, a.IP.String())
	}
	return sum.sum
}

func (r *Reconciler) setReading(reading bool) {
	r.changedMu.Lock()
	r.reading = reading
	r.changedMu.Unlock()
}

// namespacesRead is what a full pass read of the namespaces.
type namespacesRead struct {
	// keys are the label keys the namespace selectors of its policies read.
	keys map[string]bool
	// labels are every namespace's labels it saw.
	labels map[string]map[string]string
	// selectors are the namespace selectors of its policies' peers.
	selectors []k8slabels.Selector
}

// selects tells whether a namespace selector of the policies selects a namespace with these
// labels.
func (n *namespacesRead) selects(l map[string]string) bool {
	return slices.ContainsFunc(n.selectors, func(s k8slabels.Selector) bool { return s.Matches(k8slabels.Set(l)) })
}

// differ reports whether a label the selectors read differs between a and b.
func (n *namespacesRead) differ(a, b map[string]string) bool {
	for k := range n.keys {
		va, oka := a[k]
		vb, okb := b[k]
		if oka != okb || va != vb {
			return true
		}
	}
	return false
}

// readNamespaces records what policies' namespace selectors read and the namespaces' labels.
func readNamespaces(policies []networkingv1.NetworkPolicy, labels map[string]map[string]string) *namespacesRead {
	n := &namespacesRead{keys: map[string]bool{}, labels: labels}
	add := func(peers []networkingv1.NetworkPolicyPeer) {
		for _, p := range peers {
			if p.NamespaceSelector == nil {
				continue
			}
			if sel, err := metav1.LabelSelectorAsSelector(p.NamespaceSelector); err == nil {
				n.selectors = append(n.selectors, sel)
			}
			for k := range p.NamespaceSelector.MatchLabels {
				n.keys[k] = true
			}
			for _, e := range p.NamespaceSelector.MatchExpressions {
				n.keys[e.Key] = true
			}
		}
	}
	for i := range policies {
		for _, rule := range policies[i].Spec.Ingress {
			add(rule.From)
		}
		for _, rule := range policies[i].Spec.Egress {
			add(rule.To)
		}
	}
	return n
}

// takeChanged returns and clears what changed since the last pass: the time of the first change
// not yet realised (now if none), whether a change needs the full pass, and the changed Pods.
func (r *Reconciler) takeChanged() (at time.Time, full bool, pods map[types.NamespacedName]bool) {
	r.changedMu.Lock()
	defer r.changedMu.Unlock()
	at, full, pods = r.changedAt, r.needFull, r.pods
	r.changedAt, r.needFull, r.pods = time.Time{}, false, nil
	if at.IsZero() {
		at = time.Now()
	}
	return at, full, pods
}

// Reconcile converges the node's policy. When only Pods changed since the last full pass, it
// applies their changes alone (applyPods, incremental.go); otherwise, and every ResyncPeriod, it
// runs the full pass: it reads every NetworkPolicy, Namespace and Pod, computes the desired flows
// (Compute) and syncs them as one category, so that only what changed is sent, in one bundle. The
// outcome is reported to the node network reconciler, which writes it as PoliciesReady.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	log := ctrl.LoggerFrom(ctx)
	rz, ok := r.State.Realized()
	if !ok {
		log.V(1).Info("Node network not ready; NetworkPolicies wait for it")
		return ctrl.Result{RequeueAfter: notReadyRetry}, nil
	}
	if r.ClusterPolicies != nil && !r.ClusterPolicies.Decided() {
		log.V(1).Info("Whether the cluster serves ClusterNetworkPolicies is not known yet; NetworkPolicies wait for it")
		if err := r.ClusterPolicies.WatchError(); err != nil {
			// The node keeps its flows and new Pods wait: say why on the node (PoliciesReady).
			r.State.SetPolicies(nodenetwork.PoliciesResult{Err: fmt.Sprintf(
				"waiting to learn whether the cluster serves ClusterNetworkPolicies: watching CustomResourceDefinition %s failed (the agent's RBAC rule must allow get, list and watch on it): %v",
				r.ClusterPolicies.CRDName(), err)})
		}
		return ctrl.Result{RequeueAfter: notReadyRetry}, nil
	}
	r.handleAudit(rz.Flows)
	changed, full, pods := r.takeChanged()
	defer func() {
		if retErr != nil {
			r.State.SetPolicies(nodenetwork.PoliciesResult{Err: retErr.Error()})
			if full {
				r.markChanged(nil) // the retry is a full pass too
			}
		}
	}()
	// The Pods changed since the last pass are applied whichever request took them: the periodic
	// check's request may be the one that finds them (it was queued before the Pods' own), and the
	// Pods' request then finds nothing left to do.
	if !full && len(pods) > 0 {
		err := r.applyPods(ctx, rz, pods, changed, time.Since(changed))
		switch {
		case err == nil:
			passes.WithLabelValues(PassPods).Inc()
			if req == podChanges {
				return ctrl.Result{}, nil
			}
		case errors.Is(err, errFullPass):
			r.index = nil
			log.V(1).Info("Pod changes need a full NetworkPolicy pass", "reason", err.Error())
		default:
			r.index = nil
			r.markChanged(nil)
			return ctrl.Result{}, err
		}
	} else if req == podChanges && !full {
		return ctrl.Result{}, nil // a pass took them
	}
	resync := r.ResyncPeriod
	if resync == 0 {
		resync = DefaultResyncPeriod
	}
	if req == allPolicies && !full && r.index != nil && r.indexFlows == rz.Flows && !r.attachmentsMoved() {
		// The periodic check with nothing changed since the last full pass (every event that
		// needs one marks it; the Pods' changes were applied by applyPods; the node's
		// attachments, which change without an event of their own, are compared with what the
		// last pass read): nothing else is read or compiled, the flows are sent again only if the bridge's were invalidated (the node
		// network found drift, or ovs-vswitchd restarted).
		passes.WithLabelValues(PassCheck).Inc()
		if err := r.resend(ctx, rz); err != nil {
			return ctrl.Result{}, err
		}
		needFull, err := r.repairPeers(ctx, rz)
		if err != nil {
			return ctrl.Result{}, err
		}
		if !needFull {
			r.State.FlowsSynced(ctx, nodenetwork.PolicyFlows, rz.Flows)
			r.State.SetPolicies(r.result(r.last))
			return ctrl.Result{RequeueAfter: resync}, nil
		}
	}
	full = true // from here on, whatever brought it here, this is the full pass
	index := r.index
	r.index = nil
	passStart := time.Now()
	passes.WithLabelValues(PassFull).Inc()
	r.setReading(true)
	defer r.setReading(false)
	in, hash, localSum, err := r.inputs(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	read := time.Since(passStart)
	if index != nil && r.indexFlows == rz.Flows && hash == r.inputsHash {
		// Nothing the flows are compiled from changed: verify the switch holds them (the node
		// network compares it with the bridge's cache and invalidates it on drift) and send them
		// again only if it did not.
		r.index = index
		r.changedMu.Lock()
		r.localRead = localSum
		r.changedMu.Unlock()
		if err := r.resend(ctx, rz); err != nil {
			return ctrl.Result{}, err
		}
		r.State.FlowsSynced(ctx, nodenetwork.PolicyFlows, rz.Flows)
		r.State.SetPolicies(r.result(r.last))
		r.covered(in)
		return ctrl.Result{RequeueAfter: resync}, nil
	}
	invalidations := rz.Flows.Invalidations()
	d := Compute(in, &r.ids)
	r.warn(ctx, in.Policies, d.Unsupported, UnsupportedProtocolReason)
	r.warn(ctx, in.Policies, d.Refused, RuleRefusedReason)
	cd := ComputeCluster(in.ClusterPolicies, in)
	r.warnCluster(ctx, in.ClusterPolicies, cd)
	for i := range in.ClusterPolicies {
		if slices.Contains(cd.AuditInvalid, in.ClusterPolicies[i].Name) {
			r.warnAuditValue(ctx, &in.ClusterPolicies[i])
		}
	}
	cflows := rz.Node.ClusterPolicyFlows(cd.Policy)
	clusterFlows := len(cflows)
	flows := append(rz.Node.PolicyFlows(d.Policy), cflows...)
	compute := time.Since(passStart) - read
	synced, err := rz.Flows.Sync(ctx, pipeline.CategoryPolicy, flows)
	sync := time.Since(passStart) - read - compute
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("installing NetworkPolicy flows: %w", err)
	}
	r.ids.keepOnly(d.ids, d.Policy.IngressClasses, d.Policy.EgressClasses)
	r.last, r.index, r.indexFlows = d, d.peers(), rz.Flows
	r.checked, r.suspects = map[types.NamespacedName]string{}, nil
	r.inputsHash, r.invalidations = hash, invalidations
	r.clusterActive, r.clusterLast, r.clusterIn, r.clusterObjs = len(in.ClusterPolicies) > 0, cd, in, byObject(flows[len(flows)-clusterFlows:])
	seen := readNamespaces(withClusterPeers(in.Policies, in.ClusterPolicies, true), in.Namespaces)
	r.changedMu.Lock()
	r.nsRead, r.localRead, r.reading = seen, localSum, false
	r.changedMu.Unlock()
	r.State.FlowsSynced(ctx, nodenetwork.PolicyFlows, rz.Flows)
	observePass(d, synced.Mods() > 0, time.Since(changed))
	r.State.SetPolicies(r.result(d))
	d.Index.ClusterRules, d.Index.ClusterTraceRules = cd.Index, cd.Policy.TraceRules()
	if r.Audit != nil {
		r.auditIsolations.Store(newAuditIsolations(d.Index))
	}
	r.State.SetPolicyIndex(d.Index)
	r.covered(in)
	if synced.Mods() > 0 {
		// latency runs from the first change seen; queued, read, compute and sync are its steps
		// (waiting for this pass, reading the caches, compiling the flows, the bundle committed).
		log.Info("Synced NetworkPolicy flows", "policies", d.Policies, "rules", d.Rules,
			"clusterNetworkPolicies", cd.Policies, "clusterRules", cd.Rules, "flowMods", synced.Mods(),
			"latency", time.Since(changed), "queued", passStart.Sub(changed), "read", read, "compute", compute, "sync", sync)
	}
	return ctrl.Result{RequeueAfter: resync}, nil
}

// repairPeers applies again the peer Pods whose place in the peer sets differs from what the
// watches hold (peerIndex.stale): a lost change, counted in winnet_networkpolicy_peer_pods_repaired_total
// and logged. It returns whether they need the full pass (a change the incremental path cannot
// express).
func (r *Reconciler) repairPeers(ctx context.Context, rz nodenetwork.Realized) (needFull bool, err error) {
	if r.checked == nil {
		r.checked = map[types.NamespacedName]string{}
	}
	// A Pod found stale at the same version two checks in a row is a lost change: once only, its
	// event may still be on its way (the watch's store is written before its handlers are told).
	pods := map[types.NamespacedName]bool{}
	suspects := map[types.NamespacedName]string{}
	var first types.NamespacedName
	for k, rv := range r.index.stale(r.Peers.list(), r.checked) {
		if prev, ok := r.suspects[k]; ok && prev == rv {
			pods[k] = true
			first = k
			continue
		}
		suspects[k] = rv
	}
	r.suspects = suspects
	if len(pods) == 0 {
		return false, nil
	}
	peersRepaired.Add(float64(len(pods)))
	ctrl.LoggerFrom(ctx).Info("Peer Pods applied otherwise than the peer watches hold them (a lost change): applying them again",
		"pods", len(pods), "one", first.String())
	err = r.applyPods(ctx, rz, pods, time.Now(), 0)
	if err == nil {
		passes.WithLabelValues(PassPods).Inc()
		return false, nil
	}
	r.index = nil
	if errors.Is(err, errFullPass) {
		return true, nil
	}
	r.markChanged(nil)
	return false, err
}

// resend sends the category's flows again when the bridge's flows were invalidated since: the
// flows the bridge records as installed, which are the last full pass's with every incremental
// pass's changes (applyPods) applied, not the full pass's list, which would put back peers that
// left since.
func (r *Reconciler) resend(ctx context.Context, rz nodenetwork.Realized) error {
	inv := rz.Flows.Invalidations()
	if inv == r.invalidations {
		return nil
	}
	synced, err := rz.Flows.Sync(ctx, pipeline.CategoryPolicy, rz.Flows.Installed(pipeline.CategoryPolicy))
	if err != nil {
		r.index = nil
		return fmt.Errorf("installing NetworkPolicy flows: %w", err)
	}
	r.invalidations = inv
	ctrl.LoggerFrom(ctx).Info("Sent the NetworkPolicy flows again: the bridge's flows were invalidated", "flowMods", synced.Mods())
	return nil
}

// result is what a pass reports in the node's PoliciesReady condition.
func (r *Reconciler) result(d Desired) nodenetwork.PoliciesResult {
	res := nodenetwork.PoliciesResult{Policies: d.Policies, Rules: d.Rules}
	for key, why := range d.Refused {
		for _, w := range why {
			res.Refused = append(res.Refused, key.String()+": "+w)
		}
	}
	for name, why := range r.clusterLast.Refused {
		for _, w := range why {
			res.Refused = append(res.Refused, "ClusterNetworkPolicy "+name+": "+w)
		}
	}
	if r.clusterServed {
		res.Cluster, res.ClusterReport = r.clusterLast.Report()
	}
	slices.Sort(res.Refused)
	return res
}

// applyPods applies the changes of the given Pods to the last full pass's flows: only the peer
// flows of the addresses that joined or left a peer set, in one bundle (incremental.go). It
// returns errFullPass when a change needs the full pass. changed is when the first of the changes
// was seen, queued how long they waited for this pass (both for the log).
func (r *Reconciler) applyPods(ctx context.Context, rz nodenetwork.Realized, pods map[types.NamespacedName]bool, changed time.Time, queued time.Duration) error {
	start := time.Now()
	if r.index == nil || r.indexFlows != rz.Flows {
		return fmt.Errorf("no full pass on this bridge yet: %w", errFullPass)
	}
	local := map[types.NamespacedName]bool{}
	for _, a := range r.Local.List() {
		local[types.NamespacedName{Namespace: a.PodNamespace, Name: a.PodName}] = true
	}
	var clauses []peerClause
	for key := range pods {
		if local[key] {
			return fmt.Errorf("pod %s is attached on this node: %w", key, errFullPass)
		}
		var info *PodInfo
		if pod := r.Peers.get(key); pod != nil {
			if pi, ok := podInfo(pod); ok {
				info = &pi
			}
		}
		c, err := r.index.podChanged(key, info)
		if err != nil {
			return err
		}
		clauses = append(clauses, c...)
	}
	flows := r.index.flows(clauses)
	var cluster *clusterPass
	if r.clusterActive {
		cluster = r.applyClusterPods(rz, pods)
		for obj, fs := range cluster.changed {
			flows[obj] = fs
		}
	}
	compute := time.Since(start)
	var trace openflow.SendTrace
	synced, err := rz.Flows.SyncObjects(openflow.WithSendTrace(ctx, &trace), pipeline.CategoryPolicy, flows)
	if err != nil {
		return fmt.Errorf("installing NetworkPolicy peer flows: %w", err)
	}
	if cluster != nil {
		r.clusterCommitted(cluster)
	}
	observePass(r.last, synced.Mods() > 0, time.Since(changed))
	if synced.Mods() > 0 {
		// latency runs from the first change seen; queued, compute and sync are its steps (waiting
		// for this pass, reading the Pods and compiling their flows, the change committed), and
		// locked, written and answered the times into sync when the bridge's lock was taken, the
		// change written to the switch and its answer read (0: it shared another call's bundle).
		sync := time.Since(start) - compute
		ctrl.LoggerFrom(ctx).Info("Synced NetworkPolicy flows", "pods", len(pods), "flowMods", synced.Mods(), "latency", time.Since(changed),
			"queued", queued, "compute", compute, "sync", sync, "locked", sinceOrZero(trace.Locked, start.Add(compute)),
			"written", sinceOrZero(trace.Written, start.Add(compute)),
			"answered", sinceOrZero(trace.Answered, start.Add(compute)))
	}
	return nil
}

// inputs reads the facts Compute needs. The objects are the caches' own, not copies (a pass over
// a thousand policies and Pods would spend most of its time copying them): nothing here or in
// Compute changes them.
//
// It also returns a hash of everything it read (the objects' UIDs and resourceVersions, the local
// attachments), which is the same for two reads exactly when Compute's inputs are the same.
func (r *Reconciler) inputs(ctx context.Context) (Inputs, uint64, uint64, error) {
	var in Inputs
	// The hash is the sum of each object's: the caches list in no particular order.
	var sum setSum
	write := sum.add
	attached := r.Local.List()
	local := map[string]bool{}
	for _, a := range attached {
		local[a.PodNamespace] = true
	}
	// Only the policies of the namespaces of local Pods select any (a policy selects Pods of its
	// own namespace).
	for _, ns := range slices.Sorted(maps.Keys(local)) {
		policies := &networkingv1.NetworkPolicyList{}
		if err := r.Client.List(ctx, policies, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
			return in, 0, 0, fmt.Errorf("listing the NetworkPolicies of namespace %s: %w", ns, err)
		}
		in.Policies = append(in.Policies, policies.Items...)
	}
	for i := range in.Policies {
		write("np", string(in.Policies[i].UID), in.Policies[i].ResourceVersion)
	}
	// nil while the cluster does not serve ClusterNetworkPolicies: the pass realises none.
	cnpReader := r.ClusterPolicies.Reader()
	r.clusterServed = cnpReader != nil
	write("cnp-served", strconv.FormatBool(r.clusterServed))
	if cnpReader != nil {
		cnps := &cnpv1beta1.ClusterNetworkPolicyList{}
		if err := cnpReader.List(ctx, cnps, client.UnsafeDisableDeepCopy); err != nil {
			return in, 0, 0, fmt.Errorf("listing ClusterNetworkPolicies: %w", err)
		}
		in.ClusterPolicies = cnps.Items
		for i := range in.ClusterPolicies {
			write("cnp", string(in.ClusterPolicies[i].UID), in.ClusterPolicies[i].ResourceVersion)
		}
	}
	namespaces := &corev1.NamespaceList{}
	if err := r.Client.List(ctx, namespaces, client.UnsafeDisableDeepCopy); err != nil {
		return in, 0, 0, fmt.Errorf("listing Namespaces: %w", err)
	}
	in.Namespaces = map[string]map[string]string{}
	audit, suspended := r.auditing(ctx)
	in.Audit, in.AuditNamespaces, in.AuditSuspended = audit, map[string]bool{}, map[auditlog.Owner]bool{}
	write("audit", strconv.FormatBool(in.Audit))
	for o := range suspended.Owners {
		in.AuditSuspended[o] = true
		write("audit-suspended", o.Kind, o.Name)
	}
	for i := range namespaces.Items {
		ns := &namespaces.Items[i]
		in.Namespaces[ns.Name] = ns.Labels
		write("ns", string(ns.UID), ns.ResourceVersion)
		if in.Audit {
			on, valid := auditValue(ns.Annotations)
			if on {
				in.AuditNamespaces[ns.Name] = true
			}
			if !valid && local[ns.Name] {
				r.warnAuditValue(ctx, ns)
			}
		}
	}
	// The Pods the policies can select: the local Pods of their namespaces (targets, from the
	// manager's cache of the node's Pods), and the peers, through the watches their peers need
	// (opened now if new, closed if no policy needs them any more).
	want := peerWatchKeys(withClusterPeers(in.Policies, in.ClusterPolicies, false), in.Namespaces)
	opened, closed, synced, err := r.Peers.set(ctx, want)
	if err != nil {
		return in, 0, 0, fmt.Errorf("opening the peer Pod watches: %w", err)
	}
	if len(opened)+len(closed) > 0 || !synced {
		ctrl.LoggerFrom(ctx).Info("Peer Pod watches changed", "open", len(want), "opened", keyStrings(opened), "closed", keyStrings(closed), "listed", synced)
	}
	// Without ClusterNetworkPolicies (their CRD gone) no selector is wanted: the watches close.
	if r.Nodes != nil {
		selectors, _ := NodePeerSelectors(in.ClusterPolicies)
		opened, closed, synced, err := r.Nodes.set(ctx, selectors)
		if err != nil {
			return in, 0, 0, fmt.Errorf("opening the peer Node watches: %w", err)
		}
		if len(opened)+len(closed) > 0 || !synced {
			ctrl.LoggerFrom(ctx).Info("Peer Node watches changed", "open", len(selectors), "opened", opened, "closed", closed, "listed", synced)
		}
		in.NodePeers = r.Nodes.Addresses()
		for _, sel := range slices.Sorted(maps.Keys(in.NodePeers)) {
			parts := []string{"nodes", sel}
			for _, a := range in.NodePeers[sel] {
				parts = append(parts, a.String())
			}
			write(parts...)
		}
	}
	byKey := map[types.NamespacedName]*corev1.Pod{}
	for _, p := range r.Peers.list() {
		byKey[types.NamespacedName{Namespace: p.Namespace, Name: p.Name}] = p
	}
	for _, ns := range slices.Sorted(maps.Keys(local)) {
		list := &corev1.PodList{}
		if err := r.Client.List(ctx, list, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
			return in, 0, 0, fmt.Errorf("listing the node's Pods of namespace %s: %w", ns, err)
		}
		for i := range list.Items {
			k := types.NamespacedName{Namespace: list.Items[i].Namespace, Name: list.Items[i].Name}
			byKey[k] = newer(byKey[k], &list.Items[i])
		}
	}
	pods := make([]*corev1.Pod, 0, len(byKey))
	for _, p := range byKey {
		pods = append(pods, p)
		write("pod", string(p.UID), p.ResourceVersion)
	}
	// A local Pod's address is known from its attachment before kubelet writes it to the status.
	localIPs := map[types.NamespacedName]netip.Addr{}
	for _, a := range attached {
		if a.Deleting || a.OFPort <= 0 || !a.IP.Addr().Is4() {
			continue
		}
		key := types.NamespacedName{Namespace: a.PodNamespace, Name: a.PodName}
		mac, err := net.ParseMAC(a.MAC)
		if err != nil {
			continue
		}
		in.Local = append(in.Local, LocalPod{Key: key, Pod: pipeline.Pod{OFPort: uint32(a.OFPort), MAC: mac, IP: a.IP.Addr()}})
		localIPs[key] = a.IP.Addr()
		write("local", key.String(), strconv.Itoa(int(a.OFPort)), mac.String(), a.IP.String())
	}
	for _, p := range pods {
		info, ok := podInfo(p)
		if !ok {
			continue
		}
		if ip, local := localIPs[types.NamespacedName{Namespace: p.Namespace, Name: p.Name}]; local && !containsAddr(info.IPs, ip) {
			info.IPs = append(info.IPs, ip)
		}
		in.Pods = append(in.Pods, info)
	}
	return in, sum.sum, attachmentsSum(attached), nil
}

// keyStrings renders watch keys for the log.
func keyStrings(keys []watchKey) []string {
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, k.String())
	}
	return out
}

// warnKey is a policy and the reason of a Warning Event about it.
type warnKey struct {
	uid    types.UID
	reason string
}

// warn emits one Warning Event per policy generation and reason for what it asks that is not
// realised: ports the Windows datapath cannot realise (UnsupportedProtocolReason), rules above the
// size limit (RuleRefusedReason).
func (r *Reconciler) warn(ctx context.Context, policies []networkingv1.NetworkPolicy, what map[types.NamespacedName][]string, reason string) {
	if r.warned == nil {
		r.warned = map[warnKey]int64{}
	}
	for i := range policies {
		np := &policies[i]
		parts := what[types.NamespacedName{Namespace: np.Namespace, Name: np.Name}]
		k := warnKey{np.UID, reason}
		if len(parts) == 0 || r.warned[k] == np.Generation {
			continue
		}
		r.warned[k] = np.Generation
		if reason == RuleRefusedReason {
			ctrl.LoggerFrom(ctx).Info("NetworkPolicy has rules above the size limit; they admit nothing", "networkPolicy", client.ObjectKeyFromObject(np), "rules", parts)
			if r.Recorder != nil {
				r.Recorder.Eventf(np, nil, corev1.EventTypeWarning, RuleRefusedReason, "Realise",
					"Refused on node %s: %s. Each ipBlock exception costs a flow on every node and work in every pass; split the rule, or use fewer, wider exceptions",
					r.NodeName, strings.Join(parts, "; "))
			}
			continue
		}
		ctrl.LoggerFrom(ctx).Info("NetworkPolicy has ports the Windows datapath cannot realise", "networkPolicy", client.ObjectKeyFromObject(np), "ports", parts)
		if r.Recorder != nil {
			r.Recorder.Eventf(np, nil, corev1.EventTypeWarning, UnsupportedProtocolReason, "Realise",
				"Not realised on node %s: %s. The Windows datapath's conntrack tracks only TCP, UDP and ICMP, so SCTP is dropped and these ports allow nothing",
				r.NodeName, strings.Join(parts, "; "))
		}
	}
}

// sinceOrZero is t - from, or 0 for a zero t.
func sinceOrZero(t, from time.Time) time.Duration {
	if t.IsZero() {
		return 0
	}
	return t.Sub(from)
}

func containsAddr(ips []netip.Addr, ip netip.Addr) bool {
	for _, a := range ips {
		if a == ip {
			return true
		}
	}
	return false
}
