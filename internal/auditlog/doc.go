// Package auditlog writes the agent's audit log of policy decisions (winnet-audit.log): one JSON
// object per line, deduplicated per 5-tuple and rule, rate-limited and suspended per owner (the
// namespace or ClusterNetworkPolicy whose rule decided) under a node-wide ceiling, with a summary
// line of what was not written, rotated by size, in a directory only the node's administrators can
// change (internal/securefs). Its queue never blocks the OpenFlow reader that feeds it: what does
// not fit is counted, not waited for.
package auditlog
