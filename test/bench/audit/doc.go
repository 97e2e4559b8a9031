// Package audit benchmarks what the audit log of policy decisions costs (`make bench-audit`): new
// TCP connections at a fixed rate from one Pod to another through a NetworkPolicy rule, with the
// namespace's audit log off and on, in one run: the agent's CPU (it runs in the test process), the
// node's ovs-vswitchd CPU (from /proc), the packet-ins, the lines written and what was dropped.
// TestBenchAuditFairness measures what one audited namespace's flood of new connections costs
// another audited namespace of the node: the other's lines written per connection, alone and
// during the flood.
// The connections come from a python3 load generator in the client Pod's network namespace, a
// process of its own whose CPU is not counted.
package audit
