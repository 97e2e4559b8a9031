// Package agent wires winnet-agent: the per-node manager whose caches see only the node's own
// objects, and the reconcilers that converge the node's network.
package agent
