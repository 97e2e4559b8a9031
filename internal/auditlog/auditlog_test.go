package auditlog

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func record(at time.Time, srcPort uint16) Record {
	return Record{Time: at, PolicyKind: "NetworkPolicy", Namespace: "x", Name: "web", Rule: "ingress[0]", Direction: "ingress", Action: "Allow",
		SrcIP: "10.244.2.5", DstIP: "10.244.1.5", Protocol: "TCP", SrcPort: srcPort, DstPort: 8080}
}

func readLines(t *testing.T, path string) []Record {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []Record
	s := bufio.NewScanner(f)
	for s.Scan() {
		var r Record
		if err := json.Unmarshal(s.Bytes(), &r); err != nil {
			t.Fatalf("line %q: %v", s.Text(), err)
		}
		out = append(out, r)
	}
	return out
}

// TestDedupWindow: the packets of one 5-tuple and rule within the window are one line with their
// count, written when the window ends; another source port is another line.
func TestDedupWindow(t *testing.T) {
	g := NewWithT(t)
	l, err := Open(Options{Dir: t.TempDir(), Node: "n1", Window: time.Second})
	g.Expect(err).NotTo(HaveOccurred())
	t0 := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	l.take(record(t0, 40000))
	l.take(record(t0.Add(300*time.Millisecond), 40000))
	l.take(record(t0.Add(900*time.Millisecond), 40000))
	l.take(record(t0.Add(100*time.Millisecond), 40001))
	l.flush(t0.Add(999 * time.Millisecond))
	g.Expect(readLines(t, l.Path())).To(BeEmpty(), "nothing before the window ends")
	l.flush(t0.Add(1100 * time.Millisecond))
	lines := readLines(t, l.Path())
	g.Expect(lines).To(HaveLen(2))
	want := record(t0, 40000)
	want.Node, want.Count = "n1", 3
	g.Expect(lines[0]).To(Equal(want))
	g.Expect(lines[1].SrcPort).To(BeEquivalentTo(40001))
	g.Expect(lines[1].Count).To(Equal(1))
	// A packet after the window is a new line.
	l.take(record(t0.Add(1200*time.Millisecond), 40000))
	l.flush(t0.Add(3 * time.Second))
	g.Expect(readLines(t, l.Path())).To(HaveLen(3))
	g.Expect(l.Stats().Lines).To(BeEquivalentTo(3))
}

// TestRateLimit: beyond the burst, new lines wait for the rate; what is not logged is counted.
// Repeats of a line being counted take no token.
func TestRateLimit(t *testing.T) {
	g := NewWithT(t)
	l, err := Open(Options{Dir: t.TempDir(), Node: "n1", Rate: 10, Burst: 5})
	g.Expect(err).NotTo(HaveOccurred())
	t0 := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	for i := range 20 {
		l.take(record(t0, uint16(40000+i)))
		l.take(record(t0, uint16(40000+i)))
	}
	// 100 ms later the rate gives one more token.
	l.take(record(t0.Add(100*time.Millisecond), 50000))
	l.flush(time.Time{})
	g.Expect(readLines(t, l.Path())).To(HaveLen(6))
	s := l.Stats()
	g.Expect(s.Lines).To(BeEquivalentTo(6))
	g.Expect(s.DroppedRate).To(BeEquivalentTo(30), "15 new 5-tuples and their repeats")
}

// TestRotation: beyond MaxSize the file moves to .1, the older ones up, and no more than MaxFiles
// are kept; every file stays within MaxSize and the newest lines are kept.
func TestRotation(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	probe, _ := json.Marshal(func() Record {
		r := record(time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC), 40000)
		r.Node, r.Count = "n1", 1
		return r
	}())
	lineLen := int64(len(probe) + 1)
	l, err := Open(Options{Dir: dir, Node: "n1", MaxSize: 3 * lineLen, MaxFiles: 2, Rate: 1e6, Burst: 1e6})
	g.Expect(err).NotTo(HaveOccurred())
	t0 := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	for i := range 20 {
		l.take(record(t0, uint16(40000+i)))
	}
	l.flush(time.Time{})
	entries, err := os.ReadDir(dir)
	g.Expect(err).NotTo(HaveOccurred())
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
		fi, err := e.Info()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(fi.Size()).To(BeNumerically("<=", 3*lineLen), e.Name())
	}
	g.Expect(names).To(ConsistOf(FileName, FileName+".1", FileName+".2"))
	var ports []uint16
	for _, f := range []string{FileName + ".2", FileName + ".1", FileName} {
		for _, r := range readLines(t, filepath.Join(dir, f)) {
			ports = append(ports, r.SrcPort)
		}
	}
	g.Expect(ports).To(Equal([]uint16{40012, 40013, 40014, 40015, 40016, 40017, 40018, 40019}), "the newest 8 lines, in order")
	g.Expect(l.Stats().Rotations).To(BeEquivalentTo(6))
}

// TestQueueNeverBlocks: Submit returns at once when the writer is behind, and counts the loss.
func TestQueueNeverBlocks(t *testing.T) {
	g := NewWithT(t)
	l, err := Open(Options{Dir: t.TempDir(), Node: "n1", Queue: 2, OwnerQueue: 2})
	g.Expect(err).NotTo(HaveOccurred())
	t0 := time.Now()
	g.Expect(l.Submit(record(t0, 1))).To(BeTrue())
	g.Expect(l.Submit(record(t0, 2))).To(BeTrue())
	g.Expect(l.Submit(record(t0, 3))).To(BeFalse())
	s := l.Stats()
	g.Expect([]uint64{s.PacketIns, s.DroppedQueue}).To(Equal([]uint64{3, 1}))
	// Run writes what was queued; at its end, what is pending is written at once.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Run(ctx); close(done) }()
	cancel()
	<-done
	lines := readLines(t, l.Path())
	g.Expect(lines).To(HaveLen(3), fmt.Sprint(lines))
	// And what was not queued is summarised as the log closes.
	sums := summaries(t, l.Path())
	g.Expect(sums).To(HaveLen(1))
	g.Expect([]any{sums[0].Namespace, sums[0].Count, sums[0].NotLogged}).To(Equal([]any{"x", uint64(1), NotLogged{Queue: 1}}))
}

// TestAppendsAcrossRestarts: a second logger on the same directory appends.
func TestAppendsAcrossRestarts(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	t0 := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	for i := range 2 {
		l, err := Open(Options{Dir: dir, Node: "n1"})
		g.Expect(err).NotTo(HaveOccurred())
		l.take(record(t0, uint16(i)))
		l.flush(time.Time{})
		l.close()
	}
	g.Expect(readLines(t, filepath.Join(dir, FileName))).To(HaveLen(2))
}

// TestSuspension: drops beyond an owner's rate with no second free of them for SuspendAfter
// suspend the owner for Cooldown, and say so on Changes; a second without drops starts the streak
// again.
func TestSuspension(t *testing.T) {
	g := NewWithT(t)
	l, err := Open(Options{Dir: t.TempDir(), Node: "n1", Rate: 1, Burst: 1, SuspendAfter: 3 * time.Second, Cooldown: 10 * time.Second})
	g.Expect(err).NotTo(HaveOccurred())
	t0 := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	port := uint16(40000)
	flood := func(from, to time.Duration) {
		for d := from; d <= to; d += 100 * time.Millisecond {
			port++
			l.take(record(t0.Add(d), port))
		}
	}
	x := NamespaceOwner("x")
	flood(0, 2*time.Second)
	flood(3500*time.Millisecond, 6*time.Second) // 1.5 s without a drop: a new streak
	g.Expect(l.Suspensions().Suspended(x)).To(BeFalse(), "no streak of 3 s yet")
	g.Expect(l.Changes()).NotTo(Receive())
	flood(6100*time.Millisecond, 7*time.Second)
	sus := l.Suspensions()
	g.Expect(sus.All).To(BeNil())
	g.Expect(sus.Owners).To(HaveLen(1))
	s := sus.Owners[x]
	g.Expect(s.Owner).To(Equal(x))
	g.Expect(s.Reason).To(Equal(SuspendedRate))
	g.Expect(s.Since).To(BeTemporally("~", t0.Add(3500*time.Millisecond), 100*time.Millisecond), "the second streak's first drop")
	g.Expect(s.Until).To(Equal(s.Since.Add(3 * time.Second).Add(10 * time.Second)))
	g.Expect(s.Dropped).To(BeNumerically(">=", 25))
	g.Expect(l.Changes()).To(Receive())
	l.summarise(s.Until.Add(-time.Millisecond), false)
	g.Expect(l.Suspensions().Suspended(x)).To(BeTrue(), "not before the cooldown's end")
	l.summarise(s.Until, false)
	g.Expect(l.Suspensions().Owners).To(BeEmpty())
	g.Expect(l.Changes()).To(Receive())
}

// owned is a record of owner o's: a NetworkPolicy decision of namespace o, or a
// ClusterNetworkPolicy's.
func owned(o Owner, at time.Time, srcPort uint16) Record {
	r := record(at, srcPort)
	if o.Kind == OwnerClusterNetworkPolicy {
		r.PolicyKind, r.Namespace, r.Name, r.Tier, r.Action = KindClusterNetworkPolicy, "", o.Name, "Admin", "Deny"
		return r
	}
	r.Namespace = o.Name
	return r
}

// TestOneOwnerFloods: namespace a floods new connections far beyond its rate while namespace b
// and a ClusterNetworkPolicy make a few: every decision of b's and of the ClusterNetworkPolicy is
// written; a is limited to its own rate, then suspended alone, and its decisions are refused at
// the queue while b's are still taken; when a resumes, one summary line says what was not
// written of a's.
func TestOneOwnerFloods(t *testing.T) {
	g := NewWithT(t)
	l, err := Open(Options{Dir: t.TempDir(), Node: "n1", Rate: 10, Burst: 5, SuspendAfter: 2 * time.Second, Cooldown: time.Minute})
	g.Expect(err).NotTo(HaveOccurred())
	a, b, c := NamespaceOwner("a"), NamespaceOwner("b"), ClusterPolicyOwner("deny-smb")
	t0 := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	port := uint16(1)
	quiet := 0
	for d := time.Duration(0); d < 3*time.Second; d += time.Millisecond {
		port++
		l.take(owned(a, t0.Add(d), port)) // 1,000 new connections a second
		if d%(100*time.Millisecond) == 0 {
			l.take(owned(b, t0.Add(d), port))
			l.take(owned(c, t0.Add(d), port))
			quiet += 2
		}
	}
	sus := l.Suspensions()
	g.Expect(sus.All).To(BeNil())
	g.Expect(sus.Owners).To(HaveKey(a))
	g.Expect(sus.Owners).To(HaveLen(1), "only the flooding namespace")
	g.Expect(sus.Suspended(b)).To(BeFalse())
	g.Expect(sus.Suspended(c)).To(BeFalse())
	// While a is suspended, its packet-ins still in flight are refused at the queue, b's are taken.
	g.Expect(l.Submit(owned(a, t0.Add(3*time.Second), 1))).To(BeFalse())
	g.Expect(l.Submit(owned(b, t0.Add(3*time.Second), 1))).To(BeTrue())
	l.take(<-l.queue)
	quiet++
	l.flush(time.Time{})
	byOwner := map[Owner]int{}
	for _, r := range readLines(t, l.Path()) {
		byOwner[r.Owner()]++
	}
	g.Expect(byOwner[b]+byOwner[c]).To(Equal(quiet), "every decision of b and of the ClusterNetworkPolicy written")
	g.Expect(byOwner[a]).To(Equal(5+20), "a's burst, then its rate for the 2 s before its suspension")
	s := l.Stats()
	g.Expect(s.DroppedCeiling).To(BeZero(), "one owner alone never reaches the node's ceiling")
	g.Expect(s.DroppedSuspended).To(BeNumerically(">", 900))

	// The summary of what was not written of a's comes when its suspension ends.
	until := sus.Owners[a].Until
	l.summarise(until.Add(-time.Second), false)
	g.Expect(summaries(t, l.Path())).To(BeEmpty(), "not while a is suspended")
	l.summarise(until, false)
	sums := summaries(t, l.Path())
	g.Expect(sums).To(HaveLen(1))
	sum := sums[0]
	g.Expect(sum.Namespace).To(Equal("a"))
	g.Expect(sum.PolicyKind).To(Equal(KindNetworkPolicy))
	g.Expect(sum.Rule).To(Equal(NotLoggedRule))
	g.Expect(sum.Node).To(Equal("n1"))
	g.Expect(sum.Time).To(Equal(t0.Add(5*time.Millisecond)), "a's first decision not written")
	g.Expect(sum.Until).To(Equal(until))
	g.Expect(sum.SuspendedAt).To(Equal(sus.Owners[a].At))
	g.Expect(sum.SuspendedUntil).To(Equal(until))
	g.Expect(sum.NotLogged.Rate).To(Equal(s.DroppedRate))
	g.Expect(sum.NotLogged.Suspended).To(Equal(s.DroppedSuspended))
	g.Expect(sum.Count).To(Equal(s.DroppedRate+s.DroppedSuspended), "every decision of a's not written: 3,000 offered, 25 written")
	g.Expect(sum.Count + uint64(byOwner[a])).To(Equal(uint64(3000 + 1)))
}

// TestQueueShare: an owner holds at most its share of the queue; another owner's decisions are
// still queued.
func TestQueueShare(t *testing.T) {
	g := NewWithT(t)
	l, err := Open(Options{Dir: t.TempDir(), Node: "n1", Queue: 16, OwnerQueue: 4})
	g.Expect(err).NotTo(HaveOccurred())
	a, b := NamespaceOwner("a"), NamespaceOwner("b")
	t0 := time.Now()
	for i := range 10 {
		g.Expect(l.Submit(owned(a, t0, uint16(i)))).To(Equal(i < 4), "a's %d", i)
	}
	g.Expect(l.Submit(owned(b, t0, 1))).To(BeTrue(), "b has a share of its own")
	g.Expect(l.Stats().DroppedQueue).To(BeEquivalentTo(6))
	// The writer takes one of a's: a may queue one more.
	l.take(<-l.queue)
	g.Expect(l.Submit(owned(a, t0, 100))).To(BeTrue())
	g.Expect(l.Submit(owned(a, t0, 101))).To(BeFalse())
}

// TestCeiling: when many owners log at once beyond the node's ceiling for SuspendAfter, those
// that sent at least the mean of the decisions are suspended; the owner that sent few is not,
// and keeps being written.
func TestCeiling(t *testing.T) {
	g := NewWithT(t)
	l, err := Open(Options{Dir: t.TempDir(), Node: "n1", Rate: 10, Burst: 10, NodeRate: 20, NodeBurst: 20, SuspendAfter: 2 * time.Second, Cooldown: time.Minute})
	g.Expect(err).NotTo(HaveOccurred())
	t0 := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	heavy := []Owner{NamespaceOwner("h1"), NamespaceOwner("h2"), NamespaceOwner("h3"), ClusterPolicyOwner("h4")}
	light := NamespaceOwner("light")
	port := uint16(1)
	for d := time.Duration(0); d < 3*time.Second; d += 100 * time.Millisecond {
		// Each heavy owner within its own rate (10/s), 40/s together against the node's 20/s.
		for _, o := range heavy {
			port++
			l.take(owned(o, t0.Add(d), port))
		}
		if d%time.Second == 0 {
			l.take(owned(light, t0.Add(d), port))
		}
	}
	sus := l.Suspensions()
	g.Expect(sus.All).To(BeNil())
	g.Expect(sus.Owners).To(HaveLen(len(heavy)))
	for _, o := range heavy {
		g.Expect(sus.Owners).To(HaveKey(o))
		g.Expect(sus.Owners[o].Reason).To(Equal(SuspendedCeiling))
	}
	g.Expect(sus.Suspended(light)).To(BeFalse())
	s := l.Stats()
	g.Expect(s.DroppedCeiling).To(BeNumerically(">", 0))
	g.Expect(s.DroppedRate).To(BeZero(), "no owner beyond its own rate")
	// The heavy owners suspended, the light one is written again.
	l.flush(time.Time{})
	lines := l.Stats().Lines
	l.take(owned(light, t0.Add(4*time.Second), 1))
	l.flush(time.Time{})
	g.Expect(l.Stats().Lines).To(Equal(lines + 1))
}

// TestOwnersBounded: the log tracks at most MaxOwners owners; a new one takes the place of the one
// least recently seen, whose summary is written first; when every tracked owner is suspended, the
// whole log is suspended for the cooldown, and a summary without an owner says what was not
// written.
func TestOwnersBounded(t *testing.T) {
	g := NewWithT(t)
	l, err := Open(Options{Dir: t.TempDir(), Node: "n1", Rate: 1, Burst: 1, MaxOwners: 3, SuspendAfter: time.Second, Cooldown: time.Minute})
	g.Expect(err).NotTo(HaveOccurred())
	t0 := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	ns := func(i int) Owner { return NamespaceOwner(fmt.Sprintf("ns-%d", i)) }
	// ns-0 has a decision dropped beyond its rate, then ns-1 and ns-2 come.
	l.take(owned(ns(0), t0, 1))
	l.take(owned(ns(0), t0, 2))
	l.take(owned(ns(1), t0.Add(time.Millisecond), 1))
	l.take(owned(ns(2), t0.Add(2*time.Millisecond), 1))
	g.Expect(l.Owners()).To(Equal(3))
	// ns-3 takes ns-0's place: ns-0's summary is written at the next tick.
	l.take(owned(ns(3), t0.Add(3*time.Millisecond), 1))
	g.Expect(l.Owners()).To(Equal(3))
	g.Expect(l.Stats().Evictions).To(BeEquivalentTo(1))
	l.summarise(t0.Add(time.Second), false)
	sums := summaries(t, l.Path())
	g.Expect(sums).To(HaveLen(1))
	g.Expect(sums[0].Namespace).To(Equal("ns-0"))
	g.Expect(sums[0].Count).To(BeEquivalentTo(1))
	// Many owners, each flooding: the table never holds more than 3, suspended ones stay.
	port := uint16(10)
	for d := time.Duration(0); d <= 1500*time.Millisecond; d += 100 * time.Millisecond {
		for i := 1; i <= 3; i++ {
			port++
			l.take(owned(ns(i), t0.Add(time.Second+d), port))
		}
		g.Expect(l.Owners()).To(BeNumerically("<=", 3))
	}
	sus := l.Suspensions()
	g.Expect(sus.Owners).To(HaveLen(3))
	g.Expect(sus.All).To(BeNil())
	// A fourth owner finds no place: everything is suspended.
	l.take(owned(ns(9), t0.Add(3*time.Second), 1))
	sus = l.Suspensions()
	g.Expect(sus.All).NotTo(BeNil())
	g.Expect(sus.All.Reason).To(Equal(SuspendedOwners))
	g.Expect(sus.Suspended(ns(9))).To(BeTrue())
	g.Expect(l.Owners()).To(Equal(3))
	g.Expect(l.Submit(owned(ns(9), t0.Add(3*time.Second), 2))).To(BeFalse())
	l.summarise(sus.All.Until, false)
	g.Expect(l.Suspensions().All).To(BeNil())
	var overflow []Summary
	for _, s := range summaries(t, l.Path()) {
		if s.PolicyKind == "" {
			overflow = append(overflow, s)
		}
	}
	g.Expect(overflow).To(HaveLen(1))
	g.Expect(overflow[0].Count).To(BeEquivalentTo(2))
	g.Expect(overflow[0].SuspendedUntil).To(Equal(sus.All.Until))
}

// TestPeriodicSummary: an owner whose decisions are dropped beyond its rate without being
// suspended has them summarised every SummaryInterval; nothing is summarised when everything was
// written.
func TestPeriodicSummary(t *testing.T) {
	g := NewWithT(t)
	l, err := Open(Options{Dir: t.TempDir(), Node: "n1", Rate: 1, Burst: 1, SuspendAfter: -1, SummaryInterval: time.Minute})
	g.Expect(err).NotTo(HaveOccurred())
	t0 := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	l.take(owned(ClusterPolicyOwner("deny-smb"), t0, 1))
	l.take(owned(ClusterPolicyOwner("deny-smb"), t0, 2))
	l.take(owned(ClusterPolicyOwner("deny-smb"), t0, 3))
	l.take(owned(NamespaceOwner("b"), t0, 1))
	l.summarise(t0.Add(59*time.Second), false)
	g.Expect(summaries(t, l.Path())).To(BeEmpty())
	l.summarise(t0.Add(time.Minute), false)
	sums := summaries(t, l.Path())
	g.Expect(sums).To(HaveLen(1), "b had everything written")
	g.Expect(sums[0]).To(Equal(Summary{Time: t0, Until: t0.Add(time.Minute), PolicyKind: KindClusterNetworkPolicy, Name: "deny-smb", Rule: NotLoggedRule,
		Node: "n1", Count: 2, NotLogged: NotLogged{Rate: 2}}))
	l.summarise(t0.Add(3*time.Minute), true)
	g.Expect(summaries(t, l.Path())).To(HaveLen(1), "nothing new")
}

// summaries are the summary lines of the log.
func summaries(t *testing.T, path string) []Summary {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []Summary
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if !strings.Contains(line, `"rule":"`+NotLoggedRule+`"`) {
			continue
		}
		var s Summary
		if err := json.Unmarshal([]byte(line), &s); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		out = append(out, s)
	}
	return out
}

// TestRotationBlocked: a rotation that fails (here the oldest file cannot be removed; on Windows a
// reader holding the file) loses no line: the file grows beyond its size, the failure is counted,
// and the rotation is not retried at every line.
func TestRotationBlocked(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	blocker := filepath.Join(dir, FileName+".1")
	g.Expect(os.MkdirAll(filepath.Join(blocker, "x"), 0o700)).To(Succeed())
	l, err := Open(Options{Dir: dir, Node: "n1", MaxSize: 300, MaxFiles: 1, Rate: 1e6, Burst: 1e6})
	g.Expect(err).NotTo(HaveOccurred())
	t0 := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	for i := range 10 {
		l.take(record(t0, uint16(40000+i)))
	}
	l.flush(time.Time{})
	g.Expect(readLines(t, l.Path())).To(HaveLen(10), "every line written, beyond the size")
	s := l.Stats()
	g.Expect(s.RotationFailures).To(BeEquivalentTo(1), "tried once, then not before rotateRetry")
	g.Expect(s.DroppedWrite).To(BeZero())
	g.Expect(s.Lines).To(BeEquivalentTo(10))
}

// TestSubmitWhileRunning: the OpenFlow reader submits while the writer runs and the reconciler
// reads the suspensions (run with -race).
func TestSubmitWhileRunning(t *testing.T) {
	g := NewWithT(t)
	l, err := Open(Options{Dir: t.TempDir(), Node: "n1", Rate: 50, Burst: 10, MaxOwners: 4, SuspendAfter: 50 * time.Millisecond, Cooldown: 100 * time.Millisecond,
		Window: 40 * time.Millisecond, SummaryInterval: 50 * time.Millisecond})
	g.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Run(ctx); close(done) }()
	stop := time.Now().Add(400 * time.Millisecond)
	go func() {
		for range l.Changes() {
			_ = l.Suspensions()
		}
	}()
	for i := 0; time.Now().Before(stop); i++ {
		l.Submit(owned(NamespaceOwner(fmt.Sprint("ns-", i%6)), time.Now(), uint16(i)))
		if i%64 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	cancel()
	<-done
	s := l.Stats()
	g.Expect(s.Lines).To(BeNumerically(">", 0))
	g.Expect(s.Summaries).To(BeNumerically(">", 0))
	g.Expect(l.Owners()).To(BeNumerically("<=", 4))
}
