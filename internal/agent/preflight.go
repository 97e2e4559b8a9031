package agent

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/nodenetwork"
	"github.com/winnet-io/winnet/internal/preflight"
)

// PreflightOptions are the preflight's options for the agent's own flags.
func PreflightOptions(nodeName string, opts HostOptions) preflight.Options {
	opts = opts.withDefaults()
	p := preflight.Options{
		NodeName: nodeName, HNSNetwork: DefaultHNSNetwork, Bridge: networkv1alpha1.DefaultBridgeName,
		StateDir: opts.StateDir, CNIConfDir: opts.CNIConfDir, AuditLogDir: opts.AuditLog.Dir,
		OVSDBAddress: opts.OVSDBAddress, OVSRunDir: opts.OVSRunDir, NetNSPath: opts.NetNSPath,
	}
	if opts.CNIShimPath != "" {
		p.CNIBinDir = filepath.Dir(opts.CNIShimPath)
	}
	return p
}

// preflightTimeout bounds the agent's preflight: a fact not gathered by then is reported as such.
const preflightTimeout = 2 * time.Minute

// setupPreflight runs the preflight once the manager has started, beside the reconcilers and
// blocking none of them, and hands its result to the node network reconciler, which writes it as
// the Preflight condition and records its Event.
func setupPreflight(mgr manager.Manager, nodeName string, opts HostOptions, into *nodenetwork.Preflight) error {
	popts := PreflightOptions(nodeName, opts)
	popts.Reader = mgr.GetAPIReader()
	popts.ServerTime = preflight.APIServerTime(mgr.GetConfig(), nil)
	return mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		log := ctrl.LoggerFrom(ctx).WithName("preflight")
		log.Info("Checking the node's fitness for winnet")
		gctx, cancel := context.WithTimeout(ctx, preflightTimeout)
		rep := preflight.Run(gctx, preflight.Checks(), preflight.Gather(gctx, popts))
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		for _, r := range rep.Results {
			if r.Status == preflight.Fail || r.Status == preflight.Warn {
				log.Info("Preflight check", "check", r.Name, "status", r.Status, "detail", r.Detail, "fix", r.Fix)
			}
		}
		log.Info("Preflight done", "summary", rep.Summary())
		into.Set(nodeName, PreflightCondition(rep))
		return nil
	}))
}

// PreflightCondition is the Preflight condition of a report: False when a check failed, True
// otherwise; the message names every check that did not pass, with its fix.
func PreflightCondition(rep preflight.Report) metav1.Condition {
	c := metav1.Condition{Type: networkv1alpha1.PreflightCondition, Status: metav1.ConditionTrue, Reason: networkv1alpha1.PreflightPassedReason}
	switch rep.Worst() {
	case preflight.Fail:
		c.Status, c.Reason = metav1.ConditionFalse, networkv1alpha1.PreflightFailedReason
	case preflight.Warn:
		c.Reason = networkv1alpha1.PreflightWarningsReason
	}
	var parts []string
	for _, r := range rep.Results {
		if r.Status == preflight.Fail || r.Status == preflight.Warn {
			parts = append(parts, fmt.Sprintf("%s %s: %s (fix: %s)", r.Status, r.Name, r.Detail, r.Fix))
		}
	}
	c.Message = rep.Summary()
	if len(parts) > 0 {
		c.Message += ". " + strings.Join(parts, "; ")
	}
	c.Message += ". Run `winnet-agent preflight` on the node for every check."
	if len(c.Message) > 32000 {
		c.Message = c.Message[:32000] + "..."
	}
	return c
}
