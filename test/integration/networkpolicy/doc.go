// Package networkpolicy holds the integration tests of the NetworkPolicy reconciler: real API
// server, in-process agents on two simulated nodes with real OVS, Pods attached through the CNI
// path, and real TCP and UDP packets between Pods while policies, Pod labels and Namespace labels
// change.
package networkpolicy
