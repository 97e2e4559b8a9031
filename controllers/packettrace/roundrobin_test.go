package packettrace

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
)

// TestNextRoundRobin: the next tag goes to the oldest Pending trace of the first namespace after the
// one served last (in name order, wrapping); Running traces wait for nothing.
func TestNextRoundRobin(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pending := func(ns, name string, age int) viewed {
		return viewed{key: types.NamespacedName{Namespace: ns, Name: name}, created: t0.Add(time.Duration(-age) * time.Second), phase: networkv1alpha1.PacketTracePending}
	}
	v := &view{traces: []viewed{
		{key: types.NamespacedName{Namespace: "a", Name: "running"}, created: t0.Add(-time.Hour), phase: networkv1alpha1.PacketTraceRunning, tag: 1},
		pending("b", "young", 1), pending("b", "old", 50), pending("b", "old-too", 50),
		pending("d", "only", 99),
	}}
	for _, tc := range []struct {
		lastServed string
		want       string
	}{
		{"", "b/old"},    // the first namespace; its oldest, ties by name
		{"a", "b/old"},   // a has no Pending trace
		{"b", "d/only"},  // the next namespace, though b's are waiting
		{"c", "d/only"},  // a namespace that no longer has any
		{"d", "b/old"},   // wraps
		{"zzz", "b/old"}, // past the last one
	} {
		g := NewWithT(t)
		next, ok := v.next(tc.lastServed)
		g.Expect(ok).To(BeTrue())
		g.Expect(next.String()).To(Equal(tc.want), "after %q", tc.lastServed)
	}
	_, ok := (&view{traces: v.traces[:1]}).next("")
	NewWithT(t).Expect(ok).To(BeFalse(), "no Pending trace")
	NewWithT(t).Expect(v.freeTag(1)).To(BeZero(), "tag 1 is held")
	NewWithT(t).Expect(v.freeTag(3)).To(BeEquivalentTo(2))
}
