package metricsources

import (
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
