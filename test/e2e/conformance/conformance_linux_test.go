//go:build linux && conformance

package conformance

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/winnet-io/winnet/test/e2e/cluster"
	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/hostcmd"
)

var (
	all = flag.Bool("conformance.all", false, "run every [sig-network] [Conformance] and [Feature:NetworkPolicy] test (make conformance-k8s), not the sample (make e2e-conformance-sample)")
	// procs > 1 runs e2e.test through the ginkgo CLI built with it, as Kubernetes' CI does.
	procs   = flag.Int("conformance.procs", 1, "parallel ginkgo processes")
	timeout = flag.Duration("conformance.timeout", 45*time.Minute, "ginkgo's timeout for the whole suite")
	// dualStack runs the suites on a dual-stack cluster (cluster.Options.DualStack): CONFORMANCE_DUALSTACK=1
	// make conformance-k8s.
	dualStack = flag.Bool("conformance.dualstack", false, "run on a dual-stack cluster (IPv4 first; winnet's nodes run IPv4 Pods)")
	// focus narrows the full run to the tests it matches (running again the ones that failed).
	focus = flag.String("conformance.focus", "", "with -conformance.all, run only the tests of the full run this regular expression matches")
)

// sample is what make test runs: Pod to Pod across the two nodes (each containerd) over HTTP and UDP,
// and Services' endpoints, reached from a Pod.
var sample = []string{
	"[sig-network] Networking Granular Checks: Pods should function for intra-pod communication: http ",
	"[sig-network] Networking Granular Checks: Pods should function for intra-pod communication: udp ",
	"[sig-network] Services should serve a basic endpoint from pods ",
	"[sig-network] Services should serve multiport endpoints from pods ",
}

// allFocus selects the tests of make conformance-k8s.
const allFocus = `\[sig-network\].*\[Conformance\]|\[Feature:NetworkPolicy\]`

// skip is one entry of skips.txt.
type skip struct{ name, reason string }

// readSkips reads skips.txt: "<a substring of the test's full name> | <why Windows or this substrate cannot
// run it>" per line; # starts a comment.
func readSkips(path string) ([]skip, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var skips []skip
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		name, reason, ok := strings.Cut(l, " | ")
		name, reason = strings.TrimSpace(name), strings.TrimSpace(reason)
		if !ok || name == "" || reason == "" {
			return nil, fmt.Errorf("%s:%d: want \"<test name> | <reason>\", got %q", path, line, l)
		}
		skips = append(skips, skip{name, reason})
	}
	return skips, sc.Err()
}

// specReport is what the run reads of ginkgo's JSON report.
type specReport struct {
	ContainerHierarchyTexts []string
	LeafNodeText            string
	LeafNodeType            string
	State                   string
	RunTime                 time.Duration
	Failure                 struct {
		Message  string
		Location struct {
			FileName   string
			LineNumber int
		}
	}
}

func (s specReport) name() string {
	return strings.Join(append(append([]string{}, s.ContainerHierarchyTexts...), s.LeafNodeText), " ")
}

func readReport(path string) ([]specReport, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var reports []struct{ SpecReports []specReport }
	if err := json.Unmarshal(b, &reports); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", path, err)
	}
	var specs []specReport
	for _, r := range reports {
		for _, s := range r.SpecReports {
			if s.LeafNodeType == "It" {
				specs = append(specs, s)
			}
		}
	}
	return specs, nil
}

// TestConformance runs e2e.test against two winnet nodes with real kubelets, and the cluster DNS (the tests
// reach Services by name) on a third node the harness plays, tainted as a control plane.
func TestConformance(t *testing.T) {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	root := framework.RepoRoot()
	name := "conformance-sample"
	quoted := make([]string, len(sample))
	for i, s := range sample {
		quoted[i] = regexp.QuoteMeta(s)
	}
	focusRE := strings.Join(quoted, "|")
	if *all {
		name, focusRE = "conformance-k8s", allFocus
	}
	var narrow *regexp.Regexp
	if *focus != "" {
		if !*all {
			t.Fatal("-conformance.focus narrows the full run: give -conformance.all too")
		}
		var err error
		if narrow, err = regexp.Compile(*focus); err != nil {
			t.Fatalf("-conformance.focus: %v", err)
		}
		name = "conformance-k8s-focus" // its own logs and reports beside the full run's
	}
	e2eTest := filepath.Join(root, "bin", "e2e-"+cluster.KubeVersion, "e2e.test")
	if _, err := os.Stat(e2eTest); err != nil {
		t.Fatalf("%v: run hack/setup-kubelet-deps.sh (make kubelet-deps), which builds it", err)
	}
	ginkgoCLI := filepath.Join(filepath.Dir(e2eTest), "ginkgo")
	if *procs > 1 {
		if _, err := os.Stat(ginkgoCLI); err != nil {
			t.Fatalf("%v: run hack/setup-kubelet-deps.sh (make kubelet-deps), which builds it", err)
		}
	}
	skips, err := readSkips("skips.txt")
	if err != nil {
		t.Fatal(err)
	}
	// [LinuxOnly] tests run: the Pods of the simulated nodes are Linux containers, and what those tests
	// check of the network (session affinity, UDP policy, node to Pod, DNS search paths) is winnet's data
	// path. Each one left out is in skips.txt with its reason.
	var skipRE []string
	for _, s := range skips {
		skipRE = append(skipRE, regexp.QuoteMeta(s.name))
	}
	reportDir := emptyDir(t, filepath.Join(root, "bin", name))

	ctx := context.Background()
	logf := func(f string, a ...any) { fmt.Fprintf(os.Stderr, name+": "+f+"\n", a...) }
	c, kubeletLogs := kubeletCluster(ctx, t, logf, nil)

	assets := assetsDir(t)
	jsonReport := filepath.Join(reportDir, "report.json")
	e2eArgs := []string{
		"--kubeconfig=" + c.Kubeconfig,
		"--kubectl-path=" + filepath.Join(assets, "kubectl"),
		"--provider=skeleton",
		"--report-dir=" + reportDir,
		"--dns-domain=" + cluster.ClusterDomain,
		"--minStartupPods=0",
		"--allowed-not-ready-nodes=0",
		"--non-blocking-taints=node-role.kubernetes.io/control-plane",
		"--disable-log-dump",
		"--dump-logs-on-failure=true",
	}
	focusFlag := focusRE
	if narrow != nil {
		// Both must match: ginkgo has no AND of regular expressions, so the narrowing expression is
		// given alone and the full run's focus checked below on each spec.
		focusFlag = narrow.String()
	}
	ginkgoFlags := []string{
		"focus=" + focusFlag,
		"timeout=" + timeout.String(),
		"no-color",
		"v",
	}
	if len(skipRE) > 0 {
		// An empty expression would match, and skip, every test.
		ginkgoFlags = append(ginkgoFlags, "skip="+strings.Join(skipRE, "|"))
	}
	var cmdline []string
	if *procs > 1 {
		cmdline = []string{ginkgoCLI, fmt.Sprintf("--procs=%d", *procs), "--json-report=" + jsonReport}
		for _, f := range ginkgoFlags {
			cmdline = append(cmdline, "--"+f)
		}
		cmdline = append(append(cmdline, e2eTest, "--"), e2eArgs...)
	} else {
		cmdline = append([]string{e2eTest, "--ginkgo.json-report=" + jsonReport}, e2eArgs...)
		for _, f := range ginkgoFlags {
			cmdline = append(cmdline, "--ginkgo."+f)
		}
	}
	logPath := filepath.Join(root, "bin", name+".e2e.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	logf("running %s (log: %s)", strings.Join(cmdline, " "), logPath)
	runStart := time.Now()
	cmd := hostcmd.CommandContext(ctx, cmdline[0], cmdline[1:]...)
	// Outside this repository's module: the ginkgo CLI compares its version with the go.mod above its
	// directory (winnet's, not the one e2e.test was built in) and warns. HOME: kubectl's cache.
	work := t.TempDir()
	cmd.Dir = work
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig, "HOME="+work)
	runErr := cmd.Run()
	took := time.Since(runStart).Round(time.Second)

	specs, err := readReport(jsonReport)
	if err != nil {
		t.Fatalf("e2e.test wrote no report (%v): %v; see %s", runErr, err, logPath)
	}
	focusMatch := regexp.MustCompile(focusRE)
	var passed, failed, skipped int
	var unexplained, outside []string
	used := map[string]bool{}
	for _, s := range specs {
		n := s.name()
		if !focusMatch.MatchString(n) {
			// Only -conformance.focus runs tests outside the set (ginkgo ORs focus expressions: it is
			// given alone): the run fails naming them, its expression is to be narrowed.
			if s.State != "skipped" && s.State != "pending" {
				outside = append(outside, fmt.Sprintf("%s (%s)", n, s.State))
			}
			continue
		}
		for _, sk := range skips {
			if strings.Contains(n, sk.name) {
				used[sk.name] = true
			}
		}
		if narrow != nil && !narrow.MatchString(n) {
			continue
		}
		switch s.State {
		case "passed":
			passed++
		case "skipped":
			skipped++
			why := skipReason(n, skips)
			if why == "" {
				unexplained = append(unexplained, fmt.Sprintf("%s: %s", n, firstLine(s.Failure.Message)))
				why = "NOT IN skips.txt: " + firstLine(s.Failure.Message)
			}
			logf("skipped: %s (%s)", n, why)
		case "pending":
			skipped++
			unexplained = append(unexplained, n+": pending")
		default:
			failed++
			t.Errorf("%s %s after %v: %s:%d: %s", s.State, n, s.RunTime.Round(time.Second),
				s.Failure.Location.FileName, s.Failure.Location.LineNumber, firstLines(s.Failure.Message, 6))
		}
	}
	logf("e2e.test took %v; JUnit in %s", took, reportDir)
	if failed > 0 {
		t.Logf("%s\n%s", c.LogTails(40), kubeletLogs())
	}
	for _, u := range unexplained {
		t.Errorf("a skip skips.txt does not name: %s", u)
	}
	if *all && narrow == nil {
		for _, sk := range skips {
			if !used[sk.name] {
				t.Errorf("skips.txt names a test the run does not have (a stale entry): %q", sk.name)
			}
		}
	}
	for _, o := range outside {
		t.Errorf("-conformance.focus %q ran a test outside the run's set: %s", *focus, o)
	}
	if runErr != nil && failed == 0 && len(outside) == 0 {
		t.Errorf("e2e.test failed (%v) with no failed test: see %s", runErr, logPath)
	}
	if !*all && passed != len(sample) {
		t.Errorf("passed %d of the sample's %d tests: see %s", passed, len(sample), logPath)
	}
	if passed == 0 {
		t.Errorf("no test passed: see %s", logPath)
	}
	fmt.Printf("%s passed=%d failed=%d skipped=%d\n", name, passed, failed, skipped)
}

// kubeletCluster starts the cluster the upstream suites run against: two winnet nodes with real kubelets
// (containerd 1.6 and 2.x) and the cluster DNS on a third node tainted as a control plane, dual-stack with
// -conformance.dualstack; every kubelet node
// imports images beside the standard ones. It returns the cluster (torn down by t.Cleanup) and a function
// giving the kubelets' last log lines.
func kubeletCluster(ctx context.Context, t *testing.T, logf func(string, ...any), images []string) (*cluster.Cluster, func() string) {
	t.Helper()
	start := time.Now()
	c, err := cluster.Start(ctx, cluster.Options{Logf: logf, Kubelets: true, KubeletImages: images, DualStack: *dualStack,
		UnderlayCIDR: netip.MustParsePrefix("192.168.81.0/24"), ClusterCIDR: netip.MustParsePrefix("10.247.0.0/16")})
	if err != nil {
		t.Fatalf("starting the cluster: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("tearing the cluster down: %v", err)
		}
	})
	// What the API server still serves when the run ends (its shutdown waits for it).
	t.Cleanup(func() {
		// e2e.test deletes its namespaces without waiting: the kubelets stop their Pods before the nodes go.
		start := time.Now()
		for time.Since(start) < 3*time.Minute {
			var list corev1.NamespaceList
			if err := c.Client.List(ctx, &list); err != nil {
				t.Logf("listing namespaces: %v", err)
				break
			}
			var left []string
			for _, ns := range list.Items {
				if ns.Status.Phase == corev1.NamespaceTerminating {
					left = append(left, ns.Name)
				}
			}
			if len(left) == 0 {
				logf("e2e.test's namespaces gone %v after the run", time.Since(start).Round(time.Second))
				break
			}
			time.Sleep(2 * time.Second)
		}
		out, err := hostcmd.Command(filepath.Join(assetsDir(t), "kubectl"), "--kubeconfig", c.Kubeconfig, "get", "--raw", "/metrics").Output()
		if err != nil {
			t.Logf("reading the API server's metrics: %v", err)
			return
		}
		for _, l := range strings.Split(string(out), "\n") {
			if (strings.HasPrefix(l, "apiserver_longrunning_requests{") || strings.HasPrefix(l, "apiserver_current_inflight_requests{") ||
				strings.HasPrefix(l, "apiserver_registered_watchers{")) && !strings.HasSuffix(l, " 0") {
				logf("at the end: %s", l)
			}
		}
	})
	kubeletLogs := func() string {
		var b strings.Builder
		for _, n := range c.Nodes() {
			if n.HasKubelet() {
				fmt.Fprintf(&b, "--- %s\n%s\n", n.Name, n.KubeletLogTail(40))
			}
		}
		return b.String()
	}
	for _, n := range []struct {
		spec cluster.NodeSpec
		rt   cluster.Runtime
	}{
		{cluster.NodeSpec{Name: "kube-a", IP: netip.MustParseAddr("192.168.81.11"), PodCIDR: netip.MustParsePrefix("10.247.1.0/24")}, cluster.DebianContainerd()},
		{cluster.NodeSpec{Name: "kube-b", IP: netip.MustParseAddr("192.168.81.12"), PodCIDR: netip.MustParsePrefix("10.247.2.0/24")}, cluster.BuiltContainerd()},
	} {
		if _, err := c.AddKubeletNode(ctx, n.spec, n.rt); err != nil {
			t.Fatalf("adding node %s: %v\n%s\n%s", n.spec.Name, err, c.LogTails(40), kubeletLogs())
		}
	}
	if err := startDNS(ctx, c); err != nil {
		t.Fatalf("%v\n%s", err, c.LogTails(40))
	}
	if err := c.WaitReady(ctx, 3*time.Minute); err != nil {
		t.Fatalf("the winnet networks are not Ready: %v\n%s\n%s", err, c.LogTails(40), kubeletLogs())
	}
	logf("cluster up in %v", time.Since(start).Round(time.Second))
	return c, kubeletLogs
}

// emptyDir makes dir anew and empty (a run's reports replace the last run's) and returns it.
func emptyDir(t *testing.T, dir string) string {
	t.Helper()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func assetsDir(t *testing.T) string {
	dir, err := framework.AssetsDir()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// skipReason is why a skipped test is skipped: its skips.txt entry; "" when it has none.
func skipReason(name string, skips []skip) string {
	for _, s := range skips {
		if strings.Contains(name, s.name) {
			return s.reason
		}
	}
	return ""
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return l
}

func firstLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

// startDNS runs the cluster DNS (CoreDNS as kube-system/kube-dns, cluster.StartDNS) on a third node played by
// the harness, tainted node-role.kubernetes.io/control-plane:NoSchedule as kubeadm's control plane, where its
// CoreDNS runs: the scheduler puts no test Pod there and e2e.test counts it as a control-plane node.
func startDNS(ctx context.Context, c *cluster.Cluster) error {
	n, err := c.AddNode(ctx, cluster.NodeSpec{Name: "dns", IP: netip.MustParseAddr("192.168.81.13"), PodCIDR: netip.MustParsePrefix("10.247.3.0/24")})
	if err != nil {
		return fmt.Errorf("adding the DNS node: %w", err)
	}
	var node corev1.Node
	if err := c.Client.Get(ctx, client.ObjectKey{Name: n.Name}, &node); err != nil {
		return err
	}
	patch := client.MergeFrom(node.DeepCopy())
	node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule})
	if node.Labels == nil {
		node.Labels = map[string]string{}
	}
	node.Labels["node-role.kubernetes.io/control-plane"] = ""
	if err := c.Client.Patch(ctx, &node, patch); err != nil {
		return fmt.Errorf("tainting the DNS node: %w", err)
	}
	if _, err := c.StartDNS(ctx, n, 2*time.Minute); err != nil {
		return fmt.Errorf("starting the cluster DNS: %w", err)
	}
	return nil
}
