package nodenetwork

import (
	"context"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// Queue is a controller's work queue, as controller-runtime hands it to a source.
type Queue = workqueue.TypedRateLimitingInterface[reconcile.Request]

// WakeSource is the controller source the reconcilers built on the node network use to hear of
// its changes: it calls start (when not nil) once as the controller starts, and wake for every
// value received on any of wakes until the controller stops. Pass State.Subscribe() as a wake
// channel, subscribed at set-up so that no realisation between set-up and start is missed; wake
// is then how the reconciler re-applies what it built on the node network (which it does with
// the items it queues). start and wake may run concurrently with each other.
func WakeSource(start, wake func(Queue), wakes ...<-chan struct{}) source.Source {
	return source.Func(func(ctx context.Context, q Queue) error {
		if start != nil {
			start(q)
		}
		for _, c := range wakes {
			go func() {
				for {
					select {
					case <-ctx.Done():
						return
					case <-c:
						wake(q)
					}
				}
			}()
		}
		return nil
	})
}
