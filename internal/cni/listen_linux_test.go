package cni

import (
	"context"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
)

func TestListenUnixSocket(t *testing.T) {
	tests := []struct {
		name string
		// prepare puts something at address before Listen; it returns a cleanup or nil.
		prepare func(g *WithT, address string) func()
		wantErr string
		// wantFile is the content a pre-existing regular file must still have afterwards.
		wantFile string
	}{
		{
			name: "parent directory is created 0700",
		},
		{
			name: "stale socket from a previous agent is replaced",
			prepare: func(g *WithT, address string) func() {
				g.Expect(os.MkdirAll(filepath.Dir(address), 0o700)).To(Succeed())
				l, err := net.Listen("unix", address)
				g.Expect(err).NotTo(HaveOccurred())
				l.(*net.UnixListener).SetUnlinkOnClose(false)
				g.Expect(l.Close()).To(Succeed())
				fi, err := os.Lstat(address)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(fi.Mode().Type()).To(Equal(fs.ModeSocket), "the stale socket is left behind")
				return nil
			},
		},
		{
			name: "socket served by another process is not taken over",
			prepare: func(g *WithT, address string) func() {
				g.Expect(os.MkdirAll(filepath.Dir(address), 0o700)).To(Succeed())
				l, err := net.Listen("unix", address)
				g.Expect(err).NotTo(HaveOccurred())
				go func() {
					for {
						c, err := l.Accept()
						if err != nil {
							return
						}
						_ = c.Close()
					}
				}()
				return func() { _ = l.Close() }
			},
			wantErr: "is served by another process",
		},
		{
			name: "a regular file is never removed",
			prepare: func(g *WithT, address string) func() {
				g.Expect(os.MkdirAll(filepath.Dir(address), 0o700)).To(Succeed())
				g.Expect(os.WriteFile(address, []byte("precious"), 0o644)).To(Succeed())
				return nil
			},
			wantErr:  "exists and is not a unix socket",
			wantFile: "precious",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			dir := filepath.Join(t.TempDir(), "run", "winnet")
			address := filepath.Join(dir, "cni.sock")
			if tt.prepare != nil {
				if cleanup := tt.prepare(g, address); cleanup != nil {
					defer cleanup()
				}
			}

			l, err := Listen(context.Background(), address)
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
				g.Expect(err.Error()).To(ContainSubstring(address))
				if tt.wantFile != "" {
					g.Expect(os.ReadFile(address)).To(BeEquivalentTo(tt.wantFile))
				}
				return
			}
			g.Expect(err).NotTo(HaveOccurred())

			dfi, err := os.Stat(dir)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(dfi.Mode().Perm()).To(Equal(fs.FileMode(0o700)))
			fi, err := os.Lstat(address)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(fi.Mode().Type()).To(Equal(fs.ModeSocket))
			g.Expect(fi.Mode().Perm()).To(Equal(fs.FileMode(0o600)))

			// The socket works, and closing the listener removes it.
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				done <- Serve(ctx, l, HandlerFunc(func(context.Context, Request) Response { return Response{} }))
			}()
			resp, err := NewClient(ClientOptions{Address: address}).Do(context.Background(), addRequest)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(resp.Error).To(BeNil())
			cancel()
			g.Expect(<-done).To(Succeed())
			_, err = os.Lstat(address)
			g.Expect(err).To(MatchError(fs.ErrNotExist))
		})
	}
}
