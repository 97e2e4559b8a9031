// Package cni tests winnet's Pod networking end to end: libcni, as container runtimes use it, runs
// the built winnet-cni shim with real network namespaces against the agent of a simulated node (real
// OVS, netlink, API server; the Linux-backed HNS simulator).
package cni
