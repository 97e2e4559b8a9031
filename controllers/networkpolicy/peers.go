package networkpolicy

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// The peer watches: an agent holds the Pods its node's policies name, and no other remote Pod.
//
// Each distinct peer of the local policies becomes one Pod watch that the API server filters
// (peerWatchKeys): a podSelector P of a policy in namespace N is a watch in N with label selector
// P; a namespaceSelector with a podSelector P that selects something is one cluster-wide watch
// with label selector P (the namespaces are matched here, against the Namespace cache: the API
// server cannot filter Pods by their namespace's labels); a namespaceSelector with every Pod of the
// namespaces it selects is one watch per namespace it selects, opened and closed as namespaces
// gain and lose its labels. A peer of every Pod of the cluster (an empty namespaceSelector and no
// podSelector, an egress rule with named ports and no peers) is the one unfiltered watch, which
// covers every other. The full pass computes the watches its policies need from what it read,
// opens the new ones and waits for their lists, and closes the ones no policy needs any more: a
// watch lives exactly as long as one local policy names it (the set is recomputed, so it is
// counted by the policies of every pass). A Pod no watch selects costs the agent nothing: neither
// its object nor its status updates reach the node.
//
// The node's own Pods (the targets) come from the manager's cache, which holds them by
// spec.nodeName. No other component takes part: winnet-controller computes nothing for policy,
// so an agent works whatever the controller's version and while it is down.

// peerSyncWait bounds how long a full pass waits for the lists of the watches it opened; a watch
// that lists later brings a full pass of its own (so a pass during an API server outage does not
// block, and policy holds with what the open watches hold).
const peerSyncWait = 10 * time.Second

// watchKey is one Pod watch: a namespace ("" every one) and a label selector ("" every Pod).
type watchKey struct {
	namespace, selector string
}

func (k watchKey) String() string {
	ns, sel := k.namespace, k.selector
	if ns == "" {
		ns = "*"
	}
	if sel == "" {
		sel = "*"
	}
	return ns + "/" + sel
}

// everyPod is the unfiltered watch.
var everyPod = watchKey{}

// peerWatchKeys returns the Pod watches the peers of the policies need, given every namespace's
// labels. A selector that does not parse selects nothing (as peerSelectors) and needs no watch.
func peerWatchKeys(policies []networkingv1.NetworkPolicy, namespaces map[string]map[string]string) map[watchKey]bool {
	out := map[watchKey]bool{}
	add := func(ns string, peers []networkingv1.NetworkPolicyPeer) {
		for _, peer := range peers {
			if peer.IPBlock != nil {
				continue
			}
			pod := labels.Everything()
			if peer.PodSelector != nil {
				sel, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
				if err != nil {
					continue
				}
				pod = sel
			}
			if peer.NamespaceSelector == nil {
				out[watchKey{namespace: ns, selector: pod.String()}] = true
				continue
			}
			nsSel, err := metav1.LabelSelectorAsSelector(peer.NamespaceSelector)
			if err != nil {
				continue
			}
			if !pod.Empty() || nsSel.Empty() {
				out[watchKey{selector: pod.String()}] = true
				continue
			}
			for name, l := range namespaces {
				if nsSel.Matches(labels.Set(l)) {
					out[watchKey{namespace: name}] = true
				}
			}
		}
	}
	for i := range policies {
		np := &policies[i]
		for _, rule := range np.Spec.Ingress {
			add(np.Namespace, rule.From)
		}
		for _, rule := range np.Spec.Egress {
			if len(rule.To) == 0 && hasNamedPort(rule.Ports) {
				// Its named ports resolve on every Pod of the cluster.
				out[everyPod] = true
			}
			add(np.Namespace, rule.To)
		}
	}
	if out[everyPod] {
		return map[watchKey]bool{everyPod: true}
	}
	// A namespace's watch of every Pod covers the selector watches in it.
	for k := range out {
		if k.namespace != "" && k.selector != "" && out[watchKey{namespace: k.namespace}] {
			delete(out, k)
		}
	}
	return out
}

// PeerPods holds the Pod watches of the node's policies' peers (peerWatchKeys).
type PeerPods struct {
	client  kubernetes.Interface
	watches *watchSet[watchKey]
	// changed is told of every Pod event of a watch after its list, synced of a watch's list done
	// (both set by start, before any watch opens).
	changed func(types.NamespacedName)
	synced  func()
}

// NewPeerPods returns the peer watches, which list and watch Pods through client (the agent gives
// it protobuf).
func NewPeerPods(client kubernetes.Interface) *PeerPods {
	p := &PeerPods{client: client}
	p.watches = newWatchSet(watchSetOptions[watchKey]{
		kind: "Pod", compare: compareKeys, text: watchKey.String,
		listWatch: func(k watchKey) *cache.ListWatch {
			return &cache.ListWatch{
				ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
					o.LabelSelector = k.selector
					return p.client.CoreV1().Pods(k.namespace).List(ctx, o)
				},
				WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
					o.LabelSelector = k.selector
					return p.client.CoreV1().Pods(k.namespace).Watch(ctx, o)
				},
			}
		},
		object: &corev1.Pod{}, transform: TrimPod,
		handler: p.handler(), synced: func() { p.synced() },
		watchesGauge: peerWatches, objectsGauge: peerObjects,
	})
	return p
}

// start gives the watches the context they run in and the functions told of their events.
func (p *PeerPods) start(ctx context.Context, changed func(types.NamespacedName), synced func()) {
	p.changed, p.synced = changed, synced
	p.watches.start(ctx)
}

// set opens the watches of want not open, closes the open ones not in want, and waits up to
// peerSyncWait for the new ones' lists. It returns the keys opened and closed (for the log) and
// whether every watch has listed.
func (p *PeerPods) set(ctx context.Context, want map[watchKey]bool) (opened, closed []watchKey, synced bool, err error) {
	return p.watches.set(ctx, want)
}

// handler queues, for the incremental path, each Pod whose policy-relevant fields changed.
func (p *PeerPods) handler() cache.ResourceEventHandler {
	changed := func(key types.NamespacedName) { p.changed(key) }
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			peerEvents.Inc()
			if !initial {
				if pod, ok := obj.(*corev1.Pod); ok {
					changed(types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name})
				}
			}
		},
		UpdateFunc: func(old, now any) {
			peerEvents.Inc()
			o, ok1 := old.(*corev1.Pod)
			n, ok2 := now.(*corev1.Pod)
			if ok1 && ok2 && !policyRelevantChange(o, n) {
				return
			}
			if ok2 {
				changed(types.NamespacedName{Namespace: n.Namespace, Name: n.Name})
			}
		},
		DeleteFunc: func(obj any) {
			peerEvents.Inc()
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				changed(types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name})
			}
		},
	}
}

func compareKeys(a, b watchKey) int {
	if a.namespace != b.namespace {
		if a.namespace < b.namespace {
			return -1
		}
		return 1
	}
	if a.selector < b.selector {
		return -1
	}
	if a.selector > b.selector {
		return 1
	}
	return 0
}

// open returns the keys of the open watches.
func (p *PeerPods) open() []watchKey { return p.watches.keys() }

// list returns every Pod the open watches hold, each once (the newest copy when several watches
// hold it).
func (p *PeerPods) list() []*corev1.Pod {
	stores := slices.Collect(maps.Values(p.watches.stores(nil, false)))
	if len(stores) == 1 {
		items := stores[0].List()
		out := make([]*corev1.Pod, 0, len(items))
		for _, o := range items {
			if pod, ok := o.(*corev1.Pod); ok {
				out = append(out, pod)
			}
		}
		return out
	}
	byKey := map[types.NamespacedName]*corev1.Pod{}
	for _, s := range stores {
		for _, o := range s.List() {
			pod, ok := o.(*corev1.Pod)
			if !ok {
				continue
			}
			k := types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}
			byKey[k] = newer(byKey[k], pod)
		}
	}
	out := make([]*corev1.Pod, 0, len(byKey))
	for _, pod := range byKey {
		out = append(out, pod)
	}
	return out
}

// get returns Pod key from the open watches (the newest copy), or nil when none holds it.
func (p *PeerPods) get(key types.NamespacedName) *corev1.Pod {
	stores := p.watches.stores(func(k watchKey) bool { return k.namespace == "" || k.namespace == key.Namespace }, false)
	var out *corev1.Pod
	for _, s := range stores {
		o, ok, err := s.GetByKey(key.Namespace + "/" + key.Name)
		if err != nil || !ok {
			continue
		}
		if pod, ok := o.(*corev1.Pod); ok {
			out = newer(out, pod)
		}
	}
	return out
}

// newer returns the copy of a Pod with the higher resource version (the API server's are etcd
// revisions; one that does not parse loses).
func newer(a, b *corev1.Pod) *corev1.Pod {
	if a == nil {
		return b
	}
	ra, erra := strconv.ParseUint(a.ResourceVersion, 10, 64)
	rb, errb := strconv.ParseUint(b.ResourceVersion, 10, 64)
	if errb == nil && (erra != nil || rb > ra) {
		return b
	}
	return a
}

// policyRelevantChange tells whether what policy reads of a Pod (TrimPod's fields) differs.
func policyRelevantChange(a, b *corev1.Pod) bool {
	ia, oka := podInfo(a)
	ib, okb := podInfo(b)
	if oka != okb {
		return true
	}
	return !maps.Equal(ia.Labels, ib.Labels) || !slices.Equal(ia.IPs, ib.IPs) || !slices.Equal(ia.Ports, ib.Ports) ||
		a.UID != b.UID
}

// TrimPod keeps of a Pod what NetworkPolicy reads: name, namespace, UID, resource version, labels,
// node, host networking, the containers' ports, phase and addresses.
func TrimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	t := &corev1.Pod{}
	t.Name, t.Namespace, t.UID, t.Labels, t.ResourceVersion = p.Name, p.Namespace, p.UID, p.Labels, p.ResourceVersion
	t.Spec.HostNetwork, t.Spec.NodeName = p.Spec.HostNetwork, p.Spec.NodeName
	for _, c := range p.Spec.Containers {
		if len(c.Ports) > 0 {
			t.Spec.Containers = append(t.Spec.Containers, corev1.Container{Name: c.Name, Ports: c.Ports})
		}
	}
	t.Status.Phase, t.Status.PodIPs = p.Status.Phase, p.Status.PodIPs
	return t, nil
}

// PodWatch is one Pod watch of the peer watches: a namespace ("" every one) and a label selector
// ("" every Pod), as sent to the API server.
type PodWatch struct {
	Namespace, LabelSelector string
}

// PeerWatches returns the Pod watches an agent opens for the peers of policies (its node's
// policies), given every namespace's labels: what a benchmark needs to model its watches.
func PeerWatches(policies []networkingv1.NetworkPolicy, namespaces map[string]map[string]string) []PodWatch {
	keys := peerWatchKeys(policies, namespaces)
	out := make([]PodWatch, 0, len(keys))
	for _, k := range slices.SortedFunc(maps.Keys(keys), compareKeys) {
		out = append(out, PodWatch{Namespace: k.namespace, LabelSelector: k.selector})
	}
	return out
}
