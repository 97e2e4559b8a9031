package framework

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/winnet-io/winnet/internal/cni"
	"github.com/winnet-io/winnet/test/hostcmd"
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
		cmd := hostcmd.Command("go", "build", "-o", filepath.Join(shimDir, cni.PluginType), "./cmd/winnet-cni")
		cmd.Dir = RepoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			shimErr = fmt.Errorf("building winnet-cni: %w: %s", err, out)
		}
	})
	if shimErr != nil {
		t.Fatal(shimErr)
	}
	return shimDir
}

// InstallShim copies the shim BuildShim built into a new bin directory of the test, as the Helm
// chart's install-cni copies it to the node's CNI bin directory, and returns the copy's path: the
// agent's --cni-shim-path, removed with the node's last sandbox. BuildShim's binary, which every
// other test runs, is never named to an agent.
func InstallShim(t testing.TB) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "bin", cni.PluginType)
	if err := copyFile(filepath.Join(BuildShim(t), cni.PluginType), dst); err != nil {
		t.Fatalf("installing the CNI shim: %v", err)
	}
	return dst
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}
