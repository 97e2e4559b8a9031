package cluster

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/egress"
)

// leaseSight is what winnet-controller saw of a node's Egress Lease: when it last saw it renewed (by
// its own clock: the agents' clocks are not compared with it) and the Lease's duration, the fencing
// bound F.
type leaseSight struct {
	seen     time.Time
	duration time.Duration
}

// expires is when the Lease expires: F after it was last seen renewed.
func (s leaseSight) expires() time.Time { return s.seen.Add(s.duration) }

// released is when the node has surely given up its egress IPs: F after the Lease expired. The agent
// gives them up F after the start of its last confirmed renewal, which was before the controller saw it;
// the second F leaves the agent that much time to do it.
func (s leaseSight) released() time.Time { return s.seen.Add(2 * s.duration) }

// leaseTracker records when each node's Egress Lease was seen renewed, from the watch events of
// Leases in winnet's namespace.
type leaseTracker struct {
	// now is the clock (time.Now when nil).
	now func() time.Time

	mu     sync.Mutex
	sights map[string]leaseSight
}

func (t *leaseTracker) clock() time.Time {
	if t.now != nil {
		return t.now()
	}
	return time.Now()
}

// nodeOf is the node of an Egress Lease, "" for another Lease.
func nodeOf(l *coordinationv1.Lease) string {
	node, ok := strings.CutPrefix(l.Name, egress.LeasePrefix)
	if !ok || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != node {
		return ""
	}
	return node
}

// saw records that the node's Lease was renewed now; it reports whether it was expired or unknown
// before (then a pass must look: the node may be eligible again).
func (t *leaseTracker) saw(l *coordinationv1.Lease) (wasExpired bool) {
	node := nodeOf(l)
	if node == "" {
		return false
	}
	var d time.Duration
	if l.Spec.LeaseDurationSeconds != nil {
		d = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	now := t.clock()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sights == nil {
		t.sights = map[string]leaseSight{}
	}
	old, ok := t.sights[node]
	t.sights[node] = leaseSight{seen: now, duration: d}
	return !ok || !now.Before(old.expires())
}

// forget drops a deleted Lease.
func (t *leaseTracker) forget(l *coordinationv1.Lease) {
	if node := nodeOf(l); node != "" {
		t.mu.Lock()
		delete(t.sights, node)
		t.mu.Unlock()
	}
}

// snapshot returns the sights and the time they are judged at.
func (t *leaseTracker) snapshot() (map[string]leaseSight, time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]leaseSight, len(t.sights))
	for k, v := range t.sights {
		out[k] = v
	}
	return out, t.clock()
}

// handler records every Lease event; it queues a pass only when a Lease appears, goes, or is renewed
// after it expired: the passes that judge expiries are timed by Reconcile (RequeueAfter), so that the
// agents' renewals every few seconds do not each cost a pass over every Egress.
func (t *leaseTracker) handler() handler.TypedEventHandler[*coordinationv1.Lease, egressPass] {
	add := func(q workqueue.TypedRateLimitingInterface[egressPass]) { q.Add(egressPass{}) }
	return handler.TypedFuncs[*coordinationv1.Lease, egressPass]{
		CreateFunc: func(_ context.Context, e event.TypedCreateEvent[*coordinationv1.Lease], q workqueue.TypedRateLimitingInterface[egressPass]) {
			if t.saw(e.Object) {
				add(q)
			}
		},
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[*coordinationv1.Lease], q workqueue.TypedRateLimitingInterface[egressPass]) {
			if t.saw(e.ObjectNew) {
				add(q)
			}
		},
		DeleteFunc: func(_ context.Context, e event.TypedDeleteEvent[*coordinationv1.Lease], q workqueue.TypedRateLimitingInterface[egressPass]) {
			t.forget(e.Object)
			add(q)
		},
	}
}

// leaseExpired reports whether the node's Lease is expired or was never seen.
func leaseExpired(sights map[string]leaseSight, node string, now time.Time) bool {
	s, ok := sights[node]
	return !ok || !now.Before(s.expires())
}

// fenceMoves holds back every Egress that the decisions move away from the node holding it until
// that node has surely given the IP up: its Lease valid and its agent reporting the IP no longer
// realised after it saw the Egress Releasing, or its Lease expired for F again, or no Lease (an agent
// that never renewed one holds nothing). Meanwhile the Egress is Releasing: status.node still names
// the old node, Assigned is False, no node holds it. It returns how soon a pass must look again.
func fenceMoves(egresses []networkv1alpha1.Egress, decisions map[string]egress.Decision, realised map[string]map[netip.Addr]bool,
	sights map[string]leaseSight, now time.Time) time.Duration {
	var next time.Duration
	soon := func(at time.Time) {
		if d := at.Sub(now) + time.Millisecond; d > 0 && (next == 0 || d < next) {
			next = d
		}
	}
	for i := range egresses {
		e := &egresses[i]
		old := e.Status.Node
		assigned := meta.FindStatusCondition(e.Status.Conditions, networkv1alpha1.AssignedCondition)
		if old == "" || assigned == nil {
			continue
		}
		releasing := assigned.Status != "True" && assigned.Reason == networkv1alpha1.EgressReleasingReason
		if assigned.Status != "True" && !releasing {
			continue
		}
		d := decisions[e.Name]
		if d.Node == old {
			continue
		}
		s, hasLease := sights[old]
		ip, _ := netip.ParseAddr(string(e.Spec.EgressIP))
		switch {
		case !hasLease:
			continue
		case !now.Before(s.released()):
			continue
		case now.Before(s.expires()) && releasing && !realised[old][ip]:
			continue
		}
		why := fmt.Sprintf("its agent has not reported it released; its Egress Lease is renewed (winnet-controller saw it %s ago)", now.Sub(s.seen).Round(time.Second))
		if !now.Before(s.expires()) {
			why = fmt.Sprintf("its Egress Lease expired %s ago; the IP moves %s after the expiry (the Lease's duration), when the node has surely given it up",
				now.Sub(s.expires()).Round(time.Second), s.duration)
		}
		soon(s.released())
		target := "no node"
		if d.Node != "" {
			target = "node " + d.Node
		}
		decisions[e.Name] = egress.Decision{Node: old, Releasing: true, Reason: networkv1alpha1.EgressReleasingReason,
			Message: fmt.Sprintf("egressIP %s moves from node %s to %s once node %s has surely given it up: %s", e.Spec.EgressIP, old, target, old, why)}
	}
	for _, s := range sights {
		if now.Before(s.expires()) {
			soon(s.expires())
		}
	}
	return next
}

// newEgressSettle is how long winnet-controller waits before it places an Egress it has not placed
// yet while a node that could hold it has no renewed Lease: an agent renews its Lease only while its
// node may hold an Egress, so when the first such Egress appears every eligible agent starts renewing
// at once, and placing the Egress on the first Lease seen would neither spread Egresses nor follow
// the order the spreading promises. Agents renew as soon as they see the Egress (a watch event and
// one write); 2 s is the default renewal interval.
const newEgressSettle = 2 * time.Second

// settling holds back the decisions of the Egresses not placed yet (no status.node) that winnet-controller
// first saw less than newEgressSettle ago while some node would be eligible for them but for its
// Lease. It records when it first saw each Egress (and forgets the others) in firstSeen, and returns
// the Egresses held back and how soon a pass must look again.
func settling(compiled []egress.Compiled, c egress.Cluster, firstSeen map[string]time.Time, now time.Time) (map[string]bool, time.Duration) {
	held := map[string]bool{}
	var recheck time.Duration
	live := map[string]bool{}
	for _, e := range compiled {
		name := e.Egress.Name
		live[name] = true
		if e.Egress.Status.Node != "" {
			continue
		}
		seen, ok := firstSeen[name]
		if !ok {
			seen = now
			firstSeen[name] = now
		}
		left := seen.Add(newEgressSettle).Sub(now)
		if left <= 0 {
			continue
		}
		ip, err := netip.ParseAddr(string(e.Egress.Spec.EgressIP))
		if err != nil {
			continue
		}
		for _, n := range c.Nodes {
			if !n.LeaseExpired {
				continue
			}
			n.LeaseExpired = false
			if egress.MayHold(e, ip, n) {
				held[name] = true
				if recheck == 0 || left < recheck {
					recheck = left
				}
				break
			}
		}
	}
	for name := range firstSeen {
		if !live[name] {
			delete(firstSeen, name)
		}
	}
	return held, recheck
}
