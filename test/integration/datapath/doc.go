// Package datapath tests, with real packets on a simulated node (real OVS userspace datapath, real
// netlink, the real node-network reconciler), what the base pipeline does with traffic the Windows
// datapath handles differently: host traffic conntrack cannot track, and ICMP errors for the host.
package datapath
