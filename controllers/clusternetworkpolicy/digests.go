package clusternetworkpolicy

import (
	"maps"
	"slices"
	"sync"

	"github.com/winnet-io/winnet/internal/cnpstatus"
)

// keptStates is how many states of each bucket the reconciler remembers.
const keptStates = 8

// bucketState is a bucket's policies, by name and generation, as the reconciler read them once.
type bucketState struct {
	digest      string
	generations map[string]int64
}

// digests remembers the last states of each bucket of policies (cnpstatus.Bucket) the reconciler
// read, so that a node whose digest is one of them is known to have compiled the generations of
// that state: a node that has not yet compiled a policy's change is behind on that policy only,
// not on the others of its bucket.
type digests struct {
	mu     sync.Mutex
	states map[int][]bucketState
}

// observe records the bucket's current state (its policies, by name and generation) and returns
// its digest.
func (d *digests) observe(bucket int, generations map[string]int64) string {
	digest := cnpstatus.Digest(generations)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.states == nil {
		d.states = map[int][]bucketState{}
	}
	states := slices.DeleteFunc(d.states[bucket], func(s bucketState) bool { return s.digest == digest })
	states = append([]bucketState{{digest: digest, generations: maps.Clone(generations)}}, states...)
	if len(states) > keptStates {
		states = states[:keptStates]
	}
	d.states[bucket] = states
	return digest
}

// generation is the policy's generation in the bucket's state of that digest; false when the
// state is not remembered or does not hold the policy.
func (d *digests) generation(bucket int, digest, name string) (int64, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range d.states[bucket] {
		if s.digest == digest {
			g, ok := s.generations[name]
			return g, ok
		}
	}
	return 0, false
}
