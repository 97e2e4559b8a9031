package ovsdb

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/Microsoft/go-winio"
	"github.com/go-logr/logr"
)

// DefaultAddress is the named pipe OVS for Windows serves the database on.
const DefaultAddress = `\\.\pipe\C:openvswitchvarrunopenvswitchdb.sock`

// dialEndpoint bridges libovsdb, which dials only tcp/ssl/unix endpoints, to
// OVS's named pipe: it listens on a private AF_UNIX socket (supported since
// Windows 10 1803) and splices every accepted connection onto a fresh pipe
// connection. OVSDB is never exposed on TCP.
func dialEndpoint(ctx context.Context, log logr.Logger, pipe string) (string, func(), error) {
	dir, err := os.MkdirTemp("", "winnet-ovsdb")
	if err != nil {
		return "", nil, fmt.Errorf("creating directory for the OVSDB pipe bridge: %w", err)
	}
	sock := filepath.Join(dir, "db.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, fmt.Errorf("listening on %q to bridge named pipe %q: %w", sock, pipe, err)
	}
	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				if !errors.Is(err, net.ErrClosed) {
					log.Error(err, "Accepting on the OVSDB pipe bridge stopped")
				}
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				splice(bctx, log, conn, pipe)
			}()
		}
	}()
	closeFn := func() {
		cancel()
		_ = ln.Close()
		wg.Wait()
		_ = os.RemoveAll(dir)
	}
	return "unix:" + sock, closeFn, nil
}

func splice(ctx context.Context, log logr.Logger, local net.Conn, pipe string) {
	defer local.Close()
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	remote, err := winio.DialPipeContext(dctx, pipe)
	cancel()
	if err != nil {
		log.V(2).Info("Dialing OVSDB named pipe failed", "pipe", pipe, "err", err.Error())
		return
	}
	defer remote.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(remote, local); done <- struct{}{} }()
	go func() { _, _ = io.Copy(local, remote); done <- struct{}{} }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}
