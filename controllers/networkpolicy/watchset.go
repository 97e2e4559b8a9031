package networkpolicy

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
)

// watchSet is the lifecycle the peer Pod watches (PeerPods) and the peer Node watches (PeerNodes)
// share: informers opened and closed by key, each filtered by the API server, living exactly as
// long as the last pass wanted its key. A pass says which keys it wants (set): the new ones open
// and the pass waits up to peerSyncWait for their lists; the ones no longer wanted close, and what
// they held goes with them.
type watchSet[K comparable] struct {
	watchSetOptions[K]

	mu sync.Mutex
	// ctx is the manager's (set by start): watches run within it.
	ctx     context.Context
	watches map[K]*setWatch
}

type watchSetOptions[K comparable] struct {
	// kind names the watched objects in errors and logs ("Pod", "Node").
	kind    string
	compare func(a, b K) int
	text    func(K) string
	// listWatch lists and watches what key k selects; object is the type it returns, transform
	// trims each object on arrival.
	listWatch func(k K) *cache.ListWatch
	object    runtime.Object
	transform cache.TransformFunc
	// handler gets a watch's events (after the set's counting).
	handler cache.ResourceEventHandler
	// synced is told when a watch's list is done (one the pass did not wait for brings a pass of
	// its own).
	synced func()
	// watchesGauge and objectsGauge, when set, count the open watches and the objects they hold.
	watchesGauge, objectsGauge prometheus.Gauge
}

// setWatch is one open watch.
type setWatch struct {
	informer cache.SharedIndexInformer
	stop     context.CancelFunc
	// counted is how many objects it added to objectsGauge (mu of the set).
	counted int64
}

func newWatchSet[K comparable](o watchSetOptions[K]) *watchSet[K] {
	return &watchSet[K]{watchSetOptions: o, watches: map[K]*setWatch{}}
}

// start gives the watches the context they run in; they all close when it ends.
func (s *watchSet[K]) start(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ctx = ctx
	go func() {
		<-ctx.Done()
		s.mu.Lock()
		defer s.mu.Unlock()
		for k, w := range s.watches {
			s.closeLocked(k, w)
		}
	}()
}

// set opens the watches of want not open, closes the open ones not in want, and waits up to
// peerSyncWait for the new ones' lists. It returns the keys opened and closed (for the log) and
// whether every watch has listed.
func (s *watchSet[K]) set(ctx context.Context, want map[K]bool) (opened, closed []K, synced bool, err error) {
	s.mu.Lock()
	if s.ctx == nil {
		s.mu.Unlock()
		return nil, nil, false, fmt.Errorf("the peer %s watches are not started", s.kind)
	}
	if s.ctx.Err() != nil {
		s.mu.Unlock()
		return nil, nil, false, s.ctx.Err()
	}
	for k, w := range s.watches {
		if !want[k] {
			s.closeLocked(k, w)
			closed = append(closed, k)
		}
	}
	var waits []cache.InformerSynced
	for _, k := range slices.SortedFunc(maps.Keys(want), s.compare) {
		w, ok := s.watches[k]
		if !ok {
			w = s.openLocked(k)
			opened = append(opened, k)
		}
		waits = append(waits, w.informer.HasSynced)
	}
	s.mu.Unlock()
	if len(waits) == 0 {
		return opened, closed, true, nil
	}
	wctx, cancel := context.WithTimeout(ctx, peerSyncWait)
	defer cancel()
	return opened, closed, cache.WaitForCacheSync(wctx.Done(), waits...), nil
}

// openLocked opens watch k (s.mu held).
func (s *watchSet[K]) openLocked(k K) *setWatch {
	inf := cache.NewSharedIndexInformerWithOptions(s.listWatch(k), s.object, cache.SharedIndexInformerOptions{})
	if s.transform != nil {
		_ = inf.SetTransform(s.transform)
	}
	w := &setWatch{informer: inf}
	if s.objectsGauge != nil {
		count := func(d int64) {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.watches[k] == w { // a closed watch's late events count nothing
				w.counted += d
				s.objectsGauge.Add(float64(d))
			}
		}
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { count(1) },
			DeleteFunc: func(any) { count(-1) },
		})
	}
	_, _ = inf.AddEventHandler(s.handler)
	ctx, stop := context.WithCancel(s.ctx)
	w.stop = stop
	s.watches[k] = w
	if s.watchesGauge != nil {
		s.watchesGauge.Inc()
	}
	go inf.RunWithContext(ctx)
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			s.synced()
		}
	}()
	ctrl.Log.WithName("networkpolicy").V(1).Info("Opened a peer watch", "kind", s.kind, "watch", s.text(k))
	return w
}

// closeLocked stops watch k (s.mu held).
func (s *watchSet[K]) closeLocked(k K, w *setWatch) {
	w.stop()
	delete(s.watches, k)
	if s.watchesGauge != nil {
		s.watchesGauge.Dec()
	}
	if s.objectsGauge != nil {
		s.objectsGauge.Sub(float64(w.counted))
	}
	w.counted = 0
	ctrl.Log.WithName("networkpolicy").V(1).Info("Closed a peer watch", "kind", s.kind, "watch", s.text(k))
}

// keys returns the keys of the open watches, sorted.
func (s *watchSet[K]) keys() []K {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.SortedFunc(maps.Keys(s.watches), s.compare)
}

// stores returns the stores of the open watches whose key keep accepts (nil: every one) and, if
// listed, whose list is done.
func (s *watchSet[K]) stores(keep func(K) bool, listed bool) map[K]cache.Store {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[K]cache.Store, len(s.watches))
	for k, w := range s.watches {
		if (keep == nil || keep(k)) && (!listed || w.informer.HasSynced()) {
			out[k] = w.informer.GetStore()
		}
	}
	return out
}
