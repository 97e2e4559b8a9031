// Package cni benchmarks Pod networking (`make bench-cni`): CNI ADD and DEL through the real shim and
// the real winnet-agent on a simulated node with real OVS, against host-local IPAM alone.
package cni
