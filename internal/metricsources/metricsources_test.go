package metricsources

import (
	"context"
	"runtime"
	"slices"
	"testing"
)

func TestSet(t *testing.T) {
	var s Set[int]
	if got := s.List(); len(got) != 0 {
		t.Fatalf("empty set lists %v", got)
	}
	s.Add(1)
	s.Add(2)
	s.Add(1)
	s.Remove(3)
	got := s.List()
	slices.Sort(got)
	if !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("got %v, want [1 2]", got)
	}
	s.Remove(1)
	if got := s.List(); !slices.Equal(got, []int{2}) {
		t.Fatalf("got %v, want [2]", got)
	}
}

func TestWhile(t *testing.T) {
	var s Set[int]
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.While(ctx, 7) }()
	for len(s.List()) == 0 {
		runtime.Gosched()
	}
	if got := s.List(); !slices.Equal(got, []int{7}) {
		t.Fatalf("while running: %v", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("While: %v", err)
	}
	if got := s.List(); len(got) != 0 {
		t.Fatalf("after the context ended: %v", got)
	}
}
