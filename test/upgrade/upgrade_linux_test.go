//go:build upgrade && linux

package upgrade

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/winnet-io/winnet/test/e2e/cluster"
)

// skewHold is how long each version skew is held (controller N with agents N-1 during the upgrade, controller
// N-1 with agents N during the rollback); WINNET_UPGRADE_SKEW_HOLD shortens it for trying the test.
func skewHold(t *testing.T) time.Duration {
	if v := os.Getenv("WINNET_UPGRADE_SKEW_HOLD"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("WINNET_UPGRADE_SKEW_HOLD=%q: %v", v, err)
		}
		return d
	}
	return 5 * time.Minute
}

// TestUpgrade starts the previous release's cluster, upgrades it to this tree's release and rolls it back, as
// helm upgrade, helm rollback and the agents' DaemonSet do, while probes measure what Pods see; it restarts every
// agent with its own release too (SIGTERM and SIGKILL). It prints one line per direction (make test-upgrade).
func TestUpgrade(t *testing.T) {
	prev, err := cluster.PreviousRelease()
	if err != nil {
		t.Fatal(err)
	}
	cur := cluster.CurrentRelease()
	if prev.Version == cur.Version {
		t.Fatalf("the previous release and this tree are both version %s: move hack/previous-release or VERSION", cur.Version)
	}
	ctx := context.Background()
	start := time.Now()
	c, err := cluster.Start(ctx, cluster.Options{Logf: logf, Kubelets: true, Release: prev, AgentReadiness: true,
		UnderlayCIDR: netip.MustParsePrefix("192.168.85.0/24"), ClusterCIDR: netip.MustParsePrefix("10.249.0.0/16")})
	if err != nil {
		t.Fatalf("starting release %s's cluster: %v", prev, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", c.LogTails(60))
		}
		if err := c.Close(); err != nil {
			t.Errorf("tearing the cluster down: %v", err)
		}
	})
	w := setUp(t, c, nil)
	logf("release %s's cluster up in %v", prev, time.Since(start).Round(time.Second))

	// The reference: the same probes for as long with nothing happening, on this machine at this moment
	// (the userspace datapath shares its two cores with everything else).
	w.phase(t, "idle", prev, prev, func() { time.Sleep(30 * time.Second) })

	hold := skewHold(t)
	// Upgrade, as the operator does it: the new CRDs first (helm does not touch crds/), then helm upgrade
	// (RBAC and admission policies, the controller's Deployment), then the agents' DaemonSet one node at a
	// time; each node's CNI shim is replaced after its agent (its installer runs at another moment).
	w.phase(t, "upgrade", prev, cur, func() {
		must(t, c.ApplyCRDs(ctx, cur))
		must(t, c.ApplyChart(ctx, cur))
		must(t, c.RestartControllerWith(cur))
		w.holdSkew(t, fmt.Sprintf("controller %s, agents %s", cur, prev), hold, false)
		for _, n := range c.Nodes() {
			w.rollAgent(t, n, cur, syscall.SIGTERM)
			w.churnPod(t, n) // agent N with shim N-1
			must(t, n.InstallShim(cur))
			w.churnPod(t, n)
		}
	})
	w.restarts(t, cur)

	// Rollback: helm rollback puts the previous chart's objects and controller back, the CRDs stay; the
	// DaemonSet rolls the agents back one node at a time, each node's shim first.
	w.phase(t, "rollback", cur, prev, func() {
		must(t, c.ApplyChart(ctx, prev))
		must(t, c.RestartControllerWith(prev))
		w.holdSkew(t, fmt.Sprintf("controller %s, agents %s", prev, cur), hold, true)
		for _, n := range c.Nodes() {
			must(t, n.InstallShim(prev))
			w.churnPod(t, n) // agent N with shim N-1
			w.rollAgent(t, n, prev, syscall.SIGTERM)
			w.churnPod(t, n)
		}
	})
	w.restarts(t, prev)
	logf("the run took %v", time.Since(start).Round(time.Second))
}

// restarts restarts every agent with its own release, SIGTERM then SIGKILL, one node at a time, each a phase of
// its own; what it installs must be what the agent that ran before had installed (a fresh start computes the
// same flows, groups and ports).
func (w *world) restarts(t *testing.T, r cluster.Release) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		what := map[syscall.Signal]string{syscall.SIGTERM: "restart-sigterm", syscall.SIGKILL: "restart-sigkill"}[sig]
		before := w.dumps(t, r.Version+"-"+what+"-before")
		w.phase(t, what, r, r, func() {
			for _, n := range w.c.Nodes() {
				w.rollAgent(t, n, r, sig)
			}
		})
		after := w.dumps(t, r.Version+"-"+what+"-after")
		for node, b := range before {
			d := diffLines(b, after[node])
			switch {
			case d == "":
			case r.Version == cluster.CurrentRelease().Version:
				t.Errorf("release %s on %s: a fresh start (%v) installs other flows, groups or ports than the agent before it had:\n%s", r, node, sig, d)
			default:
				// Releases before 0.2.0 give the Service numbers out afresh at every start.
				logf("  release %s on %s: a fresh start (%v) installs other flows, groups or ports than the agent before it had (a defect of that release):\n%s", r, node, sig, d)
			}
		}
	}
}
