//go:build !windows

package framework

import (
	"context"
	"fmt"
	"os"
	"testing"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/winnet-io/winnet/internal/controller"
)

// MainOptions configure Main.
type MainOptions struct {
	// Controller, when set, runs winnet-controller against the server while the tests run.
	Controller *controller.Options
}

// Main is a package's TestMain for tests against the real API server: it starts the server into
// *server, optionally winnet-controller, runs the tests and stops everything. A server that cannot
// start fails the run with what to do; what names the tests in that message.
func Main(m *testing.M, what string, server **APIServer, opts MainOptions) {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	s, err := StartAPIServer()
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: the %s need a real kube-apiserver: %v\n", what, err)
		os.Exit(1)
	}
	*server = s
	stopController := func() {}
	if opts.Controller != nil {
		mgr, err := controller.NewManager(s.Config, *opts.Controller)
		if err != nil {
			_ = s.Stop()
			fmt.Fprintf(os.Stderr, "FAIL: creating winnet-controller for the %s: %v\n", what, err)
			os.Exit(1)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- mgr.Start(ctx) }()
		stopController = func() {
			cancel()
			if err := <-done; err != nil {
				fmt.Fprintf(os.Stderr, "winnet-controller stopped: %v\n", err)
			}
		}
	}
	code := m.Run()
	stopController()
	if err := s.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "stopping the API server: %v\n", err)
	}
	os.Exit(code)
}
