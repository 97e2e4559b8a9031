package networkpolicy

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/nodenetwork"
	"github.com/winnet-io/winnet/controllers/podendpoint"
	"github.com/winnet-io/winnet/internal/pipeline"
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

// allPolicies is the reconciler's single work item: the node's policy is one desired set of flows,
// synced as one flow category, so every change is applied as its difference, in one bundle.
var allPolicies = reconcile.Request{NamespacedName: types.NamespacedName{Name: "networkpolicies"}}

// Attachments lists the Pods attached on this node (podendpoint.Store).
type Attachments interface {
	List() []*podendpoint.Attachment
}

// Reconciler realises the NetworkPolicies that select the node's Pods. It reads NetworkPolicies
// and Namespaces through Client, every Pod of the cluster through Pods (a cache of its own: the
// agent's manager caches only its node's Pods), and the node's attachments for the local Pods'
// ports; it gets the bridge through the node network's State.
type Reconciler struct {
	Client client.Client
	// Pods reads Pods of every node; PodSource is the same cache, for the watch.
	Pods      client.Reader
	PodSource cache.Cache
	Local     Attachments
	Recorder  events.EventRecorder
	NodeName  string
	State     *nodenetwork.State
	// ResyncPeriod is the drift check period; zero means DefaultResyncPeriod.
	ResyncPeriod time.Duration

	ids conjIDs
	// warned holds the policies (by UID and generation) already given a Warning Event.
	warned map[types.UID]int64
	// changedMu guards changedAt, the time of the first change not yet realised.
	changedMu sync.Mutex
	changedAt time.Time
}

// SetupWithManager registers the reconciler for NetworkPolicies, Namespaces, Pods (of every
// node), the node's PodEndpoints and changes of the realised node network, and makes policy one of
// the bridge's flow owners.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.State.AddFlowOwner(nodenetwork.PolicyFlows)
	all := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		r.markChanged()
		return []reconcile.Request{allPolicies}
	})
	realized := r.State.Subscribe()
	onRealized := source.Func(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		q.Add(allPolicies)
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-realized:
					q.Add(allPolicies)
				}
			}
		}()
		return nil
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("networkpolicy").
		Watches(&networkingv1.NetworkPolicy{}, all).
		Watches(&corev1.Namespace{}, all).
		Watches(&networkv1alpha1.PodEndpoint{}, all).
		WatchesRawSource(source.Kind(r.PodSource, &corev1.Pod{}, handler.TypedEnqueueRequestsFromMapFunc(func(context.Context, *corev1.Pod) []reconcile.Request {
			r.markChanged()
			return []reconcile.Request{allPolicies}
		}))).
		WatchesRawSource(onRealized).
		Complete(r)
}

func (r *Reconciler) markChanged() {
	r.changedMu.Lock()
	defer r.changedMu.Unlock()
	if r.changedAt.IsZero() {
		r.changedAt = time.Now()
	}
}

// takeChanged returns the time of the first change not yet realised (now if none) and clears it.
func (r *Reconciler) takeChanged() time.Time {
	r.changedMu.Lock()
	defer r.changedMu.Unlock()
	t := r.changedAt
	r.changedAt = time.Time{}
	if t.IsZero() {
		t = time.Now()
	}
	return t
}

// Reconcile converges the node's policy: it reads every NetworkPolicy, Namespace and Pod, computes
// the desired flows (Compute) and syncs them as one category, so that only what changed is sent, in
// one bundle. The outcome is reported to the node network reconciler, which writes it as
// PoliciesReady.
func (r *Reconciler) Reconcile(ctx context.Context, _ ctrl.Request) (_ ctrl.Result, retErr error) {
	log := ctrl.LoggerFrom(ctx)
	rz, ok := r.State.Realized()
	if !ok {
		log.V(1).Info("Node network not ready; NetworkPolicies wait for it")
		return ctrl.Result{RequeueAfter: notReadyRetry}, nil
	}
	defer func() {
		if retErr != nil {
			r.State.SetPolicies(nodenetwork.PoliciesResult{Err: retErr.Error()})
		}
	}()
	changed := r.takeChanged()
	in, err := r.inputs(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	d := Compute(in, &r.ids)
	r.warn(ctx, in.Policies, d.Unsupported)
	flows := rz.Node.PolicyFlows(d.Policy)
	synced, err := rz.Flows.Sync(ctx, pipeline.CategoryPolicy, flows)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("installing NetworkPolicy flows: %w", err)
	}
	r.ids.keepOnly(d.Policy.Rules)
	r.State.FlowsSynced(ctx, nodenetwork.PolicyFlows, rz.Flows)
	observePass(d, synced.Mods() > 0, time.Since(changed))
	r.State.SetPolicies(nodenetwork.PoliciesResult{Policies: d.Policies, Rules: d.Rules})
	if synced.Mods() > 0 {
		log.Info("Synced NetworkPolicy flows", "policies", d.Policies, "rules", d.Rules, "flowMods", synced.Mods(),
			"latency", time.Since(changed))
	}
	resync := r.ResyncPeriod
	if resync == 0 {
		resync = DefaultResyncPeriod
	}
	return ctrl.Result{RequeueAfter: resync}, nil
}

// inputs reads the facts Compute needs. The objects are the caches' own, not copies (a pass over
// a thousand policies and Pods would spend most of its time copying them): nothing here or in
// Compute changes them.
func (r *Reconciler) inputs(ctx context.Context) (Inputs, error) {
	var in Inputs
	policies := &networkingv1.NetworkPolicyList{}
	if err := r.Client.List(ctx, policies, client.UnsafeDisableDeepCopy); err != nil {
		return in, fmt.Errorf("listing NetworkPolicies: %w", err)
	}
	in.Policies = policies.Items
	namespaces := &corev1.NamespaceList{}
	if err := r.Client.List(ctx, namespaces, client.UnsafeDisableDeepCopy); err != nil {
		return in, fmt.Errorf("listing Namespaces: %w", err)
	}
	in.Namespaces = map[string]map[string]string{}
	for _, ns := range namespaces.Items {
		in.Namespaces[ns.Name] = ns.Labels
	}
	pods := &corev1.PodList{}
	if err := r.Pods.List(ctx, pods, client.UnsafeDisableDeepCopy); err != nil {
		return in, fmt.Errorf("listing Pods: %w", err)
	}
	// A local Pod's address is known from its attachment before kubelet writes it to the status.
	localIPs := map[types.NamespacedName]netip.Addr{}
	for _, a := range r.Local.List() {
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
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		info, ok := podInfo(p)
		if !ok {
			continue
		}
		if ip, local := localIPs[types.NamespacedName{Namespace: p.Namespace, Name: p.Name}]; local && !containsAddr(info.IPs, ip) {
			info.IPs = append(info.IPs, ip)
		}
		in.Pods = append(in.Pods, info)
	}
	return in, nil
}

// warn emits one Warning Event per policy generation for what it asks that cannot be realised.
func (r *Reconciler) warn(ctx context.Context, policies []networkingv1.NetworkPolicy, unsupported map[types.NamespacedName][]string) {
	if r.warned == nil {
		r.warned = map[types.UID]int64{}
	}
	for i := range policies {
		np := &policies[i]
		what := unsupported[types.NamespacedName{Namespace: np.Namespace, Name: np.Name}]
		if len(what) == 0 || r.warned[np.UID] == np.Generation {
			continue
		}
		r.warned[np.UID] = np.Generation
		ctrl.LoggerFrom(ctx).Info("NetworkPolicy has ports the Windows datapath cannot realise", "networkPolicy", client.ObjectKeyFromObject(np), "ports", what)
		if r.Recorder != nil {
			r.Recorder.Eventf(np, nil, corev1.EventTypeWarning, UnsupportedProtocolReason, "Realise",
				"Not realised on node %s: %s. The Windows datapath's conntrack tracks only TCP, UDP and ICMP, so SCTP is dropped and these ports allow nothing",
				r.NodeName, strings.Join(what, "; "))
		}
	}
}

func containsAddr(ips []netip.Addr, ip netip.Addr) bool {
	for _, a := range ips {
		if a == ip {
			return true
		}
	}
	return false
}
