package networkpolicy

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
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
	client kubernetes.Interface

	mu sync.Mutex
	// ctx is the manager's (set by start): watches run within it.
	ctx     context.Context
	watches map[string]*nodeWatch
	// changed is told of every event that changes what a watch selects, after its list.
	changed func()
}

type nodeWatch struct {
	informer cache.SharedIndexInformer
	stop     context.CancelFunc
}

// NewPeerNodes returns the Node watches, which list and watch Nodes through client.
func NewPeerNodes(client kubernetes.Interface) *PeerNodes {
	return &PeerNodes{client: client, watches: map[string]*nodeWatch{}}
}

// start gives the watches the context they run in and the function told of their changes.
func (p *PeerNodes) start(ctx context.Context, changed func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ctx, p.changed = ctx, changed
	go func() {
		<-ctx.Done()
		p.mu.Lock()
		defer p.mu.Unlock()
		for sel, w := range p.watches {
			w.stop()
			delete(p.watches, sel)
		}
	}()
}

// set opens the watches of the selectors not open, closes the open ones no longer wanted, and waits
// up to peerSyncWait for the new ones' lists. It returns whether every watch has listed.
func (p *PeerNodes) set(ctx context.Context, want map[string]bool) (opened, closed []string, synced bool, err error) {
	p.mu.Lock()
	if p.ctx == nil {
		p.mu.Unlock()
		return nil, nil, false, fmt.Errorf("the peer Node watches are not started")
	}
	for sel, w := range p.watches {
		if !want[sel] {
			w.stop()
			delete(p.watches, sel)
			closed = append(closed, sel)
		}
	}
	var waits []cache.InformerSynced
	for _, sel := range slices.Sorted(maps.Keys(want)) {
		w, ok := p.watches[sel]
		if !ok {
			w = p.openLocked(sel)
			opened = append(opened, sel)
		}
		waits = append(waits, w.informer.HasSynced)
	}
	p.mu.Unlock()
	if len(waits) == 0 {
		return opened, closed, true, nil
	}
	wctx, cancel := context.WithTimeout(ctx, peerSyncWait)
	defer cancel()
	return opened, closed, cache.WaitForCacheSync(wctx.Done(), waits...), nil
}

// openLocked opens the watch of one selector (p.mu held).
func (p *PeerNodes) openLocked(sel string) *nodeWatch {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = sel
			return p.client.CoreV1().Nodes().List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = sel
			return p.client.CoreV1().Nodes().Watch(ctx, o)
		},
	}
	inf := cache.NewSharedIndexInformerWithOptions(lw, &corev1.Node{}, cache.SharedIndexInformerOptions{})
	_ = inf.SetTransform(TrimNode)
	changed := p.changed
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
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
	})
	ctx, stop := context.WithCancel(p.ctx)
	w := &nodeWatch{informer: inf, stop: stop}
	p.watches[sel] = w
	go inf.RunWithContext(ctx)
	go func() {
		// A list the pass did not wait for (peerSyncWait) takes the next full pass.
		if cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			changed()
		}
	}()
	ctrl.Log.WithName("networkpolicy").V(1).Info("Opened a peer Node watch", "selector", sel)
	return w
}

// Addresses returns, per open selector whose list is done, the IPv4 addresses of the Nodes it selects, sorted.
func (p *PeerNodes) Addresses() map[string][]netip.Addr {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string][]netip.Addr, len(p.watches))
	for sel, w := range p.watches {
		if !w.informer.HasSynced() {
			continue
		}
		var addrs []netip.Addr
		for _, obj := range w.informer.GetStore().List() {
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
