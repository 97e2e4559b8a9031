package groupcommit

import (
	"sync"
	"testing"

	. "github.com/onsi/gomega"
)

type call struct {
	n         int
	committed bool
}

// TestQueueCommitsWaitingCallsTogether holds a commit in flight while calls queue behind it: one
// commit serves them all, and every call returns with its item committed.
func TestQueueCommitsWaitingCallsTogether(t *testing.T) {
	g := NewWithT(t)
	var (
		q       Queue[*call]
		lock    sync.Mutex
		batches [][]int
	)
	commit := func(batch []*call) {
		var ns []int
		for _, c := range batch {
			c.committed = true
			ns = append(ns, c.n)
		}
		batches = append(batches, ns)
	}

	lock.Lock() // a commit in flight
	var wg sync.WaitGroup
	calls := make([]*call, 10)
	for i := range calls {
		calls[i] = &call{n: i}
		wg.Go(func() { q.Do(&lock, calls[i], commit) })
	}
	g.Eventually(q.Len).Should(Equal(10))
	lock.Unlock()
	wg.Wait()

	g.Expect(batches).To(HaveLen(1), "one commit for the ten calls that waited")
	g.Expect(batches[0]).To(ConsistOf(0, 1, 2, 3, 4, 5, 6, 7, 8, 9))
	for _, c := range calls {
		g.Expect(c.committed).To(BeTrue())
	}
	g.Expect(q.Len()).To(BeZero())

	q.Do(&lock, &call{n: 10}, commit)
	g.Expect(batches).To(HaveLen(2), "a call alone commits at once")
}
