// Package cluster holds winnet-controller's reconcilers: each Node yields a RemoteSubnetRoute (and,
// for Windows nodes, a default WindowsNodeNetwork), and overlapping routes are reported as conflicts.
package cluster
