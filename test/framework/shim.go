package framework

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/winnet-io/winnet/internal/cni"
)

var (
	shimOnce sync.Once
	shimDir  string
	shimErr  error
)

// BuildShim builds cmd/winnet-cni once per test binary into a temporary directory and returns that
// directory: the CNI plugin path a test's CNI client uses, as kubelet's would.
func BuildShim(t testing.TB) string {
	t.Helper()
	shimOnce.Do(func() {
		shimDir, shimErr = os.MkdirTemp("", "winnet-cni-")
		if shimErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", filepath.Join(shimDir, cni.PluginType), "./cmd/winnet-cni")
		cmd.Dir = RepoRoot()
		cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local")
		if out, err := cmd.CombinedOutput(); err != nil {
			shimErr = fmt.Errorf("building winnet-cni: %w: %s", err, out)
		}
	})
	if shimErr != nil {
		t.Fatal(shimErr)
	}
	return shimDir
}
