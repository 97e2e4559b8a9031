//go:build !windows

package agent_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/internal/agent"
	"github.com/winnet-io/winnet/test/framework"
)

func TestPprofOnlyOnLoopback(t *testing.T) {
	for _, tc := range []struct {
		address string
		ok      bool
	}{
		{"", true}, {"0", true}, {"127.0.0.1:6060", true}, {"127.1.2.3:6060", true}, {"[::1]:6060", true}, {"localhost:6060", true},
		{":6060", false}, {"0.0.0.0:6060", false}, {"[::]:6060", false}, {"10.0.0.5:6060", false}, {"example.com:6060", false}, {"6060", false},
	} {
		t.Run(tc.address, func(t *testing.T) {
			g := NewWithT(t)
			err := agent.Options{NodeName: "n", PprofBindAddress: tc.address}.Validate()
			if tc.ok {
				g.Expect(err).NotTo(HaveOccurred())
			} else {
				g.Expect(err).To(MatchError(ContainSubstring("--pprof-bind-address")))
			}
		})
	}
}

// freeLoopbackPort returns a TCP port free on 127.0.0.1 when called.
func freeLoopbackPort(g Gomega) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestMetricsNeedATokenAllowedToGetThem starts the agent's manager against a real API server with
// metrics enabled: only a caller the API server allows get on /metrics gets them, over HTTPS
// (framework's CheckMetricsAccess: no token 401, another ServiceAccount 403, plain HTTP nothing).
func TestMetricsNeedATokenAllowedToGetThem(t *testing.T) {
	g := NewWithT(t)
	server, err := framework.StartAPIServer()
	if err != nil {
		t.Fatalf("this test needs a real kube-apiserver: %v", err)
	}
	t.Cleanup(func() { _ = server.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	address := fmt.Sprintf("127.0.0.1:%d", freeLoopbackPort(g))
	mgr, err := agent.NewManager(server.Config, agent.Options{NodeName: "node-a", MetricsBindAddress: address, HealthProbeBindAddress: "0",
		MetricsCertDir: t.TempDir()})
	g.Expect(err).NotTo(HaveOccurred())
	mctx, mcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() { mcancel(); <-done })

	g.Eventually(func() error { _, err := net.DialTimeout("tcp", address, time.Second); return err }).
		WithTimeout(30*time.Second).Should(Succeed(), "the metrics endpoint starts")
	g.Expect(server.CheckMetricsAccess(ctx, address)).To(Succeed())
	g.Expect(framework.ScrapeBuildInfo(ctx, server, address)).To(Succeed())
}
