// Package services holds the integration tests of the Service reconciler: real API server,
// in-process agents on simulated nodes with real OVS, Pods attached through the CNI path, and real
// TCP and UDP packets to ClusterIPs and NodePorts.
package services
