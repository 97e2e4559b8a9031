package egress

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// remoteSyncWait bounds how long a pass waits for the list of a remote Pod watch it opened: a watch
// that lists later brings a pass of its own (its Pods' events wake the reconciler).
const remoteSyncWait = 10 * time.Second

// podWatch is one remote Pod watch: a namespace and the label selector of an Egress's podSelector
// ("" every Pod of the namespace).
type podWatch struct {
	namespace, selector string
}

// RemotePods holds the Pods of other nodes that the Egresses this node holds select: one Pod watch,
// filtered by the API server, per held Egress and namespace its namespaceSelector selects (the API
// server cannot filter Pods by their namespace's labels), open exactly as long as a pass wants it.
// The agent's own cache holds only its node's Pods; a Pod no held Egress selects never reaches it.
type RemotePods struct {
	client kubernetes.Interface

	mu      sync.Mutex
	ctx     context.Context
	watches map[podWatch]*remoteWatch
	// changes is told of every Pod event of a watch (coalesced).
	changes chan struct{}
}

type remoteWatch struct {
	informer cache.SharedIndexInformer
	stop     context.CancelFunc
}

// NewRemotePods returns the remote Pod watches, which list and watch Pods through client.
func NewRemotePods(client kubernetes.Interface) *RemotePods {
	return &RemotePods{client: client, watches: map[podWatch]*remoteWatch{}, changes: make(chan struct{}, 1)}
}

// Start gives the watches the context they run in, wakes the reconciler (a pass before it opened
// no watch) and waits for the context's end, which closes them all (a manager.Runnable).
func (p *RemotePods) Start(ctx context.Context) error {
	p.mu.Lock()
	p.ctx = ctx
	p.mu.Unlock()
	p.changed()
	<-ctx.Done()
	return nil
}

// changed wakes the reconciler; wake-ups are coalesced.
func (p *RemotePods) changed() {
	select {
	case p.changes <- struct{}{}:
	default:
	}
}

// set opens the watches of want not open and closes the open ones not in want, then waits up to
// remoteSyncWait for the new ones' lists.
func (p *RemotePods) set(ctx context.Context, want map[podWatch]bool) {
	p.mu.Lock()
	var opened []*remoteWatch
	for k, w := range p.watches {
		if !want[k] {
			w.stop()
			delete(p.watches, k)
		}
	}
	if p.ctx != nil {
		for k := range want {
			if _, ok := p.watches[k]; !ok {
				w := p.open(k)
				p.watches[k] = w
				opened = append(opened, w)
			}
		}
	}
	p.mu.Unlock()
	if len(opened) == 0 {
		return
	}
	wait, cancel := context.WithTimeout(ctx, remoteSyncWait)
	defer cancel()
	for _, w := range opened {
		cache.WaitForCacheSync(wait.Done(), w.informer.HasSynced)
	}
}

// open starts the informer of k (p.mu held).
func (p *RemotePods) open(k podWatch) *remoteWatch {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = k.selector
			return p.client.CoreV1().Pods(k.namespace).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = k.selector
			return p.client.CoreV1().Pods(k.namespace).Watch(ctx, o)
		},
	}
	inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
	_ = inf.SetTransform(trimPod)
	changed := p.changed
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { changed() },
		UpdateFunc: func(old, now any) { changed() },
		DeleteFunc: func(any) { changed() },
	})
	ctx, stop := context.WithCancel(p.ctx)
	go inf.RunWithContext(ctx)
	return &remoteWatch{informer: inf, stop: stop}
}

// list returns every Pod the open watches hold, each once.
func (p *RemotePods) list() []corev1.Pod {
	p.mu.Lock()
	defer p.mu.Unlock()
	seen := map[string]bool{}
	var out []corev1.Pod
	for _, k := range slices.SortedFunc(maps.Keys(p.watches), func(a, b podWatch) int {
		return cmp.Or(cmp.Compare(a.namespace, b.namespace), cmp.Compare(a.selector, b.selector))
	}) {
		for _, o := range p.watches[k].informer.GetStore().List() {
			if pod, ok := o.(*corev1.Pod); ok && !seen[pod.Namespace+"/"+pod.Name] {
				seen[pod.Namespace+"/"+pod.Name] = true
				out = append(out, *pod)
			}
		}
	}
	return out
}

// count is the number of open watches.
func (p *RemotePods) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.watches)
}

// trimPod keeps of a Pod what the Egresses read: name, namespace, labels, node, host networking,
// deletion, phase and addresses.
func trimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	t := &corev1.Pod{}
	t.Name, t.Namespace, t.Labels, t.ResourceVersion, t.DeletionTimestamp = p.Name, p.Namespace, p.Labels, p.ResourceVersion, p.DeletionTimestamp
	t.Spec.HostNetwork, t.Spec.NodeName = p.Spec.HostNetwork, p.Spec.NodeName
	t.Status.Phase, t.Status.PodIPs = p.Status.Phase, p.Status.PodIPs
	return t, nil
}
