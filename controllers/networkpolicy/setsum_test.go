package networkpolicy

import (
	"hash/fnv"
	"strconv"
	"testing"
)

// TestSetSumDoesNotCancel: a pass compares the sum of what it read with the last full pass's, and
// compiles nothing when they are equal. Between two passes, a policy and its namespace (or a Pod)
// change resourceVersion together, as a label change and a policy update do: no pair of such
// moves may leave the sum unchanged. The same grid of moves summed with FNV-1a, the hash the sum
// used before, cancels out in thousands of pairs (checked here, so that the grid is known to find
// the weakness): with it, a pass took a changed policy for the last pass's inputs and kept stale
// flows (conformance-netpol, 30 Nov 2026).
func TestSetSumDoesNotCancel(t *testing.T) {
	fnvSum := func(tuples ...[]string) uint64 {
		var sum uint64
		for _, parts := range tuples {
			h := fnv.New64a()
			for _, p := range parts {
				_, _ = h.Write([]byte(p))
				_, _ = h.Write([]byte{0})
			}
			sum += h.Sum64()
		}
		return sum
	}
	ourSum := func(tuples ...[]string) uint64 {
		var s setSum
		for _, parts := range tuples {
			s.add(parts...)
		}
		return s.sum
	}
	const policyUID, namespaceUID = "6f1c2a3e-1111-4c2d-9a1b-1234567890ab", "0a9b8c7d-2222-4e5f-8a6b-abcdef012345"
	policy := func(rv int) []string { return []string{"np", policyUID, strconv.Itoa(rv)} }
	namespace := func(rv int) []string { return []string{"ns", namespaceUID, strconv.Itoa(rv)} }
	cancelled := func(sum func(...[]string) uint64) (n int) {
		for a := 2200; a < 2230; a++ {
			for b := a + 1; b < 2240; b++ {
				for c := 2200; c < 2230; c++ {
					for d := c + 1; d < 2240; d++ {
						if sum(policy(a), namespace(c)) == sum(policy(b), namespace(d)) {
							n++
						}
					}
				}
			}
		}
		return n
	}
	if n := cancelled(fnvSum); n == 0 {
		t.Fatalf("the FNV-1a sum, the reference, cancelled out in no pair of moves: the grid no longer finds the weakness")
	} else {
		t.Logf("FNV-1a summed: %d pairs of moves cancel out", n)
	}
	if n := cancelled(ourSum); n != 0 {
		t.Errorf("%d pairs of resourceVersion moves leave the sum unchanged: a pass would take changed inputs for the last pass's", n)
	}
}
