package cni

import (
	"context"
	"fmt"
	"net"

	"github.com/Microsoft/go-winio"
)

// PipeSecurityDescriptor grants full access to the named pipe to LocalSystem (SY) and the built-in
// Administrators group (BA) only, with a protected DACL (no inherited entries). kubelet and containerd
// run as one of them.
const PipeSecurityDescriptor = "D:P(A;;GA;;;SY)(A;;GA;;;BA)"

// Listen creates the agent's named pipe at address, accessible only to SYSTEM and Administrators.
// It fails if another process already serves that pipe.
func Listen(ctx context.Context, address string) (net.Listener, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("listening on named pipe %q: %w", address, err)
	}
	l, err := winio.ListenPipe(address, &winio.PipeConfig{
		SecurityDescriptor: PipeSecurityDescriptor,
		InputBufferSize:    64 << 10,
		OutputBufferSize:   64 << 10,
	})
	if err != nil {
		return nil, fmt.Errorf("listening on named pipe %q: %w", address, err)
	}
	return l, nil
}
