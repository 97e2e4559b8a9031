package hostcmd

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

func TestUnlistedCommandFailsAtOnce(t *testing.T) {
	g := NewWithT(t)
	err := Command("winnet-no-such-tool", "--version").Run()
	g.Expect(err).To(MatchError(ContainSubstring(`"winnet-no-such-tool" is not on the list`)))

	// The command run inside a namespace is checked as well as ip itself.
	err = Command("ip", "netns", "exec", "somens", "winnet-no-such-tool").Run()
	g.Expect(err).To(MatchError(ContainSubstring(`"winnet-no-such-tool" is not on the list`)))
}

func TestMissingCommandNamesItsSource(t *testing.T) {
	g := NewWithT(t)
	// A Built command run from a path where nothing was built.
	err := Command(filepath.Join(t.TempDir(), "kube-apiserver"), "--version").Run()
	g.Expect(err).To(MatchError(And(ContainSubstring("not found"), ContainSubstring("hack/setup-test-deps.sh"))))

	// A Debian command with a fixed path run from elsewhere (a pyenv python3 is not Debian's).
	err = Check("/opt/elsewhere/python3")
	g.Expect(err).To(MatchError(ContainSubstring("is run as /usr/bin/python3")))

	// Every Debian entry names its package in its error.
	for _, c := range List() {
		if c.Kind == Debian {
			g.Expect(c.Source()).To(ContainSubstring("Debian package "+c.Package), c.Name)
		}
	}
}

func TestNetnsExecResolvesFixedPaths(t *testing.T) {
	g := NewWithT(t)
	cmd := Command("ip", "netns", "exec", "ns1", "python3", "-c", "pass")
	g.Expect(cmd.Args).To(Equal([]string{"ip", "netns", "exec", "ns1", "/usr/bin/python3", "-c", "pass"}))
}

// TestEveryCommandGoesThroughHostcmd fails when a Go file of the module, other than this package,
// calls exec.Command or exec.CommandContext: such a call would run a command that is on no list.
func TestEveryCommandGoesThroughHostcmd(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
	self := filepath.Dir(file)
	var offenders []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "bin" || path == self) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, src, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		execName := ""
		for _, imp := range f.Imports {
			if imp.Path.Value == `"os/exec"` {
				execName = "exec"
				if imp.Name != nil {
					execName = imp.Name.Name
				}
			}
		}
		if execName == "" {
			return nil
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == execName && (sel.Sel.Name == "Command" || sel.Sel.Name == "CommandContext") {
				rel, _ := filepath.Rel(root, path)
				offenders = append(offenders, rel)
			}
			return true
		})
		return nil
	})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	NewWithT(t).Expect(offenders).To(BeEmpty(), "run external commands through hostcmd.Command (test/hostcmd), which knows where each comes from")
}
