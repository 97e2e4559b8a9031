package cni

import (
	"context"
	"fmt"
	"net"

	"github.com/Microsoft/go-winio"
)

// DefaultAddress is the named pipe on which the agent serves the shim.
const DefaultAddress = `\\.\pipe\winnet-cni`

// Dial connects to the agent's named pipe at address.
func Dial(ctx context.Context, address string) (net.Conn, error) {
	conn, err := winio.DialPipeContext(ctx, address)
	if err != nil {
		return nil, fmt.Errorf("connecting to named pipe %q: %w", address, err)
	}
	return conn, nil
}
