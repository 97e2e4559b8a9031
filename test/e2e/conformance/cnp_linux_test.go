//go:build linux && conformance

package conformance

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/winnet-io/winnet/test/e2e/cluster"
	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/hostcmd"
)

// The network-policy-api release whose conformance suite TestConformanceCNP runs (hack/setup-kubelet-deps.sh
// cnp builds it into bin/cnp-<version>/).
const npapiVersion = "v0.3.0"

var (
	// features are the suite's optional features winnet declares (-supported-features); the suite
	// skips the tests of the others, which cnp-skips.txt must name.
	features = flag.String("cnp.features", "ClusterNetworkPolicy", "the network-policy-api conformance features winnet declares, comma-separated")
	// cnpRun narrows the run to the suite's tests this expression matches (their ShortNames).
	cnpRun = flag.String("cnp.run", "", "run only the suite's tests whose ShortName this regular expression matches")
)

// cnpResult is one of the suite's tests (a subtest of its TestConformance) as go test -v reports it.
var cnpResult = regexp.MustCompile(`^    --- (PASS|FAIL|SKIP): TestConformance/([A-Za-z0-9]+) \(`)

// TestConformanceCNP runs the network-policy-api conformance suite (ClusterNetworkPolicy v1beta1, admin and
// baseline tiers) against two winnet nodes with real kubelets: it probes by kubectl exec of agnhost in the
// suite's Pods. The tests cnp-skips.txt names are skipped (-test.skip), each with why; a test the suite skips
// for an undeclared feature must be named there too.
func TestConformanceCNP(t *testing.T) {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	root := framework.RepoRoot()
	const name = "conformance-cnp"
	dir := filepath.Join(root, "bin", "cnp-"+npapiVersion)
	suiteBin := filepath.Join(dir, "conformance.test")
	if _, err := os.Stat(suiteBin); err != nil {
		t.Fatalf("%v: run hack/setup-kubelet-deps.sh cnp (make conformance-cnp does), which builds it", err)
	}
	images := filepath.Join(root, "bin", "images-"+cluster.KubeVersion)
	extra, err := listedImages(filepath.Join(images, "cnp-images.txt"))
	if err != nil {
		t.Fatalf("%v: run hack/setup-kubelet-deps.sh, which builds the suite's agnhost", err)
	}
	skips, err := readSkips("cnp-skips.txt")
	if err != nil {
		t.Fatal(err)
	}
	var skipNames []string
	for _, s := range skips {
		if !regexp.MustCompile(`^[A-Za-z0-9]+$`).MatchString(s.name) {
			t.Fatalf("cnp-skips.txt: %q is not one of the suite's test ShortNames", s.name)
		}
		skipNames = append(skipNames, s.name)
	}
	reportDir := emptyDir(t, filepath.Join(root, "bin", name))

	ctx := context.Background()
	logf := func(f string, a ...any) { fmt.Fprintf(os.Stderr, name+": "+f+"\n", a...) }
	c, kubeletLogs := kubeletCluster(ctx, t, logf, extra)
	if err := installCRDs(ctx, c, filepath.Join(dir, "crds"), logf); err != nil {
		t.Fatal(err)
	}

	args := []string{"-test.v", "-test.timeout=60m", "-test.run=^TestConformance$",
		"-supported-features=" + *features, "-report-output=" + filepath.Join(reportDir, "report.yaml"),
		"-organization=winnet", "-project=winnet", "-url=https://github.com/winnet-io/winnet", "-version=dev",
		"-contact=winnet maintainers"}
	if *cnpRun != "" {
		args[2] = "-test.run=^TestConformance$/" + *cnpRun
	}
	if len(skipNames) > 0 {
		args = append(args, "-test.skip=^TestConformance$/^("+strings.Join(skipNames, "|")+")$")
	}
	logPath := filepath.Join(root, "bin", name+".suite.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	logf("running %s %s (log: %s)", suiteBin, strings.Join(args, " "), logPath)
	runStart := time.Now()
	cmd := hostcmd.CommandContext(ctx, suiteBin, args...)
	work := t.TempDir()
	cmd.Dir = work
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// The suite's kubectl exec (client-go's remotecommand) reads KUBECONFIG as kubectl does.
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig, "HOME="+work)
	runErr := cmd.Run()
	took := time.Since(runStart).Round(time.Second)

	f, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var passed, failed, skipped int
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := cnpResult.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		switch m[1] {
		case "PASS":
			passed++
		case "FAIL":
			failed++
			t.Errorf("failed: %s (see %s)", m[2], logPath)
		case "SKIP":
			skipped++
			if why := skipReason(m[2], skips); why == "" {
				t.Errorf("the suite skipped %s and cnp-skips.txt does not say why (an undeclared feature?)", m[2])
			} else {
				logf("skipped: %s (%s)", m[2], why)
			}
		}
	}
	if *cnpRun == "" {
		for _, s := range skips {
			logf("skipped: %s (%s)", s.name, s.reason)
		}
		skipped += len(skips)
	}
	logf("the suite took %v; its report in %s", took, reportDir)
	if failed > 0 {
		t.Logf("%s\n%s", c.LogTails(40), kubeletLogs())
	}
	if runErr != nil && failed == 0 {
		t.Errorf("the suite failed (%v) with no failed test: see %s", runErr, logPath)
	}
	if passed == 0 {
		t.Errorf("no test passed: see %s", logPath)
	}
	fmt.Printf("%s passed=%d failed=%d skipped=%d\n", name, passed, failed, skipped)
}

// listedImages returns the archives an images list names ("<image> <archive>" lines), as paths.
func listedImages(list string) ([]string, error) {
	b, err := os.ReadFile(list)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 || f[1] != filepath.Base(f[1]) || !strings.HasSuffix(f[1], ".tar") {
			return nil, fmt.Errorf("%s: want \"<image> <archive>.tar\" lines, got %q", list, l)
		}
		out = append(out, filepath.Join(filepath.Dir(list), f[1]))
	}
	return out, nil
}

// installCRDs creates the release's CRDs the cluster does not have yet (winnet's chart installs them the
// same way: never over a version the cluster already holds) and waits until they are served.
func installCRDs(ctx context.Context, c *cluster.Cluster, dir string, logf func(string, ...any)) error {
	scheme := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		return err
	}
	cl, err := client.New(c.Config, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no CRDs in %s (hack/setup-kubelet-deps.sh cnp copies them): %v", dir, err)
	}
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(b, &crd); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		err = cl.Create(ctx, &crd)
		switch {
		case apierrors.IsAlreadyExists(err):
			logf("CRD %s already installed: kept", crd.Name)
			continue
		case err != nil:
			return fmt.Errorf("creating CRD %s: %w", crd.Name, err)
		}
		logf("installed CRD %s", crd.Name)
		if err := waitEstablished(ctx, cl, crd.Name); err != nil {
			return err
		}
	}
	return nil
}

// waitEstablished waits until the API server serves the CRD name.
func waitEstablished(ctx context.Context, cl client.Client, name string) error {
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		var got apiextensionsv1.CustomResourceDefinition
		if err := cl.Get(ctx, client.ObjectKey{Name: name}, &got); err != nil {
			continue
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return nil
			}
		}
	}
	return fmt.Errorf("CRD %s not established within a minute", name)
}
