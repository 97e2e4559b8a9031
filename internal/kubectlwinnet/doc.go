// Package kubectlwinnet is the kubectl plugin kubectl-winnet: `kubectl winnet trace` runs a
// PacketTrace and prints its hops, `kubectl winnet status` summarises every winnet node.
package kubectlwinnet
