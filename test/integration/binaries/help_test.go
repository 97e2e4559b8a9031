package binaries

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet"
	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/hostcmd"
)

// buildCommands builds every command of cmd/ into a directory of the test and returns it.
func buildCommands(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	build := hostcmd.Command("go", "build", "-o", dir+string(filepath.Separator), "./cmd/...")
	build.Dir = framework.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/...: %v\n%s", err, out)
	}
	return dir
}

// TestBinariesAnswerHelp builds each command and runs it with --help: it must exit 0 and print its
// usage, without needing a cluster, OVS or an agent.
func TestBinariesAnswerHelp(t *testing.T) {
	dir := buildCommands(t)
	cases := []struct {
		binary string
		want   []string
	}{
		{"winnet-agent", []string{"Usage: winnet-agent", "-node-name", "-kubeconfig", "-version"}},
		{"winnet-controller", []string{"Usage: winnet-controller", "-leader-elect", "-kubeconfig", "-version"}},
		{"winnet-cni", []string{"winnet-cni", "CNI", "--version"}},
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

// TestBinariesAnswerVersion: each command, built by `go build` from this checkout without linker
// flags, prints "<command> <VERSION> (revision <commit>, <go version>)" for --version and exits 0,
// needing no cluster, OVS, agent or CNI environment. The revision is the one the go command recorded
// in the binary (vcs.revision, "-modified" for a tree with changes), or "unknown" when it recorded
// none: with -buildvcs=false (GOFLAGS), in a source archive, and in a linked git worktree, whose .git
// file the go command does not recognise (golang/go#58218).
func TestBinariesAnswerVersion(t *testing.T) {
	dir := buildCommands(t)
	for _, binary := range []string{"winnet-agent", "winnet-controller", "winnet-cni", "kubectl-winnet"} {
		t.Run(binary, func(t *testing.T) {
			g := NewWithT(t)
			path := filepath.Join(dir, binary)
			info, err := hostcmd.Command("go", "version", "-m", path).Output()
			g.Expect(err).NotTo(HaveOccurred(), "go version -m %s", binary)
			goVersion := regexp.MustCompile(`^\S+: (go\S+)`).FindStringSubmatch(string(info))
			g.Expect(goVersion).NotTo(BeNil(), "go version -m %s:\n%s", binary, info)
			revision := `unknown`
			if m := regexp.MustCompile(`(?m)^\s+build\s+vcs\.revision=([0-9a-f]{40})$`).FindStringSubmatch(string(info)); m != nil {
				revision = m[1][:12] + `(-modified)?`
			}

			cmd := hostcmd.Command(path, "--version")
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "CNI_") && !strings.HasPrefix(kv, "KUBECONFIG=") {
					cmd.Env = append(cmd.Env, kv)
				}
			}
			out, err := cmd.CombinedOutput()
			g.Expect(err).NotTo(HaveOccurred(), "%s --version must exit 0; printed:\n%s", binary, out)
			g.Expect(string(out)).To(MatchRegexp(`^%s %s \(revision %s, %s\)\n$`,
				regexp.QuoteMeta(binary), regexp.QuoteMeta(winnet.Version), revision, regexp.QuoteMeta(goVersion[1])))
		})
	}
}

// TestAgentSubcommands: every subcommand of winnet-agent answers --help (exit 0, its own usage)
// without a cluster, OVS or HNS; an unknown subcommand or a stray argument is refused (exit 2) with
// the list of subcommands, instead of starting the agent with every flag after it ignored.
func TestAgentSubcommands(t *testing.T) {
	dir := buildCommands(t)
	agent := filepath.Join(dir, "winnet-agent")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"preflight", "--help"}, "Usage: winnet-agent preflight [--output text|json] [flags]"},
		{[]string{"preflight", "-h"}, "Exit status: 0 all passed, 1 warnings, 2 failures"},
		{[]string{"reset", "--help"}, "Usage: winnet-agent reset [flags]"},
		{[]string{"support-bundle", "--help"}, "Usage: winnet-agent support-bundle -o FILE [flags]"},
		{[]string{"takeover", "--help"}, "Usage: winnet-agent takeover --from flannel,kube-proxy [--dry-run] [flags]"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			g := NewWithT(t)
			out, err := hostcmd.Command(agent, tc.args...).CombinedOutput()
			g.Expect(err).NotTo(HaveOccurred(), "exit 0; printed:\n%s", out)
			g.Expect(string(out)).To(ContainSubstring(tc.want))
		})
	}
	for word, args := range map[string][]string{"prefligt": {"prefligt", "--help"}, "stray": {"--node-name", "n1", "stray"}, "help": {"help"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			g := NewWithT(t)
			cmd := hostcmd.Command(agent, args...)
			cmd.Env = append(os.Environ(), "KUBECONFIG=/nonexistent")
			out, err := cmd.CombinedOutput()
			var exit interface{ ExitCode() int }
			g.Expect(errors.As(err, &exit)).To(BeTrue(), "refused; printed:\n%s", out)
			g.Expect(exit.ExitCode()).To(Equal(2), string(out))
			g.Expect(string(out)).To(ContainSubstring("unknown command or stray argument %q", word))
			for _, sub := range []string{"winnet-agent preflight", "winnet-agent reset", "winnet-agent support-bundle", "winnet-agent takeover", "winnet-agent service"} {
				g.Expect(string(out)).To(ContainSubstring(sub))
			}
			g.Expect(string(out)).NotTo(ContainSubstring("Starting winnet-agent"))
		})
	}
	// preflight refuses a stray argument of its own, and a bad --output, with exit 3 (0-2 are verdicts).
	for _, args := range [][]string{{"preflight", "--no-api-server", "extra"}, {"preflight", "--no-api-server", "--output", "yaml"}} {
		g := NewWithT(t)
		out, err := hostcmd.Command(agent, args...).CombinedOutput()
		var exit interface{ ExitCode() int }
		g.Expect(errors.As(err, &exit)).To(BeTrue(), string(out))
		g.Expect(exit.ExitCode()).To(Equal(3), string(out))
	}
}
