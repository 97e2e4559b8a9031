// Package ovstest starts private ovsdb-server and ovs-vswitchd instances (userspace datapath) for integration tests and benchmarks.
package ovstest
