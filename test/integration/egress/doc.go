// Package egress_test runs a winnet-agent against a real API server and real Open vSwitch on a simulated
// node (test/framework): what the holder of an Egress counts of the traffic of its selected Pods.
package egress
