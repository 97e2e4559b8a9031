package auditlog

import (
	"sync"
	"time"
)

// Fairness between owners. Every audited decision belongs to an owner: the namespace whose
// NetworkPolicy rule or default drop decided it, or the ClusterNetworkPolicy whose rule did. Each
// owner has its own share of the queue (Options.OwnerQueue), its own rate (Options.Rate and
// Burst), its own streak of drops beyond it and its own suspension, so that one owner's flood of
// new connections costs the others nothing: only its own decisions are dropped and only its own
// audited flows lose their packet-ins. The node's ceiling (Options.NodeRate) bounds what all
// owners write together; one owner alone never reaches it.

// Owner kinds.
const (
	OwnerNamespace            = "Namespace"
	OwnerClusterNetworkPolicy = "ClusterNetworkPolicy"
)

// Policy kinds of the records: a NetworkPolicy's rule or default drop, a ClusterNetworkPolicy's rule.
const (
	KindNetworkPolicy        = "NetworkPolicy"
	KindClusterNetworkPolicy = "ClusterNetworkPolicy"
)

// Owner is whom audited decisions belong to: a namespace (its NetworkPolicies' rules and its
// isolated Pods' default drops) or a ClusterNetworkPolicy (its rules). The zero Owner stands for
// the owners the log could not track (Options.MaxOwners).
type Owner struct {
	// Kind is OwnerNamespace or OwnerClusterNetworkPolicy.
	Kind string
	Name string
}

// NamespaceOwner is the owner of a namespace's decisions.
func NamespaceOwner(namespace string) Owner { return Owner{Kind: OwnerNamespace, Name: namespace} }

// ClusterPolicyOwner is the owner of a ClusterNetworkPolicy's decisions.
func ClusterPolicyOwner(name string) Owner {
	return Owner{Kind: OwnerClusterNetworkPolicy, Name: name}
}

// String names the owner for logs and Events: "namespace prod", "ClusterNetworkPolicy deny-smb".
func (o Owner) String() string {
	switch o.Kind {
	case OwnerNamespace:
		return "namespace " + o.Name
	case OwnerClusterNetworkPolicy:
		return "ClusterNetworkPolicy " + o.Name
	}
	return "owners not tracked"
}

// Reasons of a Suspension.
const (
	// SuspendedRate: the owner's decisions were dropped beyond its own rate for SuspendAfter.
	SuspendedRate = "rate"
	// SuspendedCeiling: the node's ceiling dropped decisions for SuspendAfter, and the owner sent
	// at least its share (the mean over the owners) of the decisions meanwhile.
	SuspendedCeiling = "ceiling"
	// SuspendedOwners: the whole log (Suspensions.All): a decision came from a new owner while
	// every tracked owner was suspended or queued (Options.MaxOwners).
	SuspendedOwners = "owners"
)

// Suspension says why and until when an owner (or the whole log) is suspended.
type Suspension struct {
	Owner  Owner
	Reason string
	// Since is the first drop of the streak that suspended it, At when it was suspended, Until
	// when it resumes.
	Since, At, Until time.Time
	// Dropped is the decisions dropped over the streak: the owner's beyond its rate
	// (SuspendedRate), or every owner's beyond the node's ceiling (SuspendedCeiling).
	Dropped uint64
}

// Suspensions is what is suspended now.
type Suspensions struct {
	// All is set while every audited flow of the node is suspended (SuspendedOwners).
	All *Suspension
	// Owners are the suspended owners.
	Owners map[Owner]Suspension
}

// Suspended tells whether the owner's audited flows must not send packet-ins.
func (s Suspensions) Suspended(o Owner) bool {
	if s.All != nil {
		return true
	}
	_, ok := s.Owners[o]
	return ok
}

// bucket is a token bucket (golang.org/x/time/rate's arithmetic) that can give a token back; its
// owner's lock guards it.
type bucket struct {
	tokens float64
	last   time.Time
	filled bool
}

// take takes a token at time at if there is one, refilling at rate up to burst.
func (b *bucket) take(at time.Time, rate float64, burst int) bool {
	if !b.filled {
		b.tokens, b.last, b.filled = float64(burst), at, true
	}
	if at.After(b.last) {
		b.tokens = min(float64(burst), b.tokens+at.Sub(b.last).Seconds()*rate)
		b.last = at
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// refund gives back the token just taken.
func (b *bucket) refund() { b.tokens++ }

// ownerState is one owner's share of the log.
type ownerState struct {
	owner  Owner
	bucket bucket
	// queued counts its records in the queue; used is the table's clock when it was last seen.
	queued int
	used   uint64
	// streakStart and lastDrop are the first and last drops beyond its rate of the current
	// streak (drops with no second free of them between), streakDropped their count.
	streakStart, lastDrop time.Time
	streakDropped         uint64
	// suspension is the current one (Until zero: none); summarised the last one not summarised yet.
	suspension, summarised Suspension
	// seen counts its decisions during the node's ceiling streak of epoch.
	epoch, seen uint64
	// missed are its decisions not written since since (zero: none), the start of its summary.
	missed NotLogged
	since  time.Time
}

func (o *ownerState) suspended() bool { return !o.suspension.Until.IsZero() }

// notLogged counts a decision not written for the owner's summary.
func (o *ownerState) notLogged(reason string, at time.Time) {
	if o.missed.total() == 0 {
		o.since = at
	}
	switch reason {
	case DroppedRate:
		o.missed.Rate++
	case DroppedCeiling:
		o.missed.Ceiling++
	case DroppedQueue:
		o.missed.Queue++
	case DroppedSuspended:
		o.missed.Suspended++
	}
}

// ownerTable is what Submit (the OpenFlow reader) and the writer share: the owners, the node's
// ceiling and the suspensions, under one lock held for a few map operations at a time (never while
// writing to the file).
type ownerTable struct {
	mu     sync.Mutex
	owners map[Owner]*ownerState
	clock  uint64
	node   bucket
	// all is the whole log's suspension (Until zero: none); overflow counts the decisions of
	// owners the table could not take.
	all      Suspension
	overflow ownerState
	// suspended counts the suspended owners; anySuspended is what winnet_audit_log_suspended says.
	suspended    int
	anySuspended bool
	// The node's ceiling streak, as an owner's (ownerState), and its epoch (ownerState.seen).
	streakStart, lastDrop time.Time
	streakDropped, epoch  uint64
	// due are the summaries of the owners the table stopped tracking, for the writer.
	due []Summary
}

func (t *ownerTable) init() {
	t.owners = map[Owner]*ownerState{}
}

func (t *ownerTable) allSuspended() bool { return !t.all.Until.IsZero() }

// ownerOf returns the state of owner o, tracking it if new (t.mu held). When the table is full it
// stops tracking the owner least recently seen that is neither suspended nor queued, its
// summary due; when there is none, the whole log is suspended and o's decisions are counted as
// the overflow's.
func (l *Logger) ownerOf(o Owner, at time.Time) *ownerState {
	t := &l.owners
	t.clock++
	if s, ok := t.owners[o]; ok {
		s.used = t.clock
		return s
	}
	if len(t.owners) >= l.opts.MaxOwners {
		var victim *ownerState
		for _, s := range t.owners {
			if !s.suspended() && s.queued == 0 && (victim == nil || s.used < victim.used) {
				victim = s
			}
		}
		if victim == nil {
			if !t.allSuspended() {
				t.all = Suspension{Reason: SuspendedOwners, Since: at, At: at, Until: at.Add(l.opts.Cooldown)}
				t.overflow.summarised = t.all
				l.suspensionsChanged()
			}
			return &t.overflow
		}
		delete(t.owners, victim.owner)
		l.evictions.Add(1)
		if victim.missed.total() > 0 || !victim.summarised.At.IsZero() {
			if len(t.due) < l.opts.MaxOwners {
				t.due = append(t.due, l.summaryOf(victim, at))
			} else {
				t.overflow.add(victim.missed, victim.since)
			}
		}
	}
	s := &ownerState{owner: o, used: t.clock}
	t.owners[o] = s
	return s
}

// add counts another owner's decisions not written into o's.
func (o *ownerState) add(n NotLogged, since time.Time) {
	if o.missed.total() == 0 || since.Before(o.since) {
		o.since = since
	}
	o.missed.Rate += n.Rate
	o.missed.Ceiling += n.Ceiling
	o.missed.Queue += n.Queue
	o.missed.Suspended += n.Suspended
}

// share counts a decision of o in the node's ceiling streak (t.mu held).
func (t *ownerTable) share(o *ownerState) {
	if o.epoch != t.epoch {
		o.epoch, o.seen = t.epoch, 0
	}
	o.seen++
}

// rateDropped follows o's streak of drops beyond its rate and suspends it when the streak lasted
// SuspendAfter (t.mu held).
func (l *Logger) rateDropped(o *ownerState, at time.Time) {
	if o.streakStart.IsZero() || at.Sub(o.lastDrop) > time.Second {
		o.streakStart, o.streakDropped = at, 0
	}
	o.lastDrop = at
	o.streakDropped++
	if l.opts.SuspendAfter < 0 || at.Sub(o.streakStart) < l.opts.SuspendAfter || o == &l.owners.overflow {
		return
	}
	l.suspend(o, Suspension{Owner: o.owner, Reason: SuspendedRate, Since: o.streakStart, At: at, Until: at.Add(l.opts.Cooldown), Dropped: o.streakDropped})
}

// ceilingDropped follows the node's streak of drops beyond its ceiling; when it lasted
// SuspendAfter, the owners that sent at least the mean of the decisions of the streak's owners
// are suspended (t.mu held). Many owners flooding at once reach the ceiling; those that flood the
// most are suspended, the others keep logging.
func (l *Logger) ceilingDropped(at time.Time) {
	t := &l.owners
	if t.streakStart.IsZero() || at.Sub(t.lastDrop) > time.Second {
		t.streakStart, t.streakDropped = at, 0
		t.epoch++
	}
	t.lastDrop = at
	t.streakDropped++
	if l.opts.SuspendAfter < 0 || at.Sub(t.streakStart) < l.opts.SuspendAfter {
		return
	}
	var total, n uint64
	for _, o := range t.owners {
		if o.epoch == t.epoch && o.seen > 0 && !o.suspended() {
			total += o.seen
			n++
		}
	}
	for _, o := range t.owners {
		if o.epoch == t.epoch && o.seen > 0 && !o.suspended() && o.seen*n >= total {
			l.suspend(o, Suspension{Owner: o.owner, Reason: SuspendedCeiling, Since: t.streakStart, At: at, Until: at.Add(l.opts.Cooldown), Dropped: t.streakDropped})
		}
	}
	t.streakStart = time.Time{}
}

// suspend suspends o (t.mu held).
func (l *Logger) suspend(o *ownerState, s Suspension) {
	o.suspension, o.summarised = s, s
	o.streakStart = time.Time{}
	l.owners.suspended++
	suspendedOwnersGauge.Inc()
	l.suspensionsChanged()
}

// suspensionsChanged updates winnet_audit_log_suspended and tells Changes (t.mu held).
func (l *Logger) suspensionsChanged() {
	t := &l.owners
	if any := t.suspended > 0 || t.allSuspended(); any != t.anySuspended {
		t.anySuspended = any
		if any {
			suspendedGauge.Inc()
		} else {
			suspendedGauge.Dec()
		}
	}
	l.notify()
}

// summaryOf is o's summary until then; o starts a new one (t.mu held).
func (l *Logger) summaryOf(o *ownerState, until time.Time) Summary {
	s := Summary{Time: o.since, Until: until, Rule: NotLoggedRule, Node: l.opts.Node, Count: o.missed.total(), NotLogged: o.missed,
		SuspendedAt: o.summarised.At, SuspendedUntil: o.summarised.Until}
	if s.Time.IsZero() || (!s.SuspendedAt.IsZero() && s.SuspendedAt.Before(s.Time)) {
		s.Time = s.SuspendedAt
	}
	switch o.owner.Kind {
	case OwnerNamespace:
		s.PolicyKind, s.Namespace = KindNetworkPolicy, o.owner.Name
	case OwnerClusterNetworkPolicy:
		s.PolicyKind, s.Name = KindClusterNetworkPolicy, o.owner.Name
	}
	o.missed, o.since, o.summarised = NotLogged{}, time.Time{}, Suspension{}
	return s
}

// due tells whether o's summary is to be written at now: when its suspension ended, every
// SummaryInterval while it is not suspended, and at the end (final).
func (l *Logger) due(o *ownerState, now time.Time, final bool) bool {
	if o.missed.total() == 0 && o.summarised.At.IsZero() {
		return false
	}
	return final || (!o.suspended() && (!o.summarised.At.IsZero() || now.Sub(o.since) >= l.opts.SummaryInterval))
}

// summarise ends the suspensions whose cooldown is over by now and writes the summaries due
// (every one when final).
func (l *Logger) summarise(now time.Time, final bool) {
	t := &l.owners
	t.mu.Lock()
	out := t.due
	t.due = nil
	changed := false
	for _, o := range t.owners {
		if o.suspended() && !now.Before(o.suspension.Until) {
			o.suspension = Suspension{}
			t.suspended--
			suspendedOwnersGauge.Dec()
			changed = true
		}
		if l.due(o, now, final) {
			out = append(out, l.summaryOf(o, now))
		}
	}
	if t.allSuspended() && !now.Before(t.all.Until) {
		t.all = Suspension{}
		changed = true
	}
	if !t.allSuspended() && l.due(&t.overflow, now, final) {
		out = append(out, l.summaryOf(&t.overflow, now))
	}
	if changed {
		l.suspensionsChanged()
	}
	t.mu.Unlock()
	for i := range out {
		if l.writeLine(&out[i]) {
			l.summaries.Add(1)
		}
	}
	if len(out) > 0 {
		l.sync()
	}
}

// Suspensions returns what is suspended now.
func (l *Logger) Suspensions() Suspensions {
	t := &l.owners
	t.mu.Lock()
	defer t.mu.Unlock()
	s := Suspensions{Owners: map[Owner]Suspension{}}
	if t.allSuspended() {
		all := t.all
		s.All = &all
	}
	for o, st := range t.owners {
		if st.suspended() {
			s.Owners[o] = st.suspension
		}
	}
	return s
}

// Owners is how many owners the log tracks now.
func (l *Logger) Owners() int {
	l.owners.mu.Lock()
	defer l.owners.mu.Unlock()
	return len(l.owners.owners)
}
