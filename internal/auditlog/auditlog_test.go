package auditlog

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
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
	l, err := Open(Options{Dir: t.TempDir(), Node: "n1", Queue: 2})
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
	g.Expect(lines).To(HaveLen(2), fmt.Sprint(lines))
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

// TestSuspension: drops beyond the rate with no second free of them for SuspendAfter suspend the
// log for Cooldown, and say so on Changes; a second without drops starts the streak again.
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
	flood(0, 2*time.Second)
	flood(3500*time.Millisecond, 6*time.Second) // 1.5 s without a drop: a new streak
	on, _ := l.Suspended()
	g.Expect(on).To(BeFalse(), "no streak of 3 s yet")
	g.Expect(l.Changes()).NotTo(Receive())
	flood(6100*time.Millisecond, 7*time.Second)
	on, s := l.Suspended()
	g.Expect(on).To(BeTrue())
	g.Expect(s.Since).To(BeTemporally("~", t0.Add(3500*time.Millisecond), 100*time.Millisecond), "the second streak's first drop")
	g.Expect(s.Until).To(Equal(s.Since.Add(3 * time.Second).Add(10 * time.Second)))
	g.Expect(s.Dropped).To(BeNumerically(">=", 25))
	g.Expect(l.Changes()).To(Receive())
	l.resume(s.Until.Add(-time.Millisecond))
	on, _ = l.Suspended()
	g.Expect(on).To(BeTrue(), "not before the cooldown's end")
	l.resume(s.Until)
	on, _ = l.Suspended()
	g.Expect(on).To(BeFalse())
	g.Expect(l.Changes()).To(Receive())
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
