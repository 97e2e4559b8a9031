// Package benchutil holds what the benchmarks under test/bench share (build tag bench): building and
// starting the real winnet-agent binary on a simulated node, its CPU time and RSS, and its profiles.
package benchutil
