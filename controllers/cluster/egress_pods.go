package cluster

import (
	"context"
	"errors"
	"maps"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// egressPodSyncWait bounds how long a pass waits for the Pod watch it opened to list: a list that
// comes later brings a pass of its own (its Pods' events wake the reconciler).
const egressPodSyncWait = 10 * time.Second

var (
	egressPodWatchOpen = prometheus.NewGauge(prometheus.GaugeOpts{Name: "winnet_controller_egress_pod_watch_open",
		Help: "1 while winnet-controller watches every Pod's labels (two or more Egresses exist, and a Pod selected by two is reported Superseded), else 0."})
	egressPodsHeld = prometheus.NewGauge(prometheus.GaugeOpts{Name: "winnet_controller_egress_pods",
		Help: "Pods whose name, namespace and labels winnet-controller holds for the Egresses' Superseded condition."})
)

func init() {
	ctrlmetrics.Registry.MustRegister(egressPodWatchOpen, egressPodsHeld)
}

// egressPods holds every Pod's namespace, name and labels, which the Egresses' Superseded condition
// needs, and only while two or more Egresses exist: with fewer no Pod can be selected twice, and a
// cluster of 150,000 Pods would otherwise cost winnet-controller close to 1 KB a Pod (their whole
// metadata) and a pass per Pod event for nothing. The watch asks the API server for metadata only;
// each Pod is kept as its name, namespace and labels, and only the creation, deletion or a change of
// labels of a Pod wakes the reconciler (a status write of kubelet's does not).
type egressPods struct {
	client metadata.Interface
	// wake is told of the Pod changes a pass must see.
	wake func()

	mu sync.Mutex
	// ctx is the manager's (Start): the watch runs within it.
	ctx      context.Context
	informer cache.SharedIndexInformer
	stop     context.CancelFunc
}

// Start gives the watch the context it runs in and waits for its end, which closes it (a
// manager.Runnable; it runs on every replica, as the cache does, and opens nothing by itself).
func (p *egressPods) Start(ctx context.Context) error {
	p.mu.Lock()
	p.ctx = ctx
	p.mu.Unlock()
	<-ctx.Done()
	p.set(context.Background(), false)
	return nil
}

// errPodWatchNotListed is returned while the Pod watch a pass wants has not listed yet.
var errPodWatchNotListed = errors.New("the Pod watch has not listed the cluster's Pods yet")

// set opens the watch when want and it is closed, or closes it when not want. When want, it waits up
// to egressPodSyncWait for the watch's list and reports errPodWatchNotListed if it did not come.
func (p *egressPods) set(ctx context.Context, want bool) error {
	p.mu.Lock()
	if !want {
		if p.stop != nil {
			p.stop()
			p.informer, p.stop = nil, nil
			egressPodWatchOpen.Set(0)
			egressPodsHeld.Set(0)
		}
		p.mu.Unlock()
		return nil
	}
	if p.informer == nil {
		if p.ctx == nil {
			p.mu.Unlock()
			return errors.New("the Pod watch is not started yet")
		}
		p.open()
	}
	inf := p.informer
	p.mu.Unlock()
	if inf.HasSynced() {
		return nil
	}
	wait, cancel := context.WithTimeout(ctx, egressPodSyncWait)
	defer cancel()
	if !cache.WaitForCacheSync(wait.Done(), inf.HasSynced) {
		return errPodWatchNotListed
	}
	return nil
}

// open starts the informer (p.mu held).
func (p *egressPods) open() {
	pods := p.client.Resource(corev1.SchemeGroupVersion.WithResource("pods"))
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return pods.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return pods.Watch(ctx, o)
		},
	}
	inf := cache.NewSharedIndexInformer(lw, &metav1.PartialObjectMetadata{}, 0, cache.Indexers{})
	_ = inf.SetTransform(trimPodMetadata)
	wake := p.wake
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { wake() },
		UpdateFunc: func(old, now any) {
			if podLabelsChanged(old, now) {
				wake()
			}
		},
		DeleteFunc: func(any) { wake() },
	})
	ctx, stop := context.WithCancel(p.ctx)
	go inf.RunWithContext(ctx)
	p.informer, p.stop = inf, stop
	egressPodWatchOpen.Set(1)
}

// list returns the Pods the watch holds (nil when it is closed); the caller must not change them.
func (p *egressPods) list() []*metav1.PartialObjectMetadata {
	p.mu.Lock()
	inf := p.informer
	p.mu.Unlock()
	if inf == nil {
		return nil
	}
	objs := inf.GetStore().List()
	out := make([]*metav1.PartialObjectMetadata, 0, len(objs))
	for _, o := range objs {
		if m, ok := o.(*metav1.PartialObjectMetadata); ok {
			out = append(out, m)
		}
	}
	egressPodsHeld.Set(float64(len(out)))
	return out
}

// trimPodMetadata keeps of a Pod's metadata what Superseded reads, its namespace and labels, with its
// name and resourceVersion, which the watch's store and relists need.
func trimPodMetadata(obj any) (any, error) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil
	}
	t := &metav1.PartialObjectMetadata{}
	t.Name, t.Namespace, t.Labels, t.ResourceVersion = m.Name, m.Namespace, m.Labels, m.ResourceVersion
	return t, nil
}

// podLabelsChanged reports whether an update changed a Pod's labels: nothing else of a Pod matters to
// Superseded.
func podLabelsChanged(old, now any) bool {
	o, ok1 := old.(*metav1.PartialObjectMetadata)
	n, ok2 := now.(*metav1.PartialObjectMetadata)
	if !ok1 || !ok2 {
		return true
	}
	return !maps.Equal(o.Labels, n.Labels)
}
