package nodenetwork

import (
	"context"
	"errors"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/event"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/hostnet"
)

// watchRetry is how long a host watch that failed waits before it subscribes again.
const watchRetry = time.Second

// watchHost wakes the reconciler when the host drifts, so that drift is repaired at once rather
// than at the next periodic pass (which stays, as a safety net): the bridge or one of its ports
// (uplink, gateway, tunnel) changed or deleted in OVSDB — the client's monitor brings it — and an
// address added or removed, or a route removed, on the host. The switch's flows need nothing here:
// the OpenFlow connection puts back what others delete (openflow's flow monitor).
func (r *Reconciler) watchHost(ctx context.Context, wake chan<- event.GenericEvent) error {
	node := event.GenericEvent{Object: &networkv1alpha1.WindowsNodeNetwork{ObjectMeta: metav1.ObjectMeta{Name: r.NodeName}}}
	signal := func() {
		select {
		case wake <- node:
		default: // a wake-up is pending already
		}
	}
	go FollowAddresses(ctx, r.Host.Net, func() []int {
		if l := r.watchedLinks.Load(); l != nil {
			return *l
		}
		return nil
	}, signal)
	if r.Host.OVSDB == nil {
		return nil
	}
	rows := r.Host.OVSDB.WatchRows(ctx, func() []string {
		if w := r.watched.Load(); w != nil {
			return *w
		}
		return nil
	})
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-rows:
			signal()
		}
	}
}

// FollowAddresses calls changed whenever the host reports an address added or removed or a route
// removed on one of links (hostnet.Interface.WatchAddresses; nil: any link), until ctx ends. A watch that fails is subscribed
// again after watchRetry, and changed is called then too, since changes may have gone unseen. On
// a platform without such notifications it returns at once: the periodic passes find drift there.
func FollowAddresses(ctx context.Context, h hostnet.Watches, links func() []int, changed func()) {
	if h == nil {
		return
	}
	log := ctrl.LoggerFrom(ctx).WithName("address-watch")
	for first := true; ; first = false {
		addrs, err := h.WatchAddresses(ctx, links)
		switch {
		case errors.Is(err, errors.ErrUnsupported):
			log.Info("The host reports no address and route changes; drift there is found by the periodic passes", "reason", err.Error())
			return
		case err != nil:
			log.Info("Watching the host's addresses and routes failed; retrying", "error", err.Error(), "retry", watchRetry.String())
		default:
			if !first {
				changed()
			}
			for range addrs {
				changed()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(watchRetry):
		}
	}
}
