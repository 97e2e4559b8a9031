// Package benchutil holds what the benchmarks under test/bench share (build tag bench): building and
// starting the real winnet-agent binary on a simulated node, its CPU time and RSS, and its profiles;
// watching for a flow; dumping one category of flows and installing them with ovs-ofctl, the
// reference; the line helpers (milliseconds, the load average).
package benchutil
