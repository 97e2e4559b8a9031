//go:build linux && bench

package scale

import (
	"slices"
	"testing"
)

// TestBenchScaleSizes: the environment variables give the documented sizes (doc.go), in
// particular the two 150,000-Pod runs: the full shape from 10,000 Pods, and with only Pods growing
// from the first default size whose Nodes hold 150,000 Pods (30,000: 1,000 Nodes of 150 Pods).
// It starts no cluster.
func TestBenchScaleSizes(t *testing.T) {
	for _, tc := range []struct {
		sizes, k150, fixed string
		want               []int
		wantNodes          int
	}{
		{want: []int{10000, 30000, 60000}},
		{k150: "1", want: []int{10000, 30000, 60000, 150000}},
		{fixed: "1", want: []int{10000, 30000, 60000}, wantNodes: 334},
		{k150: "1", fixed: "1", want: []int{30000, 60000, 150000}, wantNodes: 1000},
		{sizes: "2000,1000", want: []int{1000, 2000}},
		{sizes: "2000,4000", fixed: "1", want: []int{2000, 4000}, wantNodes: 67},
	} {
		t.Setenv("BENCH_SCALE_SIZES", tc.sizes)
		t.Setenv("BENCH_SCALE_150K", tc.k150)
		t.Setenv("BENCH_SCALE_FIXED", tc.fixed)
		got := sizes(t)
		if !slices.Equal(got, tc.want) {
			t.Errorf("BENCH_SCALE_SIZES=%q BENCH_SCALE_150K=%q BENCH_SCALE_FIXED=%q: sizes %v, want %v", tc.sizes, tc.k150, tc.fixed, got, tc.want)
			continue
		}
		if tc.fixed == "" {
			continue
		}
		s, perNode, err := fixedShape(got)
		if err != nil {
			t.Errorf("sizes %v with only Pods growing: %v", got, err)
			continue
		}
		if s.nodes != tc.wantNodes || perNode > maxPerNode {
			t.Errorf("sizes %v with only Pods growing: %d Nodes of %d Pods, want %d Nodes of at most %d", got, s.nodes, perNode, tc.wantNodes, maxPerNode)
		}
	}
	// The full shape's largest size is Kubernetes' thresholds.
	if s := shapeOf(150000); s.nodes != 5000 || s.services != 10000 || s.policies != 10000 {
		t.Errorf("150,000 Pods: %d Nodes, %d Services, %d policies, want 5,000, 10,000 and 10,000", s.nodes, s.services, s.policies)
	}
	// An explicit first size too small for the largest is refused with the size it needs.
	if _, _, err := fixedShape([]int{10000, 150000}); err == nil {
		t.Error("only Pods growing from 10,000 to 150,000 Pods: no error, want one (334 Nodes hold at most 84,502)")
	}
}
