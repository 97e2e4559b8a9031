package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/winnet-io/winnet/test/e2e/cluster"
	"github.com/winnet-io/winnet/test/hostcmd"
)

// traceDemo runs `kubectl winnet trace` three times, as an operator would: a connection the demo's
// NetworkPolicy admits (naming its rule), one it drops (naming the policy) and one to the Service web
// (naming the endpoint its DNAT chose). Each trace's packet is consumed where it ends: no application sees
// it. It fails when a trace does not say what it should.
func traceDemo(ctx context.Context, c *cluster.Cluster, kc string) (string, error) {
	plugin := filepath.Join(c.BinDir, "kubectl-winnet")
	rows := []struct {
		args []string
		want []string
		why  string
	}{
		{[]string{"pod-a1", "pod-b2", "--port", "8080"}, []string{"Verdict: Delivered", "admitted by NetworkPolicy " + cluster.PodNamespace + "/" + policyName + " rule ingress[0]"},
			"admitted: pod-a1 is role=trusted"},
		{[]string{"pod-a2", "pod-b2", "--port", "8080"}, []string{"Verdict: Dropped", "Dropped by: NetworkPolicy " + cluster.PodNamespace + "/" + policyName},
			"dropped by the policy"},
		{[]string{"pod-a1", "svc/" + serviceName, "--port", "80"}, []string{"Verdict: Delivered", "to endpoint "},
			"through the Service: its DNAT names the endpoint"},
	}
	var s strings.Builder
	fmt.Fprintf(&s, "Packet traces (kubectl winnet trace: one tagged packet, each node's decisions; consumed where it ends):\n")
	for _, r := range rows {
		args := append([]string{"trace"}, r.args...)
		out, err := hostcmd.CommandContext(ctx, plugin, append(args, "--kubeconfig", kc)...).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("kubectl winnet %s: %w: %s", strings.Join(args, " "), err, out)
		}
		for _, w := range r.want {
			if !strings.Contains(string(out), w) {
				return "", fmt.Errorf("kubectl winnet %s does not say %q:\n%s", strings.Join(args, " "), w, out)
			}
		}
		fmt.Fprintf(&s, "\n$ kubectl winnet %s   # %s\n%s", strings.Join(args, " "), r.why, out)
	}
	return s.String(), nil
}
