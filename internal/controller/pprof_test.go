//go:build !windows

package controller_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/internal/controller"
)

// TestPprofOnlyOnLoopback: winnet-controller's profiler (make bench-scale reads its heap there) is
// off by default and binds only to a loopback address, as the agent's: the profiler has no
// authentication, so another address is refused before anything starts.
func TestPprofOnlyOnLoopback(t *testing.T) {
	for _, address := range []string{":6060", "0.0.0.0:6060", "[::]:6060", "10.0.0.5:6060", "example.com:6060", "6060"} {
		t.Run(address, func(t *testing.T) {
			g := NewWithT(t)
			_, err := controller.NewManager(server.Config, controller.Options{MetricsBindAddress: "0", HealthProbeBindAddress: "0",
				PprofBindAddress: address, Namespace: "default", SeveralPerProcess: true})
			g.Expect(err).To(MatchError(ContainSubstring("--pprof-bind-address")))
		})
	}
}

// TestPprofServesTheHeapOnLoopback: with a loopback address, the profiler serves the heap profile
// whose HeapAlloc make bench-scale reads.
func TestPprofServesTheHeapOnLoopback(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	address := l.Addr().String()
	g.Expect(l.Close()).To(Succeed())

	mgr, err := controller.NewManager(server.Config, controller.Options{MetricsBindAddress: "0", HealthProbeBindAddress: "0",
		PprofBindAddress: address, Namespace: "default", SeveralPerProcess: true})
	g.Expect(err).NotTo(HaveOccurred())
	mctx, mcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() { mcancel(); <-done })

	g.Eventually(func() (string, error) {
		resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/heap?debug=1", address))
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return string(body), err
	}).WithTimeout(30*time.Second).Should(ContainSubstring("# HeapAlloc = "), "the heap profile on %s", address)
}
