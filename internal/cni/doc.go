// Package cni implements the wire protocol between the winnet-cni shim and the winnet agent: request and response types, the shim-side client and dialers, and the agent-side listener and Serve helper.
package cni
