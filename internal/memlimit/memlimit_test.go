package memlimit

import (
	"math"
	"runtime/debug"
	"testing"

	. "github.com/onsi/gomega"
)

// TestApply: the container's limit gives the runtime a soft limit of 85% of it; GOMEMLIMIT set by the
// operator, an empty variable or a bad value leave the runtime's limit alone.
func TestApply(t *testing.T) {
	g := NewWithT(t)
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

	got, err := Apply(env(map[string]string{EnvVar: "536870912"}))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(BeEquivalentTo(536870912 / 100 * 85))
	g.Expect(debug.SetMemoryLimit(-1)).To(Equal(got), "the runtime's soft limit")

	debug.SetMemoryLimit(math.MaxInt64)
	for _, m := range []map[string]string{
		{EnvVar: "536870912", "GOMEMLIMIT": "300MiB"},
		{},
		{EnvVar: " "},
	} {
		got, err := Apply(env(m))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got).To(BeZero())
		g.Expect(debug.SetMemoryLimit(-1)).To(BeEquivalentTo(int64(math.MaxInt64)), "%v: untouched", m)
	}
	for _, bad := range []string{"512Mi", "-1", "0"} {
		_, err := Apply(env(map[string]string{EnvVar: bad}))
		g.Expect(err).To(MatchError(ContainSubstring("want the container's memory limit in bytes")), bad)
		g.Expect(debug.SetMemoryLimit(-1)).To(BeEquivalentTo(int64(math.MaxInt64)), "%q: untouched", bad)
	}
}

// TestSetGCPercent: the agent's target is set unless GOGC is, which the runtime read at start.
func TestSetGCPercent(t *testing.T) {
	g := NewWithT(t)
	before := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(before) })
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

	g.Expect(SetGCPercent(env(nil), AgentGCPercent)).To(Equal(AgentGCPercent))
	g.Expect(debug.SetGCPercent(AgentGCPercent)).To(Equal(AgentGCPercent), "the runtime's target")

	debug.SetGCPercent(80) // as the runtime would have set it from GOGC=80
	g.Expect(SetGCPercent(env(map[string]string{"GOGC": "80"}), AgentGCPercent)).To(Equal(80))
	g.Expect(debug.SetGCPercent(80)).To(Equal(80), "untouched")
	debug.SetGCPercent(-1)
	g.Expect(SetGCPercent(env(map[string]string{"GOGC": "off"}), AgentGCPercent)).To(Equal(-1))
	g.Expect(debug.SetGCPercent(-1)).To(Equal(-1), "untouched")
}
