// Package uninstall tests `helm uninstall`: the chart's pre-delete hook command, rendered by helm and
// run against a real API server, with simulated Windows nodes (real OVS, netlink, agents; the
// Linux-backed HNS simulator) running Pods that containerd's go-cni deletes after the agents are gone.
package uninstall
