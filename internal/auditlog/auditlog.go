package auditlog

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/winnet-io/winnet/internal/securefs"
)

// FileName is the log's name in its directory; rotated files are FileName.1 (the newest) to
// FileName.<MaxFiles>.
const FileName = "winnet-audit.log"

// Defaults of Options.
const (
	DefaultMaxSize  = 100 << 20
	DefaultMaxFiles = 5
	// DefaultRate and DefaultBurst are each owner's (a namespace's, a ClusterNetworkPolicy's).
	DefaultRate  = 100
	DefaultBurst = 500
	// DefaultNodeFactor: the node's ceiling is this many owners' rate and burst (Options.NodeRate).
	DefaultNodeFactor   = 5
	DefaultWindow       = time.Second
	DefaultQueue        = 4096
	DefaultSuspendAfter = 30 * time.Second
	DefaultCooldown     = 5 * time.Minute
	// DefaultMaxOwners is how many owners the log tracks at once (Options.MaxOwners).
	DefaultMaxOwners = 1024
	// DefaultSummaryInterval is how often an owner's decisions not written are summarised while
	// it is not suspended (Options.SummaryInterval).
	DefaultSummaryInterval = time.Minute
)

// Reasons of winnet_audit_log_dropped_total, and of a summary line's notLogged.
const (
	// DroppedRate: the line would have gone beyond its owner's rate (Options.Rate and Burst).
	DroppedRate = "rate"
	// DroppedCeiling: the line was within its owner's rate but beyond the node's (Options.NodeRate
	// and NodeBurst), which many owners logging at once reach.
	DroppedCeiling = "ceiling"
	// DroppedSuspended: the decision's owner (or the whole log) was suspended; it reached the
	// agent before its flows lost their packet-ins.
	DroppedSuspended = "suspended"
	// DroppedQueue: the queue between the OpenFlow reader and the writer was full, or held its
	// owner's share (Options.OwnerQueue).
	DroppedQueue = "queue"
	// DroppedWrite: the file could not be written (or rotated, or opened again).
	DroppedWrite = "write"
	// DroppedUnnamed: the packet-in named no rule the agent knows (a frame it cannot read, or
	// a flow of a pass whose index was not recorded yet).
	DroppedUnnamed = "unnamed"
)

// ActionDrop is the action of an isolated Pod's default drop (rule DefaultDenyRule): NetworkPolicy
// has no deny rule, the packet matched none of the rules that isolate the Pod.
const ActionDrop = "Drop"

// DefaultDenyRule is the rule of a default drop.
const DefaultDenyRule = "default-deny"

// NotLoggedRule is the rule of a summary line (Summary): what an owner's rules decided that was
// not written.
const NotLoggedRule = "not-logged"

// MaxIsolatedBy is how many policies a default drop's line names in isolatedBy (the first in
// name order); isolatedByMore counts the others.
const MaxIsolatedBy = 16

var (
	linesTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "winnet", Subsystem: "audit_log", Name: "lines_total",
		Help: "Lines the agent wrote to its audit log (winnet-audit.log): one per 5-tuple and rule in each deduplication window (summary lines not included).",
	})
	droppedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "winnet", Subsystem: "audit_log", Name: "dropped_total",
		Help: "Audited decisions the agent did not log, by reason: rate (beyond its namespace's or ClusterNetworkPolicy's --audit-log-rate), ceiling (beyond the node's --audit-log-node-rate), suspended (its owner's flows were being suspended), queue (the writer fell behind), write (the file could not be written), unnamed (no rule the agent knows).",
	}, []string{"reason"})
	rotationFailuresTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "winnet", Subsystem: "audit_log", Name: "rotation_failures_total",
		Help: "Rotations of the audit log that failed (on Windows, a reader holding the file without sharing its deletion): the file grows beyond its size until a retry a minute later succeeds.",
	})
	suspendedGauge = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "winnet", Subsystem: "audit_log", Name: "suspended",
		Help: "1 while some audited flows of the node send nothing to the agent: a namespace or ClusterNetworkPolicy whose decisions were dropped beyond its rate for --audit-log-suspend-after is suspended for --audit-log-cooldown (winnet_audit_log_suspended_owners counts them).",
	})
	suspendedOwnersGauge = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "winnet", Subsystem: "audit_log", Name: "suspended_owners",
		Help: "Namespaces and ClusterNetworkPolicies whose audited flows send nothing to the agent now (suspended).",
	})
	packetInsTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "winnet", Subsystem: "audit_log", Name: "packet_ins_total",
		Help: "Packet-ins of audited policy decisions the agent received (one per audited new connection, retransmissions of a dropped one included).",
	})
)

func init() {
	ctrlmetrics.Registry.MustRegister(linesTotal, droppedTotal, packetInsTotal, suspendedGauge, suspendedOwnersGauge, rotationFailuresTotal)
}

// Record is one line of the log. For a default drop Name is "", Rule DefaultDenyRule, Action
// ActionDrop, IsolatedBy the first MaxIsolatedBy (by name) of the policies that isolate the Pod in
// that direction and IsolatedByMore the number of the others. IsolatedBy may be shared between
// records: it is never changed.
type Record struct {
	Time           time.Time `json:"time"`
	PolicyKind     string    `json:"policyKind"`
	Namespace      string    `json:"namespace"`
	Name           string    `json:"name"`
	Tier           string    `json:"tier,omitempty"`
	Rule           string    `json:"rule"`
	Direction      string    `json:"direction"`
	Action         string    `json:"action"`
	IsolatedBy     []string  `json:"isolatedBy,omitempty"`
	IsolatedByMore int       `json:"isolatedByMore,omitempty"`
	SrcIP          string    `json:"srcIP"`
	DstIP          string    `json:"dstIP"`
	Protocol       string    `json:"protocol"`
	SrcPort        uint16    `json:"srcPort"`
	DstPort        uint16    `json:"dstPort"`
	Node           string    `json:"node"`
	// Count is how many packets of this 5-tuple the rule decided within the deduplication window
	// that starts at Time (a dropped connection's retransmissions, a burst of datagrams).
	Count int `json:"count"`
}

// Owner is the owner of the record's decision.
func (r *Record) Owner() Owner {
	if r.PolicyKind == KindClusterNetworkPolicy {
		return Owner{Kind: OwnerClusterNetworkPolicy, Name: r.Name}
	}
	return Owner{Kind: OwnerNamespace, Name: r.Namespace}
}

// Summary is a line that says how many decisions of one owner were not written, between Time and
// Until, by reason. It is written when the owner's suspension ends, every SummaryInterval while it
// is not suspended, when the log stops tracking the owner and when the log closes; never when
// everything was written. An owner's NetworkPolicies (and its Pods' default drops) have
// PolicyKind "NetworkPolicy", Namespace the namespace and Name ""; a ClusterNetworkPolicy has its
// Name; the decisions of owners the log could not track (Suspensions.All) have neither.
type Summary struct {
	Time       time.Time `json:"time"`
	Until      time.Time `json:"until"`
	PolicyKind string    `json:"policyKind"`
	Namespace  string    `json:"namespace"`
	Name       string    `json:"name"`
	// Rule is NotLoggedRule.
	Rule string `json:"rule"`
	Node string `json:"node"`
	// Count is the decisions not written: the sum of NotLogged.
	Count     uint64    `json:"count"`
	NotLogged NotLogged `json:"notLogged"`
	// SuspendedAt and SuspendedUntil are the owner's suspension within the window, if any: its
	// audited flows sent nothing to the agent meanwhile, so what they decided then is not counted
	// here (the per-rule counter winnet_policy_rule_connections_total counts it).
	SuspendedAt    time.Time `json:"suspendedAt,omitzero"`
	SuspendedUntil time.Time `json:"suspendedUntil,omitzero"`
}

// NotLogged counts decisions not written, by reason (Dropped*).
type NotLogged struct {
	Rate      uint64 `json:"rate"`
	Ceiling   uint64 `json:"ceiling"`
	Queue     uint64 `json:"queue"`
	Suspended uint64 `json:"suspended"`
}

func (n NotLogged) total() uint64 { return n.Rate + n.Ceiling + n.Queue + n.Suspended }

// key is what deduplicates: the 5-tuple and the rule.
type key struct {
	kind, namespace, name, tier, rule, direction, action string
	src, dst, proto                                      string
	srcPort, dstPort                                     uint16
}

func (r *Record) key() key {
	return key{r.PolicyKind, r.Namespace, r.Name, r.Tier, r.Rule, r.Direction, r.Action, r.SrcIP, r.DstIP, r.Protocol, r.SrcPort, r.DstPort}
}

// Options configure a Logger.
type Options struct {
	// Dir is the log's directory: created private (securefs.Private) or checked; one owned by
	// someone other than the administrators is refused.
	Dir string
	// Node is written in every line.
	Node string
	// MaxSize is the size in bytes beyond which the file is rotated; MaxFiles the rotated files
	// kept (0: the defaults).
	MaxSize  int64
	MaxFiles int
	// Rate and Burst limit the lines per second each owner (a namespace, a ClusterNetworkPolicy)
	// writes: a token per new 5-tuple and rule (0: the defaults).
	Rate  float64
	Burst int
	// NodeRate and NodeBurst limit the lines per second the node writes, all owners together: a
	// line takes a token of its owner and one of the node (0: DefaultNodeFactor times Rate and
	// Burst). Above Rate, one owner alone never reaches it.
	NodeRate  float64
	NodeBurst int
	// Window is the deduplication window: the packets of one 5-tuple and rule within it are one
	// line with their count, written when it ends (0: DefaultWindow).
	Window time.Duration
	// Queue is the capacity of the queue from the OpenFlow reader to the writer (0: DefaultQueue),
	// OwnerQueue the records one owner may hold in it (0: an eighth of Queue).
	Queue, OwnerQueue int
	// SuspendAfter and Cooldown protect the switch: when an owner's decisions were dropped beyond
	// its rate with no second free of such drops for SuspendAfter, the owner is suspended for
	// Cooldown (Suspensions), and the agent takes the packet-ins out of its audited flows
	// meanwhile; when the node's ceiling dropped decisions so for SuspendAfter, the owners that
	// sent at least their share (the mean) of the decisions meanwhile are (0: the defaults; a
	// negative SuspendAfter never suspends).
	SuspendAfter, Cooldown time.Duration
	// MaxOwners bounds the owners tracked at once (0: DefaultMaxOwners). A new one takes the place
	// of the one least recently seen that is neither suspended nor queued (its summary written
	// first); when every one is, the whole log is suspended (Suspensions.All) for Cooldown.
	MaxOwners int
	// SummaryInterval is how often an owner that is not suspended has its decisions not written
	// summarised (0: DefaultSummaryInterval).
	SummaryInterval time.Duration
}

func (o Options) withDefaults() Options {
	if o.MaxSize <= 0 {
		o.MaxSize = DefaultMaxSize
	}
	if o.MaxFiles <= 0 {
		o.MaxFiles = DefaultMaxFiles
	}
	if o.Rate <= 0 {
		o.Rate = DefaultRate
	}
	if o.Burst <= 0 {
		o.Burst = DefaultBurst
	}
	if o.NodeRate <= 0 {
		o.NodeRate = DefaultNodeFactor * o.Rate
	}
	if o.NodeBurst <= 0 {
		o.NodeBurst = DefaultNodeFactor * o.Burst
	}
	if o.Window <= 0 {
		o.Window = DefaultWindow
	}
	if o.Queue <= 0 {
		o.Queue = DefaultQueue
	}
	if o.OwnerQueue <= 0 {
		o.OwnerQueue = max(o.Queue/8, 1)
	}
	if o.SuspendAfter == 0 {
		o.SuspendAfter = DefaultSuspendAfter
	}
	if o.Cooldown <= 0 {
		o.Cooldown = DefaultCooldown
	}
	if o.MaxOwners <= 0 {
		o.MaxOwners = DefaultMaxOwners
	}
	if o.SummaryInterval <= 0 {
		o.SummaryInterval = DefaultSummaryInterval
	}
	return o
}

// Stats are a Logger's own counts (the Prometheus counters add up every Logger of the process).
type Stats struct {
	PacketIns, Lines                          uint64
	DroppedRate, DroppedQueue, DroppedUnnamed uint64
	DroppedWrite, Rotations, RotationFailures uint64
	DroppedCeiling, DroppedSuspended          uint64
	// Summaries are the summary lines written; Evictions the owners the log stopped tracking to
	// make room for another.
	Summaries, Evictions uint64
}

// Logger is the audit log of one node.
type Logger struct {
	opts  Options
	path  string
	queue chan Record

	packetIns, lines, droppedRate, droppedQueue, droppedWrite, droppedUnnamed, rotations, rotationFailures atomic.Uint64
	droppedCeiling, droppedSuspended, summaries, evictions                                                 atomic.Uint64

	// The writer's own state (Run's goroutine).
	file    *os.File
	w       *bufio.Writer
	size    int64
	pending map[key]*Record
	order   []key
	// rotateAfter: a rotation failed; the next is not tried before then.
	rotateAfter time.Time

	mu      sync.Mutex
	lastErr error

	// owners is the fairness between owners (owners.go), shared by Submit and the writer.
	owners  ownerTable
	changes chan struct{}
}

// Open prepares the log: the directory (created or checked, securefs.Private) and the file
// (appended to, or created; a link or a file of another owner is refused). Nothing is written
// until Run.
func Open(opts Options) (*Logger, error) {
	opts = opts.withDefaults()
	if opts.Dir == "" {
		return nil, errors.New("the audit log needs a directory")
	}
	if _, err := securefs.EnsureDir(opts.Dir, securefs.Private); err != nil {
		return nil, fmt.Errorf("preparing the audit log directory: %w", err)
	}
	l := &Logger{opts: opts, path: filepath.Join(opts.Dir, FileName), queue: make(chan Record, opts.Queue),
		pending: map[key]*Record{}, changes: make(chan struct{}, 1)}
	l.owners.init()
	if err := l.open(); err != nil {
		return nil, err
	}
	return l, nil
}

// Path is the log file's path.
func (l *Logger) Path() string { return l.path }

func (l *Logger) open() error {
	f, err := securefs.OpenAppend(l.path, securefs.Private)
	if err != nil {
		return fmt.Errorf("opening the audit log: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("opening the audit log: %w", err)
	}
	l.file, l.w, l.size = f, bufio.NewWriterSize(f, 64<<10), fi.Size()
	return nil
}

// Submit queues a decision; it never blocks. Time is when the packet was seen; Node and Count are
// set by the logger. It returns false when the decision is not queued: its owner is suspended
// (DroppedSuspended), or the queue is full or holds the owner's share (DroppedQueue).
func (l *Logger) Submit(r Record) bool {
	l.packetIns.Add(1)
	packetInsTotal.Inc()
	t := &l.owners
	t.mu.Lock()
	o := l.ownerOf(r.Owner(), r.Time)
	var reason string
	switch {
	case t.allSuspended() || o.suspended():
		reason = DroppedSuspended
	case o.queued >= l.opts.OwnerQueue:
		reason = DroppedQueue
	default:
		select {
		case l.queue <- r:
			o.queued++
		default:
			reason = DroppedQueue
		}
	}
	if reason != "" {
		o.notLogged(reason, r.Time)
	}
	t.mu.Unlock()
	if reason != "" {
		l.dropped(reason)
		return false
	}
	return true
}

// dropped counts a decision not logged.
func (l *Logger) dropped(reason string) {
	switch reason {
	case DroppedRate:
		l.droppedRate.Add(1)
	case DroppedCeiling:
		l.droppedCeiling.Add(1)
	case DroppedSuspended:
		l.droppedSuspended.Add(1)
	case DroppedQueue:
		l.droppedQueue.Add(1)
	}
	droppedTotal.WithLabelValues(reason).Inc()
}

// Unnamed counts a packet-in that named no rule (DroppedUnnamed).
func (l *Logger) Unnamed() {
	l.packetIns.Add(1)
	packetInsTotal.Inc()
	l.droppedUnnamed.Add(1)
	droppedTotal.WithLabelValues(DroppedUnnamed).Inc()
}

// Stats returns the logger's counts.
func (l *Logger) Stats() Stats {
	return Stats{PacketIns: l.packetIns.Load(), Lines: l.lines.Load(), DroppedRate: l.droppedRate.Load(),
		DroppedQueue: l.droppedQueue.Load(), DroppedUnnamed: l.droppedUnnamed.Load(), DroppedWrite: l.droppedWrite.Load(), Rotations: l.rotations.Load(),
		RotationFailures: l.rotationFailures.Load(), DroppedCeiling: l.droppedCeiling.Load(), DroppedSuspended: l.droppedSuspended.Load(),
		Summaries: l.summaries.Load(), Evictions: l.evictions.Load()}
}

// Err is the last write error, nil once a write succeeds again.
func (l *Logger) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastErr
}

// Run writes the queued decisions until ctx ends, then writes what is pending and every summary
// due, and closes the file. It is the only writer.
func (l *Logger) Run(ctx context.Context) {
	tick := time.NewTicker(max(l.opts.Window/4, 10*time.Millisecond))
	defer tick.Stop()
	defer l.close()
	for {
		select {
		case <-ctx.Done():
			for {
				select {
				case r := <-l.queue:
					l.take(r)
				default:
					l.flush(time.Time{})
					l.summarise(time.Now(), true)
					return
				}
			}
		case r := <-l.queue:
			l.take(r)
		case now := <-tick.C:
			l.flush(now)
			l.summarise(now, false)
		}
	}
}

// take counts a decision into its window, or opens one if its owner's rate and the node's allow a
// line.
func (l *Logger) take(r Record) {
	t := &l.owners
	t.mu.Lock()
	o := l.ownerOf(r.Owner(), r.Time)
	if o.queued > 0 {
		o.queued--
	}
	t.share(o)
	k := r.key()
	if p, ok := l.pending[k]; ok {
		t.mu.Unlock()
		p.Count++
		return
	}
	reason := ""
	switch {
	case t.allSuspended() || o.suspended():
		reason = DroppedSuspended
	case !o.bucket.take(r.Time, l.opts.Rate, l.opts.Burst):
		reason = DroppedRate
		l.rateDropped(o, r.Time)
	case !t.node.take(r.Time, l.opts.NodeRate, l.opts.NodeBurst):
		o.bucket.refund()
		reason = DroppedCeiling
		l.ceilingDropped(r.Time)
	}
	if reason != "" {
		o.notLogged(reason, r.Time)
	}
	t.mu.Unlock()
	if reason != "" {
		l.dropped(reason)
		return
	}
	r.Node, r.Count = l.opts.Node, 1
	l.pending[k] = &r
	l.order = append(l.order, k)
}

func (l *Logger) notify() {
	select {
	case l.changes <- struct{}{}:
	default:
	}
}

// Changes receives a value when an owner (or the whole log) is suspended or resumed (coalesced);
// one reader.
func (l *Logger) Changes() <-chan struct{} { return l.changes }

// flush writes the windows that ended by now (every one when now is zero), oldest first.
func (l *Logger) flush(now time.Time) {
	n := 0
	for _, k := range l.order {
		r := l.pending[k]
		if !now.IsZero() && now.Sub(r.Time) < l.opts.Window {
			break // windows open in order: the later ones have not ended either
		}
		if l.writeLine(r) {
			l.lines.Add(1)
			linesTotal.Inc()
		}
		delete(l.pending, k)
		n++
	}
	l.order = l.order[n:]
	if n > 0 {
		l.sync()
	}
}

// writeLine writes v as one JSON line; it tells whether it was written.
func (l *Logger) writeLine(v any) bool {
	b, err := json.Marshal(v)
	if err == nil {
		b = append(b, '\n')
		err = l.rotateFor(int64(len(b)))
	}
	if err == nil {
		_, err = l.w.Write(b)
	}
	if err != nil {
		l.failed(err)
		return false
	}
	l.size += int64(len(b))
	return true
}

func (l *Logger) sync() {
	if l.w == nil {
		return
	}
	if err := l.w.Flush(); err != nil {
		l.failed(err)
		return
	}
	l.mu.Lock()
	l.lastErr = nil
	l.mu.Unlock()
}

func (l *Logger) failed(err error) {
	l.droppedWrite.Add(1)
	droppedTotal.WithLabelValues(DroppedWrite).Inc()
	l.mu.Lock()
	l.lastErr = err
	l.mu.Unlock()
	// Start again from a fresh handle on the next line: the file may have been removed or
	// replaced under the agent.
	if l.file != nil {
		l.file.Close()
	}
	l.file, l.w = nil, nil
}

// rotateRetry is how long the log grows beyond MaxSize after a rotation failed (on Windows, a
// reader that holds the file without FILE_SHARE_DELETE blocks its rename) before trying again:
// the lines go on being written meanwhile.
const rotateRetry = time.Minute

// rotateFor makes room for n more bytes: beyond MaxSize the file becomes FileName.1 (the older
// ones move up, the oldest beyond MaxFiles goes) and a new one is created. A missing handle (a
// failed write) is opened again. A rotation that fails is counted as one failed write and the file
// is opened again as it is and the line written, the failure counted
// (winnet_audit_log_rotation_failures_total), rotation retried after rotateRetry.
func (l *Logger) rotateFor(n int64) error {
	over := l.size > 0 && l.size+n > l.opts.MaxSize && !time.Now().Before(l.rotateAfter)
	if l.w != nil && !over {
		return nil
	}
	if l.w != nil {
		if err := l.w.Flush(); err != nil {
			return err
		}
		if err := l.file.Close(); err != nil {
			return err
		}
		l.file, l.w = nil, nil
		if err := l.shift(); err != nil {
			l.rotateAfter = time.Now().Add(rotateRetry)
			l.rotationFailures.Add(1)
			rotationFailuresTotal.Inc()
			return l.open()
		}
		l.rotations.Add(1)
	}
	return l.open()
}

// shift renames FileName.i to FileName.i+1 from the oldest down, removing the one beyond
// MaxFiles, and FileName to FileName.1. A rename replaces a link planted at the new name rather than
// following it.
func (l *Logger) shift() error {
	name := func(i int) string {
		if i == 0 {
			return l.path
		}
		return fmt.Sprintf("%s.%d", l.path, i)
	}
	if err := os.Remove(name(l.opts.MaxFiles)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing the oldest audit log: %w", err)
	}
	for i := l.opts.MaxFiles - 1; i >= 0; i-- {
		if err := os.Rename(name(i), name(i+1)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("rotating the audit log: %w", err)
		}
	}
	return nil
}

func (l *Logger) close() {
	if l.w != nil {
		_ = l.w.Flush()
	}
	if l.file != nil {
		l.file.Close()
	}
	l.file, l.w = nil, nil
}
