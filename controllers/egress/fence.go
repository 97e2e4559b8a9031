package egress

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/winnet-io/winnet/internal/egress"
)

// Defaults of the fencing durations (the agent's flags --egress-lease-duration and
// --egress-lease-renew-interval; docs/egress.md says why).
const (
	// DefaultLeaseDuration is the fencing bound F: a holder that has not confirmed its Lease for this
	// long removes its egress IPs, and winnet-controller, which finds a Lease expired when it saw no
	// renewal for this long, moves an Egress only once the Lease has been expired for this long again.
	DefaultLeaseDuration = 10 * time.Second
	// DefaultLeaseRenewInterval is how often the agent renews its Lease: five attempts per bound, so
	// that one or two failed requests (an API server restarting) do not drop an egress IP.
	DefaultLeaseRenewInterval = 2 * time.Second
)

// Fence renews the node's Egress Lease and tells whether the node may hold egress IPs: only while
// its last renewal confirmed by the API server started less than Duration ago. The renewal's start,
// not its end, counts: winnet-controller saw the renewal at some time after it started, so the agent
// gives up its IPs no later than Duration after the controller's last sight of the Lease, and the
// controller waits that long again after the Lease expired before it lets another node take an IP.
//
// The agent renews its Lease only while the node may hold an Egress (SetWanted: an Egress is assigned
// to it, or its IP lies on the node's uplink subnet and its nodeSelector selects the node): a node is
// eligible for an Egress only while its Lease is renewed, and a node no Egress can use writes nothing
// (a cluster without Egresses pays no Lease writes).
type Fence struct {
	// Reader reads the Lease from the API server (not a cache: the agent may not list Leases).
	Reader client.Reader
	// Writer creates and updates the Lease.
	Writer    client.Writer
	Namespace string
	NodeName  string
	// Duration is the fencing bound F, also written into the Lease (spec.leaseDurationSeconds), from
	// which winnet-controller reads it; RenewInterval how often the agent renews.
	Duration, RenewInterval time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time

	mu sync.Mutex
	// confirmedUntil is the start of the last renewal the API server confirmed, plus Duration.
	confirmedUntil time.Time
	// tried: a renewal has completed, confirmed or not.
	tried bool
	// changed wakes the Egress reconciler when the fence starts or stops allowing IPs.
	changed chan event.GenericEvent
	// wanted: the node may hold an Egress, and the Lease is renewed (SetWanted); wake tells the
	// renewal loop that it became wanted (renew at once, not at the next tick).
	wanted bool
	wake   chan struct{}
}

// SetWanted says whether the node may hold an Egress, which the Egress reconciler finds at each pass.
// While it may not, the Lease is not renewed (it expires, and winnet-controller assigns the node
// nothing) and the fence allows no IP; the fence has then decided (State's tried), as the node must
// hold nothing. When it becomes wanted, the Lease is renewed at once.
func (f *Fence) SetWanted(wanted bool) {
	f.mu.Lock()
	became := wanted && !f.wanted
	f.wanted = wanted
	if !wanted {
		f.tried = true
	}
	wake := f.wakeChan()
	f.mu.Unlock()
	if became {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
}

// wakeChan returns wake, made at first use (f.mu held).
func (f *Fence) wakeChan() chan struct{} {
	if f.wake == nil {
		f.wake = make(chan struct{}, 1)
	}
	return f.wake
}

func (f *Fence) isWanted() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.wanted
}

func (f *Fence) now() time.Time {
	if f.Now != nil {
		return f.Now()
	}
	return time.Now()
}

// Changed delivers an event when the node may hold egress IPs again, or the first time it may.
func (f *Fence) Changed() <-chan event.GenericEvent {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.changed == nil {
		f.changed = make(chan event.GenericEvent, 1)
	}
	return f.changed
}

// State tells, at now, whether the node may hold egress IPs and until when (valid), or whether no
// renewal has completed yet (tried false: the agent has just started and decides nothing yet).
func (f *Fence) State(now time.Time) (tried, valid bool, until time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tried, now.Before(f.confirmedUntil), f.confirmedUntil
}

// NeedLeaderElection: every agent renews its own Lease.
func (f *Fence) NeedLeaderElection() bool { return false }

// Start renews the Lease every RenewInterval while it is wanted, until ctx ends.
func (f *Fence) Start(ctx context.Context) error {
	f.Changed()
	f.mu.Lock()
	wake := f.wakeChan()
	f.mu.Unlock()
	t := time.NewTicker(f.RenewInterval)
	defer t.Stop()
	for {
		if f.isWanted() {
			f.renewOnce(ctx)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-wake:
		}
	}
}

// renewOnce renews the Lease once, bounded by RenewInterval (a hung API server must not hold the
// fence open), and records the outcome.
func (f *Fence) renewOnce(ctx context.Context) {
	start := f.now()
	rctx, cancel := context.WithTimeout(ctx, f.RenewInterval)
	defer cancel()
	err := f.Renew(rctx, start)
	f.mu.Lock()
	wasValid := f.tried && f.now().Before(f.confirmedUntil)
	f.tried = true
	if err == nil {
		f.confirmedUntil = start.Add(f.Duration)
	}
	nowValid := f.now().Before(f.confirmedUntil)
	ch := f.changed
	f.mu.Unlock()
	if err != nil && ctx.Err() == nil {
		ctrl.LoggerFrom(ctx).Info("Cannot renew the node's Egress Lease", "lease", f.Namespace+"/"+egress.LeaseName(f.NodeName), "error", err.Error())
	}
	if nowValid != wasValid && ch != nil {
		select {
		case ch <- event.GenericEvent{Object: &coordinationv1.Lease{}}:
		default:
		}
	}
}

// Renew writes the node's Lease with renewTime at: it creates it when it is missing.
func (f *Fence) Renew(ctx context.Context, at time.Time) error {
	name := egress.LeaseName(f.NodeName)
	lease := &coordinationv1.Lease{}
	err := f.Reader.Get(ctx, client.ObjectKey{Namespace: f.Namespace, Name: name}, lease)
	if apierrors.IsNotFound(err) {
		lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: f.Namespace, Name: name}}
		f.fill(lease, at)
		if err := f.Writer.Create(ctx, lease); err != nil {
			return fmt.Errorf("creating Lease %s/%s: %w", f.Namespace, name, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading Lease %s/%s: %w", f.Namespace, name, err)
	}
	f.fill(lease, at)
	if err := f.Writer.Update(ctx, lease); err != nil {
		return fmt.Errorf("renewing Lease %s/%s: %w", f.Namespace, name, err)
	}
	return nil
}

// fill sets what the Lease says: this node holds it, renewed at, for Duration.
func (f *Fence) fill(l *coordinationv1.Lease, at time.Time) {
	l.Spec.HolderIdentity = ptr.To(f.NodeName)
	l.Spec.LeaseDurationSeconds = ptr.To(int32((f.Duration + time.Second - 1) / time.Second))
	l.Spec.RenewTime = &metav1.MicroTime{Time: at}
}
