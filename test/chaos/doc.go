// Package chaos kills winnet-agent, ovs-vswitchd and ovsdb-server at random moments while Pods are added and
// deleted through the CNI shim, and checks that every live Pod is reachable and nothing leaks.
package chaos
