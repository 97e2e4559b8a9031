//go:build !windows

package controller_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/internal/controller"
	"github.com/winnet-io/winnet/test/framework"
)

// TestMetricsNeedATokenAllowedToGetThem starts winnet-controller's manager with metrics enabled:
// only a caller the API server allows get on /metrics gets them, over HTTPS (no token 401, another
// ServiceAccount 403, plain HTTP nothing), as the agent's.
func TestMetricsNeedATokenAllowedToGetThem(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	address := l.Addr().String()
	g.Expect(l.Close()).To(Succeed())

	mgr, err := controller.NewManager(server.Config, controller.Options{MetricsBindAddress: address, HealthProbeBindAddress: "0", Namespace: "default", SeveralPerProcess: true})
	g.Expect(err).NotTo(HaveOccurred())
	mctx, mcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() { mcancel(); <-done })

	g.Eventually(func() error {
		c, err := net.DialTimeout("tcp", address, time.Second)
		if err == nil {
			c.Close()
		}
		return err
	}).
		WithTimeout(30*time.Second).Should(Succeed(), fmt.Sprintf("the metrics endpoint starts on %s", address))
	g.Expect(server.CheckMetricsAccess(ctx, address)).To(Succeed())
	g.Expect(framework.ScrapeBuildInfo(ctx, server, address)).To(Succeed())
}
