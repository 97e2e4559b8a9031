//go:build !windows

// It reads the repository's generated CRDs: platform-neutral, run on Linux with the package's other
// tests.

package controller

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestCRDNamesAreEveryWinnetCRD: the uninstall deletes every CRD of winnet's group that the chart
// installs (config/crd/bases, generated from api/), not a list that a new kind can be missing from
// (PacketTrace and Egress were, and `uninstall.deleteCRDs=true` left them behind).
func TestCRDNamesAreEveryWinnetCRD(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "config", "crd", "bases", "network.winnet.io_*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRD of network.winnet.io in config/crd/bases: %v", err)
	}
	var want []string
	for _, f := range files {
		plural := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "network.winnet.io_"), ".yaml")
		want = append(want, plural+".network.winnet.io")
	}
	got := slices.Sorted(slices.Values(CRDNames))
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("CRDNames = %v, want every CRD of config/crd/bases: %v", got, want)
	}
}
