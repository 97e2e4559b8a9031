package networkpolicy

import "hash/maphash"

// setSum hashes a set of tuples in any order, to tell whether two passes read the same: it adds up
// each tuple's hash. Each tuple's hash must mix every byte into every bit. FNV-1a, which it used
// before, moves its value by a small multiple of a few constants when the last bytes change (a
// resourceVersion counting up), so the moves of two objects changed between passes cancelled out
// in the sum for 0.4% of pairs (TestSetSumDoesNotCancel): a full pass then took a changed
// NetworkPolicy, Namespace and Pods for the inputs of the last pass and kept its flows until the
// next change (conformance-netpol, 30 Nov 2026).
type setSum struct{ sum uint64 }

// setSumSeed is the process's seed: sums are compared within a process only.
var setSumSeed = maphash.MakeSeed()

// add adds one tuple.
func (s *setSum) add(parts ...string) {
	var h maphash.Hash
	h.SetSeed(setSumSeed)
	for _, p := range parts {
		_, _ = h.WriteString(p)
		_ = h.WriteByte(0)
	}
	s.sum += h.Sum64()
}
