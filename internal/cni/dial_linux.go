package cni

import (
	"context"
	"fmt"
	"net"
)

// DefaultAddress is the unix socket on which the agent serves the shim.
const DefaultAddress = "/var/run/winnet/cni.sock"

// Dial connects to the agent's unix socket at address.
func Dial(ctx context.Context, address string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", address)
	if err != nil {
		return nil, fmt.Errorf("connecting to unix socket %q: %w", address, err)
	}
	return conn, nil
}
