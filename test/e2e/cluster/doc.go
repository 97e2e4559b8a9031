// Package cluster builds a winnet cluster on one Linux machine for end-to-end tests and the demo: a
// real kube-apiserver and etcd, the winnet-controller binary, simulated nodes (each a network
// namespace with its own Open vSwitch and a winnet-agent process), Pods created through the
// winnet-cni shim by libcni, and an external host, all on a shared underlay; plus the traffic probes
// that check the data plane with real packets. Everything it creates carries a run prefix and is
// recorded in a run directory, so that Teardown and Sweep remove it by pid and by name even after
// the process that built it was killed.
package cluster
