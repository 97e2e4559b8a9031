//go:build linux

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/preflight"
	"github.com/winnet-io/winnet/test/hostcmd"
)

// TestPreflight runs the real `winnet-agent preflight --output json` on converged node-a beside its
// agent, with the agent's own credentials (no new privilege: it gets the Node and lists its Pods):
// what the HNS simulator answers is marked, what a Linux node has not is SKIP, the rest runs against
// the node's own facts (its OVS, its network namespace, its directories, the API server's clock) and
// passes. Then the node is made unfit, with a kube-proxy Pod bound to it and another plugin's conflist
// that containerd would read before winnet's: both checks fail and the exit status is 2. The agent ran
// the same checks at its start: the node's WindowsNodeNetwork carries the Preflight condition and an
// Event says so.
func TestPreflight(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	a := node("node-a")
	run := func() (preflight.Report, int) {
		t.Helper()
		cmd := hostcmd.Command(filepath.Join(c.BinDir, "winnet-agent"), "preflight", "--output", "json",
			"--node-name", "node-a", "--kubeconfig", a.AgentKubeconfig(), "--ovsdb", a.OVS.DBSocket(), "--ovs-rundir", a.OVS.Dir,
			"--netns", a.NSPath, "--state-dir", a.StateDir, "--cni-conf-dir", a.CNIConfDir, "--audit-log-dir", a.AuditLogDir)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		code := 0
		var exit interface{ ExitCode() int }
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else {
			g.Expect(err).NotTo(HaveOccurred())
		}
		var rep preflight.Report
		g.Expect(json.Unmarshal(out, &rep)).To(Succeed(), "stdout: %s\nstderr: %s", out, stderr.String())
		for _, r := range rep.Results {
			t.Logf("%-4s %-17s %s [%s] %s", r.Status, r.Name, r.Detail, r.Source, r.Fix)
		}
		return rep, code
	}
	byName := func(rep preflight.Report) map[string]preflight.Result {
		m := map[string]preflight.Result{}
		for _, r := range rep.Results {
			m[r.Name] = r
		}
		return m
	}

	rep, code := run()
	got := byName(rep)
	g.Expect(rep.Results).To(HaveLen(len(preflight.Checks())))
	for _, name := range []string{"windows-build", "windows-features", "driver-signing"} {
		g.Expect(got[name].Status).To(Equal(preflight.Skip), name)
	}
	g.Expect(got["hns"]).To(And(
		HaveField("Status", preflight.Pass), HaveField("Source", "HNS simulator"),
		HaveField("Detail", ContainSubstring(`winnet's network "winnet"`))))
	g.Expect(got["ovs-extension"]).To(And(HaveField("Status", preflight.Pass), HaveField("Source", "HNS simulator")))
	g.Expect(got["ovs-services"]).To(And(HaveField("Status", preflight.Pass), HaveField("Source", ContainSubstring("Linux host"))))
	g.Expect(got["ovs-version"]).To(And(HaveField("Status", preflight.Pass), HaveField("Detail", MatchRegexp(`^Open vSwitch 3\.\d+\.\d+$`))))
	g.Expect(got["containerd"]).To(And(HaveField("Status", preflight.Warn), HaveField("Detail", ContainSubstring("reports no container runtime"))),
		"the harness's nodes run no kubelet: no runtime reported")
	g.Expect(code).To(Equal(1), "one warning")
	g.Expect(got["uplink"]).To(And(HaveField("Status", preflight.Pass),
		HaveField("Detail", ContainSubstring(a.IP.String()+" on br-int, the management vNIC winnet renamed (converged"))))
	g.Expect(got["kube-proxy"]).To(And(HaveField("Status", preflight.Pass), HaveField("Detail", ContainSubstring("no kube-proxy Pod on the node"))))
	g.Expect(got["cni-config"]).To(And(HaveField("Status", preflight.Pass), HaveField("Detail", ContainSubstring("containerd reads 10-winnet.conflist first"))))
	g.Expect(got["clock"].Status).To(Equal(preflight.Pass))
	g.Expect(got["directories"].Status).To(Equal(preflight.Pass), got["directories"].Detail)

	// The agent's own preflight at its start.
	wnn := &networkv1alpha1.WindowsNodeNetwork{}
	g.Eventually(func() *metav1.Condition {
		g.Expect(c.Client.Get(ctx, client.ObjectKey{Name: "node-a"}, wnn)).To(Succeed())
		return meta.FindStatusCondition(wnn.Status.Conditions, networkv1alpha1.PreflightCondition)
	}, 30*time.Second, 200*time.Millisecond).ShouldNot(BeNil())
	cond := meta.FindStatusCondition(wnn.Status.Conditions, networkv1alpha1.PreflightCondition)
	t.Logf("Preflight condition: %s %s %s", cond.Status, cond.Reason, cond.Message)
	g.Expect(cond.Message).To(ContainSubstring("not checked on this platform"))
	g.Expect(meta.IsStatusConditionTrue(wnn.Status.Conditions, networkv1alpha1.ReadyCondition)).To(BeTrue(), "never blocking what works")
	evs := &eventsv1.EventList{}
	g.Eventually(func() []eventsv1.Event {
		g.Expect(c.Client.List(ctx, evs, client.InNamespace("default"))).To(Succeed())
		var out []eventsv1.Event
		for _, e := range evs.Items {
			if e.Regarding.Kind == "WindowsNodeNetwork" && e.Regarding.Name == "node-a" && e.Action == "Preflight" {
				out = append(out, e)
			}
		}
		return out
	}, 30*time.Second, 200*time.Millisecond).ShouldNot(BeEmpty())

	// A node built to fail: kube-proxy bound to it, and another plugin's conflist read first.
	kp := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy-preflight", Namespace: "kube-system", Labels: map[string]string{"k8s-app": "kube-proxy"}},
		Spec: corev1.PodSpec{NodeName: "node-a", HostNetwork: true, Containers: []corev1.Container{{Name: "kube-proxy", Image: "registry.k8s.io/kube-proxy:v1.37.0"}}}}
	g.Expect(c.Client.Create(ctx, kp)).To(Succeed())
	t.Cleanup(func() { _ = c.Client.Delete(context.Background(), kp, client.GracePeriodSeconds(0)) })
	other := filepath.Join(a.CNIConfDir, "05-other.conflist")
	g.Expect(os.WriteFile(other, []byte(`{"cniVersion":"1.0.0","name":"other","plugins":[{"type":"bridge"}]}`), 0o644)).To(Succeed())
	t.Cleanup(func() { _ = os.Remove(other) })

	rep, code = run()
	got = byName(rep)
	g.Expect(code).To(Equal(2), "failures")
	g.Expect(got["kube-proxy"]).To(And(HaveField("Status", preflight.Fail), HaveField("Detail", ContainSubstring("kube-system/kube-proxy-preflight"))))
	g.Expect(got["cni-config"]).To(And(HaveField("Status", preflight.Fail), HaveField("Detail", ContainSubstring("containerd reads 05-other.conflist"))))
}
