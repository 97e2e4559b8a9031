package networkpolicy

import (
	"context"
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	cnpv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"
)

// Nodes peers of ClusterNetworkPolicy egress rules (`to: [{nodes: <selector>}]`) are the addresses
// in status.addresses of the Nodes the selector selects. An agent holds no Node but its own until a
// ClusterNetworkPolicy names such a peer; then it watches, per distinct selector, only the Nodes
// that selector selects (the API server filters Nodes by label, as it does Pods), trimmed to their
// labels and addresses, and closes the watch when no policy names the selector any more. A Node
// event that changes neither the labels nor the addresses (kubelet's status updates: conditions,
// images, heartbeats) is dropped on arrival; one that does, or a Node added or deleted, takes the
// full pass.

// NodePeerSelectors returns the label selectors (as the API server parses them) of every nodes peer
// of the policies, and the policies' peers whose selector is invalid, by policy name.
func NodePeerSelectors(policies []cnpv1beta1.ClusterNetworkPolicy) (selectors map[string]bool, invalid map[string]string) {
	selectors, invalid = map[string]bool{}, map[string]string{}
	for i := range policies {
		for _, rule := range policies[i].Spec.Egress {
			for _, p := range rule.To {
				if p.Nodes == nil {
					continue
				}
				sel, err := metav1.LabelSelectorAsSelector(p.Nodes)
				if err != nil {
					invalid[policies[i].Name] = err.Error()
					continue
				}
				selectors[sel.String()] = true
			}
		}
	}
	return selectors, invalid
}

// PeerNodes holds the Node watches of the ClusterNetworkPolicies' nodes peers, one per selector.
type PeerNodes struct {
	client  kubernetes.Interface
	watches *watchSet[string]
	// changed is told of every event that changes what a watch selects, after its list (set by
	// start, before any watch opens).
	changed func()
}

// NewPeerNodes returns the Node watches, which list and watch Nodes through client.
func NewPeerNodes(client kubernetes.Interface) *PeerNodes {
	p := &PeerNodes{client: client}
	p.watches = newWatchSet(watchSetOptions[string]{
		kind: "Node", compare: strings.Compare, text: func(sel string) string { return sel },
		listWatch: func(sel string) *cache.ListWatch {
			return &cache.ListWatch{
				ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
					o.LabelSelector = sel
					return p.client.CoreV1().Nodes().List(ctx, o)
				},
				WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
					o.LabelSelector = sel
					return p.client.CoreV1().Nodes().Watch(ctx, o)
				},
			}
		},
		object: &corev1.Node{}, transform: TrimNode,
		handler: p.handler(),
		// A list the pass did not wait for (peerSyncWait) takes the next full pass.
		synced: func() { p.changed() },
	})
	return p
}

// start gives the watches the context they run in and the function told of their changes.
func (p *PeerNodes) start(ctx context.Context, changed func()) {
	p.changed = changed
	p.watches.start(ctx)
}

// set opens the watches of the selectors not open, closes the open ones no longer wanted, and waits
// up to peerSyncWait for the new ones' lists. It returns whether every watch has listed.
func (p *PeerNodes) set(ctx context.Context, want map[string]bool) (opened, closed []string, synced bool, err error) {
	return p.watches.set(ctx, want)
}

// handler tells of every Node added or deleted after the list, and of every change of the labels
// or the addresses; kubelet's status updates (conditions, images, heartbeats) are dropped here.
func (p *PeerNodes) handler() cache.ResourceEventHandler {
	changed := func() { p.changed() }
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(_ any, initial bool) {
			if !initial {
				changed()
			}
		},
		UpdateFunc: func(old, now any) {
			o, ok1 := old.(*corev1.Node)
			n, ok2 := now.(*corev1.Node)
			if ok1 && ok2 && maps.Equal(o.Labels, n.Labels) && slices.Equal(o.Status.Addresses, n.Status.Addresses) {
				return
			}
			changed()
		},
		DeleteFunc: func(any) { changed() },
	}
}

// Addresses returns, per open selector whose list is done, the IPv4 addresses of the Nodes it selects, sorted.
func (p *PeerNodes) Addresses() map[string][]netip.Addr {
	stores := p.watches.stores(nil, true)
	out := make(map[string][]netip.Addr, len(stores))
	for sel, store := range stores {
		var addrs []netip.Addr
		for _, obj := range store.List() {
			n, ok := obj.(*corev1.Node)
			if !ok {
				continue
			}
			for _, a := range n.Status.Addresses {
				if ip, err := netip.ParseAddr(a.Address); err == nil && ip.Is4() {
					addrs = append(addrs, ip)
				}
			}
		}
		slices.SortFunc(addrs, netip.Addr.Compare)
		out[sel] = slices.Compact(addrs)
	}
	return out
}

// TrimNode keeps of a Node what a nodes peer reads: its name, labels and addresses.
func TrimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion, Labels: n.Labels},
		Status:     corev1.NodeStatus{Addresses: n.Status.Addresses},
	}, nil
}
