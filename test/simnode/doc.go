//go:build linux

// Package simnode builds simulated nodes on one Linux machine for integration and e2e tests: network namespaces joined by veths to a shared Linux-bridge underlay with an "external" host, optionally each with its own userspace Open vSwitch.
package simnode
