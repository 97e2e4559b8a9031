// Package memlimit gives the Go runtime a soft memory limit below the container's memory limit, so
// that the garbage collector works harder as a winnet process nears its limit instead of the process
// being killed there. Without it the runtime lets the heap grow to twice what is live before it
// collects (GOGC=100): bench-scale measured winnet-agent at 179 MB live and 544 MB RSS on 5,000 Nodes
// with 10,000 Services, over the chart's former 512Mi limit (docs/operations.md, "Sizing").
// winnet-agent also collects at a lower target than the runtime's default (AgentGCPercent).
package memlimit

import (
	"fmt"
	"runtime/debug"
	"strconv"
	"strings"
)

// EnvVar is the environment variable the chart fills with the container's memory limit in bytes (the
// downward API's resourceFieldRef limits.memory; without a limit, the node's allocatable memory).
const EnvVar = "WINNET_MEMORY_LIMIT"

// Percent of the container's limit given to the Go runtime. The rest is for what the runtime does
// not count and the limit does: the binary's pages (about 65 MB of winnet-agent's RSS), and the
// runtime's own slack between collections.
const Percent = 85

// Apply sets the runtime's soft memory limit to Percent of the bytes in EnvVar, read with getenv. It
// does nothing when GOMEMLIMIT is set (an operator's explicit choice wins) or EnvVar is empty. It
// returns the limit it set (0 when none), and an error for a value that is no positive byte count.
func Apply(getenv func(string) string) (int64, error) {
	if getenv("GOMEMLIMIT") != "" {
		return 0, nil
	}
	v := strings.TrimSpace(getenv(EnvVar))
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%s=%q: want the container's memory limit in bytes", EnvVar, v)
	}
	limit := n / 100 * Percent
	debug.SetMemoryLimit(limit)
	return limit, nil
}
