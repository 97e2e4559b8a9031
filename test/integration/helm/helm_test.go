package helm

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/hostcmd"
)

// helmVersion is the helm that hack/setup-test-deps.sh builds (the tool pinned in go.mod).
const helmVersion = "v3.22.0"

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the chart")

func chartDir() string { return filepath.Join(framework.RepoRoot(), "config", "helm", "winnet") }

// helmBinary returns $HELM or the helm in bin/, failing the test with the command to run when absent.
func helmBinary(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("HELM"); h != "" {
		return h
	}
	h := filepath.Join(framework.RepoRoot(), "bin", "helm-"+helmVersion, "helm")
	if _, err := os.Stat(h); err != nil {
		t.Fatalf("helm %s not found at %s: run 'hack/setup-test-deps.sh' (or 'make test-deps') to build it, or set HELM: %v", helmVersion, h, err)
	}
	return h
}

// runHelm runs helm with args and returns stdout, stderr and the error.
func runHelm(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	cmd := hostcmd.Command(helmBinary(t), args...)
	// Keep helm away from the user's repositories, plugins and cache.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// renderChart runs helm template with the values files and returns the rendered manifest.
func renderChart(t *testing.T, valuesFiles ...string) (string, error) {
	t.Helper()
	args := []string{"template", "winnet", chartDir(), "--namespace", "winnet-system", "--include-crds"}
	for _, f := range valuesFiles {
		args = append(args, "--values", f)
	}
	out, stderr, err := runHelm(t, args...)
	if err != nil {
		return "", fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr)
	}
	return out, nil
}

// object is one rendered manifest: its kind, name and raw YAML.
type object struct {
	Kind, Name, Namespace string
	YAML                  []byte
}

// splitManifest parses a multi-document manifest into objects.
func splitManifest(t *testing.T, manifest string) []object {
	t.Helper()
	var objs []object
	for _, doc := range strings.Split(manifest, "\n---") {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		var meta struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("rendered manifest is not YAML: %v\n%s", err, doc)
		}
		objs = append(objs, object{Kind: meta.Kind, Name: meta.Metadata.Name, Namespace: meta.Metadata.Namespace, YAML: []byte(doc)})
	}
	return objs
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// find returns the rendered object of kind and name, failing the test when absent.
func find(t *testing.T, objs []object, kind, name string, into any) {
	t.Helper()
	for _, o := range objs {
		if o.Kind == kind && o.Name == name {
			if err := yaml.UnmarshalStrict(o.YAML, into); err != nil {
				t.Fatalf("decoding %s %s: %v", kind, name, err)
			}
			return
		}
	}
	t.Fatalf("the chart renders no %s %s", kind, name)
}

func writeValues(t *testing.T, content string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(f, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}
