package memlimit

import "runtime/debug"

// AgentGCPercent is winnet-agent's garbage collection target (GOGC): the heap may grow to 1.5 times
// what the last collection left live, instead of the runtime's default of twice. An agent's memory is
// mostly what it must hold (every route, every Service it serves, every policy: 163 MB live at 5,000
// Nodes and 10,000 Services) and little of it is garbage made per second when the cluster is quiet,
// so the lower target costs little CPU and saves a quarter of the heap's footprint: docs/benchmarks.md
// has the numbers of the run that chose it (bench-scale, issue 64).
const AgentGCPercent = 50

// SetGCPercent sets the collector's target to percent, unless GOGC is set: an operator's explicit
// choice wins (the runtime has read it already). It returns the target now in effect, or -1 for
// GOGC=off.
func SetGCPercent(getenv func(string) string, percent int) int {
	if getenv("GOGC") != "" {
		current := debug.SetGCPercent(100)
		debug.SetGCPercent(current)
		return current
	}
	debug.SetGCPercent(percent)
	return percent
}
