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
	"golang.org/x/time/rate"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/winnet-io/winnet/internal/securefs"
)

// FileName is the log's name in its directory; rotated files are FileName.1 (the newest) to
// FileName.<MaxFiles>.
const FileName = "winnet-audit.log"

// Defaults of Options.
const (
	DefaultMaxSize      = 100 << 20
	DefaultMaxFiles     = 5
	DefaultRate         = 100
	DefaultBurst        = 500
	DefaultWindow       = time.Second
	DefaultQueue        = 4096
	DefaultSuspendAfter = 30 * time.Second
	DefaultCooldown     = 5 * time.Minute
)

// Reasons of winnet_audit_log_dropped_total.
const (
	// DroppedRate: the line would have gone beyond the node's rate (Options.Rate and Burst).
	DroppedRate = "rate"
	// DroppedQueue: the queue between the OpenFlow reader and the writer was full.
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

var (
	linesTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "winnet", Subsystem: "audit_log", Name: "lines_total",
		Help: "Lines the agent wrote to its audit log (winnet-audit.log): one per 5-tuple and rule in each deduplication window.",
	})
	droppedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "winnet", Subsystem: "audit_log", Name: "dropped_total",
		Help: "Audited decisions the agent did not log, by reason: rate (beyond --audit-log-rate), queue (the writer fell behind), write (the file could not be written), unnamed (no rule the agent knows).",
	}, []string{"reason"})
	rotationFailuresTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "winnet", Subsystem: "audit_log", Name: "rotation_failures_total",
		Help: "Rotations of the audit log that failed (on Windows, a reader holding the file without sharing its deletion): the file grows beyond its size until a retry a minute later succeeds.",
	})
	suspendedGauge = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "winnet", Subsystem: "audit_log", Name: "suspended",
		Help: "1 while the node's audited flows send nothing to the agent: it dropped decisions beyond its rate for --audit-log-suspend-after, for --audit-log-cooldown.",
	})
	packetInsTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "winnet", Subsystem: "audit_log", Name: "packet_ins_total",
		Help: "Packet-ins of audited policy decisions the agent received (one per audited new connection, retransmissions of a dropped one included).",
	})
)

func init() {
	ctrlmetrics.Registry.MustRegister(linesTotal, droppedTotal, packetInsTotal, suspendedGauge, rotationFailuresTotal)
}

// Record is one line of the log. For a default drop Name is "", Rule DefaultDenyRule, Action
// ActionDrop and IsolatedBy the policies that isolate the Pod in that direction.
type Record struct {
	Time       time.Time `json:"time"`
	PolicyKind string    `json:"policyKind"`
	Namespace  string    `json:"namespace"`
	Name       string    `json:"name"`
	Tier       string    `json:"tier,omitempty"`
	Rule       string    `json:"rule"`
	Direction  string    `json:"direction"`
	Action     string    `json:"action"`
	IsolatedBy []string  `json:"isolatedBy,omitempty"`
	SrcIP      string    `json:"srcIP"`
	DstIP      string    `json:"dstIP"`
	Protocol   string    `json:"protocol"`
	SrcPort    uint16    `json:"srcPort"`
	DstPort    uint16    `json:"dstPort"`
	Node       string    `json:"node"`
	// Count is how many packets of this 5-tuple the rule decided within the deduplication window
	// that starts at Time (a dropped connection's retransmissions, a burst of datagrams).
	Count int `json:"count"`
}

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
	// Rate and Burst limit the lines per second the node writes (a token per new 5-tuple and
	// rule; 0: the defaults).
	Rate  float64
	Burst int
	// Window is the deduplication window: the packets of one 5-tuple and rule within it are one
	// line with their count, written when it ends (0: DefaultWindow).
	Window time.Duration
	// Queue is the capacity of the queue from the OpenFlow reader to the writer (0: DefaultQueue).
	Queue int
	// SuspendAfter and Cooldown protect the switch: when decisions were dropped beyond the rate
	// with no second free of such drops for SuspendAfter, the log is suspended for Cooldown
	// (Suspended), and the agent takes the packet-ins out of the audited flows meanwhile (0: the
	// defaults; a negative SuspendAfter never suspends).
	SuspendAfter, Cooldown time.Duration
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
	if o.Window <= 0 {
		o.Window = DefaultWindow
	}
	if o.Queue <= 0 {
		o.Queue = DefaultQueue
	}
	if o.SuspendAfter == 0 {
		o.SuspendAfter = DefaultSuspendAfter
	}
	if o.Cooldown <= 0 {
		o.Cooldown = DefaultCooldown
	}
	return o
}

// Stats are a Logger's own counts (the Prometheus counters add up every Logger of the process).
type Stats struct {
	PacketIns, Lines                          uint64
	DroppedRate, DroppedQueue, DroppedUnnamed uint64
	DroppedWrite, Rotations, RotationFailures uint64
}

// Logger is the audit log of one node.
type Logger struct {
	opts    Options
	path    string
	queue   chan Record
	limiter *rate.Limiter

	packetIns, lines, droppedRate, droppedQueue, droppedWrite, droppedUnnamed, rotations, rotationFailures atomic.Uint64

	// The writer's own state (Run's goroutine).
	file    *os.File
	w       *bufio.Writer
	size    int64
	pending map[key]*Record
	order   []key

	// streakStart and lastRateDrop are the first and last rate drops of the current streak (drops
	// with no second free of them between), for the suspension (writer's state).
	streakStart, lastRateDrop time.Time
	// rotateAfter: a rotation failed; the next is not tried before then.
	rotateAfter   time.Time
	streakDropped uint64

	mu      sync.Mutex
	lastErr error
	// suspended: until when the log is suspended (zero: not), with what suspended it (mu).
	suspendedUntil time.Time
	suspension     Suspension
	changes        chan struct{}
}

// Suspension says why the log was suspended: the decisions dropped beyond the rate over the streak.
type Suspension struct {
	Since, Until time.Time
	Dropped      uint64
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
		limiter: rate.NewLimiter(rate.Limit(opts.Rate), opts.Burst), pending: map[key]*Record{}, changes: make(chan struct{}, 1)}
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
// set by the logger. It returns false when the queue is full (counted as DroppedQueue).
func (l *Logger) Submit(r Record) bool {
	l.packetIns.Add(1)
	packetInsTotal.Inc()
	select {
	case l.queue <- r:
		return true
	default:
		l.droppedQueue.Add(1)
		droppedTotal.WithLabelValues(DroppedQueue).Inc()
		return false
	}
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
		RotationFailures: l.rotationFailures.Load()}
}

// Err is the last write error, nil once a write succeeds again.
func (l *Logger) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastErr
}

// Run writes the queued decisions until ctx ends, then writes what is pending and closes the
// file. It is the only writer.
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
					return
				}
			}
		case r := <-l.queue:
			l.take(r)
		case now := <-tick.C:
			l.flush(now)
			l.resume(now)
		}
	}
}

// take counts a decision into its window, or opens one if the rate allows a line.
func (l *Logger) take(r Record) {
	k := r.key()
	if p, ok := l.pending[k]; ok {
		p.Count++
		return
	}
	if !l.limiter.AllowN(r.Time, 1) {
		l.droppedRate.Add(1)
		droppedTotal.WithLabelValues(DroppedRate).Inc()
		l.rateDropped(r.Time)
		return
	}
	r.Node, r.Count = l.opts.Node, 1
	l.pending[k] = &r
	l.order = append(l.order, k)
}

// rateDropped follows the streak of rate drops and suspends the log when it lasted SuspendAfter.
func (l *Logger) rateDropped(at time.Time) {
	if l.streakStart.IsZero() || at.Sub(l.lastRateDrop) > time.Second {
		l.streakStart = at
		l.streakDropped = 0
	}
	l.lastRateDrop = at
	l.streakDropped++
	if l.opts.SuspendAfter < 0 || at.Sub(l.streakStart) < l.opts.SuspendAfter {
		return
	}
	l.mu.Lock()
	if !l.suspendedUntil.IsZero() {
		l.mu.Unlock()
		return
	}
	l.suspendedUntil = at.Add(l.opts.Cooldown)
	l.suspension = Suspension{Since: l.streakStart, Until: l.suspendedUntil, Dropped: l.streakDropped}
	l.mu.Unlock()
	l.streakStart = time.Time{}
	suspendedGauge.Inc()
	l.notify()
}

// resume ends a suspension whose cooldown is over by now.
func (l *Logger) resume(now time.Time) {
	l.mu.Lock()
	over := !l.suspendedUntil.IsZero() && !now.Before(l.suspendedUntil)
	if over {
		l.suspendedUntil = time.Time{}
	}
	l.mu.Unlock()
	if over {
		suspendedGauge.Dec()
		l.notify()
	}
}

func (l *Logger) notify() {
	select {
	case l.changes <- struct{}{}:
	default:
	}
}

// Suspended tells whether the log is suspended, and the last suspension (its end is in the past
// once resumed).
func (l *Logger) Suspended() (bool, Suspension) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.suspendedUntil.IsZero(), l.suspension
}

// Changes receives a value when the log is suspended or resumed (coalesced); one reader.
func (l *Logger) Changes() <-chan struct{} { return l.changes }

// flush writes the windows that ended by now (every one when now is zero), oldest first.
func (l *Logger) flush(now time.Time) {
	n := 0
	for _, k := range l.order {
		r := l.pending[k]
		if !now.IsZero() && now.Sub(r.Time) < l.opts.Window {
			break // windows open in order: the later ones have not ended either
		}
		l.write(r)
		delete(l.pending, k)
		n++
	}
	l.order = l.order[n:]
	if n > 0 {
		l.sync()
	}
}

func (l *Logger) write(r *Record) {
	b, err := json.Marshal(r)
	if err == nil {
		b = append(b, '\n')
		err = l.rotateFor(int64(len(b)))
	}
	if err == nil {
		_, err = l.w.Write(b)
	}
	if err != nil {
		l.failed(err)
		return
	}
	l.size += int64(len(b))
	l.lines.Add(1)
	linesTotal.Inc()
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
