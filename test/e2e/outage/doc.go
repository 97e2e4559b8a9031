// Package outage stops the API server of a simulated winnet cluster for a minute while Pods talk across
// nodes under a NetworkPolicy, sandboxes are made again and deleted, and checks that nothing needs it.
package outage
