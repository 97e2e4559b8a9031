// Package clusternetworkpolicy writes the conditions of ClusterNetworkPolicies (winnet-controller)
// from what the agents report of them in their WindowsNodeNetworks' status.
package clusternetworkpolicy
