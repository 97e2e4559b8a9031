//go:build !linux && !(windows && (amd64 || arm64))

package hostnet

import (
	"context"
	"net/netip"
)

type unsupportedNodePorts struct{}

var _ NodePortNAT = unsupportedNodePorts{}

// NewNodePortNAT returns a NodePortNAT whose calls fail with errors.ErrUnsupported.
func NewNodePortNAT(Options) NodePortNAT { return unsupportedNodePorts{} }

func (unsupportedNodePorts) ReconcileNodePorts(context.Context, netip.Addr, []NodePort) error {
	return errUnsupported()
}
