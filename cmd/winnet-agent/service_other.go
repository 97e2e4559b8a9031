//go:build !windows

package main

import (
	"context"
	"errors"

	ctrl "sigs.k8s.io/controller-runtime"
)

// runServiceCommand reports that `winnet-agent service ...` exists only on Windows; other arguments
// are not a service command.
func runServiceCommand(args []string) (handled bool, err error) {
	if len(args) == 0 || args[0] != "service" {
		return false, nil
	}
	return true, errors.New("service mode (winnet-agent service install|uninstall|start|stop) is Windows-only; on Linux run winnet-agent under your init system")
}

// agentContext returns the context of the agent's main loop, ended by SIGINT or SIGTERM, and the
// function to call when the loop has returned (nothing to do outside the Windows SCM).
func agentContext() (ctx context.Context, done func()) {
	return ctrl.SetupSignalHandler(), func() {}
}

// defaultBundleLogs are the logs the support bundle takes when --log is not given: none outside
// Windows (the agent logs to stderr, which the init system or the Pod's runtime keeps).
func defaultBundleLogs() []string { return nil }

// defaultPreflightLogDir is the service's log directory preflight checks: none outside Windows.
func defaultPreflightLogDir() string { return "" }
