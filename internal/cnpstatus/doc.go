// Package cnpstatus is the bounded report of ClusterNetworkPolicies that an agent writes in its
// WindowsNodeNetwork's status and winnet-controller reads: buckets, digests and limits, shared by both.
package cnpstatus
