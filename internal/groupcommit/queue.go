// Package groupcommit batches concurrent calls into one commit: calls that arrive while a commit is
// in flight are committed together by the next one, so that a costly round trip (an OpenFlow
// bundle, an nftables transaction waiting for an RCU grace period) is paid once per batch, not once
// per call.
package groupcommit

import "sync"

// Queue holds the items waiting for the next commit. Its zero value is ready to use.
type Queue[T any] struct {
	mu     sync.Mutex
	queued []T
}

// Do queues item, takes lock and, unless a holder of lock before it has already committed item,
// commits every queued item with one call of commit. It returns once item is committed: commit
// reports each item's outcome in the item itself (a pointer), which the caller may read after Do.
// lock serialises commits, and may serialise other work on what they change.
func (q *Queue[T]) Do(lock sync.Locker, item T, commit func(batch []T)) {
	q.DoAll(lock, []T{item}, commit)
}

// DoAll is Do for several items, queued together: they are committed by the same call of commit.
func (q *Queue[T]) DoAll(lock sync.Locker, items []T, commit func(batch []T)) {
	q.mu.Lock()
	q.queued = append(q.queued, items...)
	q.mu.Unlock()

	lock.Lock()
	defer lock.Unlock()
	q.mu.Lock()
	batch := q.queued
	q.queued = nil
	q.mu.Unlock()
	if len(batch) > 0 {
		commit(batch)
	}
}

// Len is the number of items waiting for a commit.
func (q *Queue[T]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queued)
}
