package nodenetwork

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// TestWakeSource: start queues once as the source starts; every value on any wake channel queues
// again (the work queue coalesces what is pending); nothing is queued after the context ends.
func TestWakeSource(t *testing.T) {
	startReq := reconcile.Request{NamespacedName: types.NamespacedName{Name: "start"}}
	wakeReq := reconcile.Request{NamespacedName: types.NamespacedName{Name: "wake"}}
	a, b := make(chan struct{}), make(chan struct{})
	src := WakeSource(func(q Queue) { q.Add(startReq) }, func(q Queue) { q.Add(wakeReq) }, a, b)
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	ctx, cancel := context.WithCancel(context.Background())
	if err := src.Start(ctx, q); err != nil {
		t.Fatal(err)
	}
	next := func() reconcile.Request {
		t.Helper()
		got := make(chan reconcile.Request, 1)
		go func() { r, _ := q.Get(); got <- r }()
		select {
		case r := <-got:
			q.Done(r)
			return r
		case <-time.After(10 * time.Second):
			t.Fatal("nothing queued")
			return reconcile.Request{}
		}
	}
	if r := next(); r != startReq {
		t.Fatalf("first item %v, want the start item", r)
	}
	for _, c := range []chan struct{}{a, b, a} {
		c <- struct{}{} // unbuffered: received by the source's goroutine
		if r := next(); r != wakeReq {
			t.Fatalf("item %v after a wake-up, want the wake item", r)
		}
	}
	if n := q.Len(); n != 0 {
		t.Fatalf("%d items queued beyond one per wake-up", n)
	}
	cancel()
	select {
	case a <- struct{}{}:
		// The goroutine may still select the value before it sees ctx.Done; what matters is that
		// once ended it receives nothing more.
	case <-time.After(100 * time.Millisecond):
	}
	time.Sleep(50 * time.Millisecond)
	select {
	case a <- struct{}{}:
		t.Fatal("the source still receives wake-ups after its context ended")
	case <-time.After(200 * time.Millisecond):
	}
}

// TestWakeSourceWithoutStart: a nil start queues nothing until a wake-up.
func TestWakeSourceWithoutStart(t *testing.T) {
	a := make(chan struct{})
	src := WakeSource(nil, func(q Queue) { q.Add(reconcile.Request{}) }, a)
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := src.Start(ctx, q); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if n := q.Len(); n != 0 {
		t.Fatalf("%d items queued before any wake-up", n)
	}
	a <- struct{}{}
	deadline := time.Now().Add(10 * time.Second)
	for q.Len() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if q.Len() != 1 {
		t.Fatalf("%d items queued after one wake-up, want 1", q.Len())
	}
}
