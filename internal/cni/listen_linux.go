package cni

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"time"
)

// staleProbeTimeout bounds the probe that tells a live socket from a stale one.
const staleProbeTimeout = time.Second

// Listen creates the agent's unix socket at address: it creates the parent directory (0700) if
// missing, removes a stale socket left by a previous agent, refuses to take over a socket someone
// still serves, and restricts the socket to its owner (0600). Closing the listener removes the socket.
func Listen(ctx context.Context, address string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(address), 0o700); err != nil {
		return nil, fmt.Errorf("creating directory for unix socket %q: %w", address, err)
	}
	if err := removeStaleSocket(ctx, address); err != nil {
		return nil, err
	}
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "unix", address)
	if err != nil {
		return nil, fmt.Errorf("listening on unix socket %q: %w", address, err)
	}
	if err := os.Chmod(address, 0o600); err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("restricting permissions of unix socket %q: %w", address, err)
	}
	return l, nil
}

// removeStaleSocket removes the socket at address unless a server answers on it. Anything at address
// that is not a socket is left alone and reported.
func removeStaleSocket(ctx context.Context, address string) error {
	fi, err := os.Lstat(address)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("inspecting %q: %w", address, err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("%q exists and is not a unix socket (mode %s)", address, fi.Mode())
	}
	probeCtx, cancel := context.WithTimeout(ctx, staleProbeTimeout)
	defer cancel()
	if conn, err := Dial(probeCtx, address); err == nil {
		_ = conn.Close()
		return fmt.Errorf("unix socket %q is served by another process", address)
	}
	if err := os.Remove(address); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing stale unix socket %q: %w", address, err)
	}
	return nil
}
