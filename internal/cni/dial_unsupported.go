//go:build !linux && !windows

package cni

import (
	"context"
	"errors"
	"fmt"
	"net"
)

// DefaultAddress is the address the agent would serve the shim on; this platform is not supported.
const DefaultAddress = "/var/run/winnet/cni.sock"

// Dial is not supported on this platform.
func Dial(_ context.Context, address string) (net.Conn, error) {
	return nil, fmt.Errorf("connecting to %q: %w", address, errors.ErrUnsupported)
}
