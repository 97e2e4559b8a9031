//go:build !linux && !windows

package cni

import (
	"context"
	"errors"
	"fmt"
	"net"
)

// Listen is not supported on this platform.
func Listen(_ context.Context, address string) (net.Listener, error) {
	return nil, fmt.Errorf("listening on %q: %w", address, errors.ErrUnsupported)
}
