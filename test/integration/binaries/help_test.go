package binaries

import (
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/hostcmd"
)

// TestBinariesAnswerHelp builds each command and runs it with --help: it must exit 0 and print its
// usage, without needing a cluster, OVS or an agent.
func TestBinariesAnswerHelp(t *testing.T) {
	dir := t.TempDir()
	build := hostcmd.Command("go", "build", "-o", dir+string(filepath.Separator), "./cmd/...")
	build.Dir = framework.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/...: %v\n%s", err, out)
	}
	cases := []struct {
		binary string
		want   []string
	}{
		{"winnet-agent", []string{"Usage: winnet-agent", "-node-name", "-kubeconfig"}},
		{"winnet-controller", []string{"Usage: winnet-controller", "-leader-elect", "-kubeconfig"}},
		{"winnet-cni", []string{"winnet-cni", "CNI"}},
	}
	for _, tc := range cases {
		for _, flag := range []string{"--help", "-h"} {
			t.Run(tc.binary+" "+flag, func(t *testing.T) {
				g := NewWithT(t)
				out, err := hostcmd.Command(filepath.Join(dir, tc.binary), flag).CombinedOutput()
				g.Expect(err).NotTo(HaveOccurred(), "%s %s must exit 0; printed:\n%s", tc.binary, flag, out)
				for _, w := range tc.want {
					g.Expect(string(out)).To(ContainSubstring(w))
				}
			})
		}
	}
}
