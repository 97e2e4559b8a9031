package openflow

import (
	"net"
	"net/netip"
	"runtime"
	"testing"

	. "github.com/onsi/gomega"
)

// routeFlows are n flows like a node's remote routes.
func routeFlows(n int) []Flow {
	vmac, _ := net.ParseMAC("aa:bb:cc:dd:ee:ff")
	out := make([]Flow, n)
	for i := range out {
		out[i] = Flow{Table: 70, Priority: 200, Cookie: uint64(i + 1),
			Match:   []MatchField{IPv4(), NwDst(netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 32))},
			Actions: []Action{SetEthDst(vmac), SetTunDst(netip.AddrFrom4([4]byte{192, 168, byte(i >> 8), byte(i)})), GotoTable(80)}}
	}
	return out
}

// BenchmarkDiffOneChangeIn100k measures what an incremental Sync of 100,000 flows computes on our
// side before it sends the one changed flow.
func BenchmarkDiffOneChangeIn100k(b *testing.B) {
	br := newTestBridge()
	desired := routeFlows(100000)
	changes, order, err := br.diff(1, nil, desired)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range changes {
		br.apply(c)
	}
	br.rememberOrder(1, order)
	desired[500].Actions = []Action{Output(7)}
	b.ReportAllocs()
	for b.Loop() {
		changes, _, err := br.diff(1, nil, desired)
		if err != nil || len(changes) != 1 {
			b.Fatalf("%d changes, %v", len(changes), err)
		}
	}
}

func newTestBridge() *Bridge {
	return &Bridge{flows: flowSet{}, byCategory: map[uint8]flowIndex{}, byObject: map[uint8]map[uint64][]*cached{}, lastOrder: map[uint8][]*cached{}}
}

// syncCache does what Sync does to the cache when the switch accepts the bundle.
func syncCache(t *testing.T, br *Bridge, category uint8, desired []Flow) flowChanges {
	t.Helper()
	changes, order, err := br.diff(category, nil, desired)
	if err != nil {
		t.Fatalf("%v", err)
	}
	for _, c := range changes {
		br.apply(c)
	}
	br.rememberOrder(category, order)
	return changes
}

// TestDiffAfterFlowsMoved checks the positional lookup of the previous Sync's order against flows
// that another category took over, and against reordered desired sets.
func TestDiffAfterFlowsMoved(t *testing.T) {
	g := NewWithT(t)
	br := newTestBridge()
	flows := routeFlows(3)
	g.Expect(syncCache(t, br, 1, flows)).To(HaveLen(3))
	g.Expect(syncCache(t, br, 1, flows)).To(BeEmpty())

	// Category 2 takes over the second flow; category 1 then wants it back.
	g.Expect(syncCache(t, br, 2, flows[1:2])).To(HaveLen(1))
	g.Expect(br.byCategory[1]).To(HaveLen(2))
	changes := syncCache(t, br, 1, flows)
	g.Expect(changes).To(HaveLen(1))
	g.Expect(changes[0].prev.category).To(Equal(uint8(2)))
	g.Expect(changes[0].next.category).To(Equal(uint8(1)))
	g.Expect(br.byCategory[2]).To(BeEmpty())

	// Reordered, and one flow changed in place: one modification.
	reordered := []Flow{flows[2], flows[0], flows[1]}
	reordered[1].Actions = []Action{Output(7)}
	changes = syncCache(t, br, 1, reordered)
	g.Expect(changes).To(HaveLen(1))
	g.Expect(changes[0].prev).NotTo(BeNil())
	g.Expect(syncCache(t, br, 1, reordered)).To(BeEmpty())
	// A failed Sync leaves the remembered order alone: the changed flow is still the installed one.
	_, _, err := br.diff(1, nil, flows)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(syncCache(t, br, 1, reordered)).To(BeEmpty())
}

// BenchmarkCacheBytesPerFlow reports what the installed-flow cache holds per route flow (the
// record, its key, its actions and its index entries), the bulk of a large node's heap: 200,000
// flows and more at 5,000 Nodes (bench-scale, issue 64).
func BenchmarkCacheBytesPerFlow(b *testing.B) {
	const n = 100000
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		br := newTestBridge()
		changes, order, err := br.diff(1, nil, routeFlows(n))
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range changes {
			br.apply(c)
		}
		br.rememberOrder(1, order)
		changes = nil
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap-bytes/flow")
		runtime.KeepAlive(br)
	}
}
