package openflow

import (
	"fmt"
	"slices"
	"testing"

	. "github.com/onsi/gomega"
)

// TestCheckCounts compares a table counted by identity with the cache: flows of one identity the
// switch has fewer of are all candidates and the surplus of the sorted texts are Missing; more
// flows of an identity of our categories than cached are Unexpected, one each; identities with
// cookie 0, of categories the cache does not hold or in skip are left out.
func TestCheckCounts(t *testing.T) {
	g := NewWithT(t)
	br := newTestBridge()
	same := routeFlows(4)
	for i := range same[:3] {
		same[i].Cookie = 1 // three flows of one identity, different matches
	}
	syncCache(t, br, 1, same)
	snap := br.snapshot()
	g.Expect(snap.tables).To(Equal([]uint8{70}))

	id := func(f Flow) flowID { return flowID{f.Table, f.Priority, MakeCookie(0, 1, f.Cookie)} }
	texts := func(n int) []string {
		var out []string
		for _, c := range br.flows {
			if c.cookie == MakeCookie(0, 1, 1) {
				f := c.flow(nil)
				out = append(out, f.String())
			}
		}
		slices.Sort(out)
		return out[n:]
	}

	// Everything there: no difference.
	full := map[flowID]int{id(same[0]): 3, id(same[3]): 1}
	diffs, missing := snap.check(br.flows, 70, full, nil)
	g.Expect(diffs).To(BeEmpty())
	g.Expect(missing).To(BeEmpty())

	// One of the three there: two missing, all three candidates.
	diffs, missing = snap.check(br.flows, 70, map[flowID]int{id(same[0]): 1, id(same[3]): 1}, nil)
	g.Expect(missing).To(HaveLen(3))
	var want []Difference
	for _, text := range texts(1) {
		want = append(want, Difference{Kind: Missing, Flow: text})
	}
	g.Expect(diffs).To(ConsistOf(want))
	// Left out when skipped.
	diffs, missing = snap.check(br.flows, 70, map[flowID]int{id(same[3]): 1}, map[flowID]bool{id(same[0]): true})
	g.Expect(diffs).To(BeEmpty())
	g.Expect(missing).To(BeEmpty())

	// Two more of a cached identity, and one of another object of category 1: three unexpected.
	// Cookie 0 and another category's cookie are not ours to report.
	other := flowID{70, 200, MakeCookie(0, 1, 99)}
	got := map[flowID]int{id(same[0]): 3, id(same[3]): 3, other: 1, {70, 5, 0}: 4, {70, 200, MakeCookie(0, 2, 1)}: 1}
	diffs, missing = snap.check(br.flows, 70, got, nil)
	g.Expect(missing).To(BeEmpty())
	unexpected := func(k flowID) Difference {
		return Difference{Kind: Unexpected, Flow: fmt.Sprintf("cookie=%#x, table=70, priority=200", k.cookie)}
	}
	g.Expect(diffs).To(ConsistOf(unexpected(id(same[3])), unexpected(id(same[3])), unexpected(other)))
}
