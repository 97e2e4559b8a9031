// Package preflight tests the preflight's facts on a simulated node before winnet is installed: real
// OVS, real netlink in the node's network namespace, the real API server, no agent.
package preflight
