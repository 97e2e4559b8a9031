package framework

import (
	"fmt"
	"os"
	"path/filepath"
)

// HelmVersion is the helm that hack/setup-test-deps.sh builds into bin/ (the tool pinned in go.mod).
const HelmVersion = "v3.22.0"

// HelmBinary returns $HELM or the helm in bin/, or an error that says how to build it.
func HelmBinary() (string, error) {
	if h := os.Getenv("HELM"); h != "" {
		return h, nil
	}
	h := filepath.Join(RepoRoot(), "bin", "helm-"+HelmVersion, "helm")
	if _, err := os.Stat(h); err != nil {
		return "", fmt.Errorf("helm %s not found at %s: run 'hack/setup-test-deps.sh' (or 'make test-deps') to build it, or set HELM: %w", HelmVersion, h, err)
	}
	return h, nil
}

// ChartDir is winnet's Helm chart.
func ChartDir() string { return filepath.Join(RepoRoot(), "config", "helm", "winnet") }
