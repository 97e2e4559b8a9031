// Package metricsources keeps the sources of a Prometheus collector that reads the switch at scrape
// time: one agent's in production, several in the tests' process, whose series are added up.
package metricsources

import (
	"context"
	"sync"
)

// Set is a set of sources, safe for concurrent use. The zero value is empty and ready.
type Set[T comparable] struct {
	mu sync.Mutex
	m  map[T]struct{}
}

// Add adds a source.
func (s *Set[T]) Add(v T) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[T]struct{}{}
	}
	s.m[v] = struct{}{}
}

// Remove removes a source.
func (s *Set[T]) Remove(v T) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, v)
}

// List returns the sources, in no order.
func (s *Set[T]) List() []T {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]T, 0, len(s.m))
	for v := range s.m {
		out = append(out, v)
	}
	return out
}

// While adds v and removes it when ctx ends: a manager's Runnable (manager.RunnableFunc(func(ctx)
// error { return s.While(ctx, v) })), so that an agent's counters are read only while its manager
// runs.
func (s *Set[T]) While(ctx context.Context, v T) error {
	s.Add(v)
	<-ctx.Done()
	s.Remove(v)
	return nil
}
