// Package routes benchmarks winnet-agent's remote routes at cluster scale (`make bench-routes`).
//
// Environment: BENCH_ROUTES_SIZES (e.g. "5000"; default 1000,5000,10000), BENCH_AGENT_LOG_LEVEL
// (e.g. "debug": per-phase timings in bin/bench-<size>.log), BENCH_ROUTES_PROFILE=1 (CPU profile of
// the agent from its start through convergence and a heap profile after it, in
// bin/bench-<size>.{cpu,heap}.pprof). winnet-controller's log is bin/bench-controller.log. The added
// route is observed through an OpenFlow flow monitor and API watches, never by polling.
package routes
