package peertrust

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/Microsoft/go-winio"
	"github.com/go-logr/logr"
)

// SpliceTrusted joins local to a new connection to the named pipe, once the pipe's server is SYSTEM or
// an administrator (Verifier); what names the pipe in logs ("OVSDB", "the switch's OpenFlow"). It
// closes both ends and returns when either side closes or ctx ends. A server that is not trusted gets
// nothing: local is closed without a byte sent.
func SpliceTrusted(ctx context.Context, log logr.Logger, local net.Conn, pipe, what string) {
	defer local.Close()
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	remote, err := winio.DialPipeContext(dctx, pipe)
	cancel()
	if err != nil {
		log.V(2).Info("Dialing a named pipe failed", "pipe", pipe, "what", what, "err", err.Error())
		return
	}
	defer remote.Close()
	if err := NewVerifier().Verify(remote); err != nil {
		log.Error(err, "Refusing a named pipe: its server is not SYSTEM or an administrator", "pipe", pipe, "what", what)
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(remote, local); done <- struct{}{} }()
	go func() { _, _ = io.Copy(local, remote); done <- struct{}{} }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// ServeSplices accepts connections on ln until the returned stop is called, and joins each to a new
// connection to pipe with SpliceTrusted. stop closes ln and waits for every splice to end.
func ServeSplices(ctx context.Context, log logr.Logger, ln net.Listener, pipe, what string) (stop func()) {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				if !errors.Is(err, net.ErrClosed) {
					log.Error(err, "Accepting connections to splice stopped", "pipe", pipe, "what", what)
				}
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				SpliceTrusted(sctx, log, conn, pipe, what)
			}()
		}
	}()
	return func() {
		cancel()
		_ = ln.Close()
		wg.Wait()
	}
}
