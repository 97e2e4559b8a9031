// Package netpol benchmarks winnet-agent's NetworkPolicy realisation (`make bench-netpol`): one
// policy with 5,000 ipBlock rules (the shape of Antrea's RealizeNetworkPolicy5000), then 1,000
// policies on a node with 200 local Pods, and one address added to a selected set. The switch is
// observed through OpenFlow flow monitors and the API through watches, never by polling.
//
// Environment: BENCH_NETPOL_PROFILE=1 writes a CPU profile of the test process (the agent runs in
// it) over the 1,000 policies and the added address to bin/bench-netpol.cpu.pprof. The agent's log is
// bin/bench-netpol-agent.log.
package netpol
