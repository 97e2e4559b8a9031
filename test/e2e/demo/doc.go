// Command winnet-demo runs the demo of `make demo`: a winnet cluster on this machine (a real API server,
// winnet-controller, two simulated nodes with their own Open vSwitch and winnet-agent, two Pods each and an
// external host) that stays up in the background until `make demo-down`. It is built from the e2e harness
// (package cluster) and lives here, not under cmd/, because it is a tool of the repository, not a product.
package main
