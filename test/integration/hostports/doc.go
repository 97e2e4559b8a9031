// Package hostports tests Pods' hostPorts (the CNI portMappings capability) with real packets on
// simulated nodes: every path that reaches a hostPort, the refusals of ADD, and the conflict with
// a Service's NodePort.
package hostports
