// Package e2e runs winnet end to end on one machine: a real API server, winnet-controller, three simulated
// nodes with their own Open vSwitch and winnet-agent processes, Pods set up through winnet-cni, an external
// host, and real packets (see package cluster). It asserts the connectivity matrix and the dynamic scenarios
// of issue 7 and prints the measured numbers.
package e2e
