package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/winnet-io/winnet/test/e2e/cluster"
	"github.com/winnet-io/winnet/test/hostcmd"
)

// preflightDemo runs `winnet-agent preflight` on node-a, as an operator runs it on a Windows node
// beside the agent, and returns its report: what the HNS simulator answered is marked [HNS
// simulator], what the simulated node's own Linux answered [Linux host], and what Linux has not
// (the Windows build, features, driver signing) is SKIP. Its exit status is the report's verdict
// (0, 1 or 2); only a preflight that could not run (3) is an error.
func preflightDemo(ctx context.Context, c *cluster.Cluster, kc string) (string, error) {
	a := c.Node("node-a")
	args := []string{"preflight", "--node-name", "node-a", "--kubeconfig", kc, "--ovsdb", a.OVS.DBSocket(), "--ovs-rundir", a.OVS.Dir,
		"--netns", a.NSPath, "--state-dir", a.StateDir, "--cni-conf-dir", a.CNIConfDir, "--audit-log-dir", a.AuditLogDir}
	out, err := hostcmd.CommandContext(ctx, filepath.Join(c.BinDir, "winnet-agent"), args...).Output()
	var exit interface{ ExitCode() int }
	if err != nil && (!errors.As(err, &exit) || exit.ExitCode() > 2) {
		return "", fmt.Errorf("winnet-agent preflight: %w: %s", err, out)
	}
	var s strings.Builder
	fmt.Fprintf(&s, "Preflight of node-a (winnet-agent preflight: each check PASS/WARN/FAIL with its fix; [HNS simulator]: what the simulator answered,\n"+
		"[Linux host]: the simulated node's own facts; SKIP: what a Linux node has not):\n%s\n", out)
	return s.String(), nil
}
