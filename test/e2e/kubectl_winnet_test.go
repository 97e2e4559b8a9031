//go:build linux

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/test/e2e/cluster"
	"github.com/winnet-io/winnet/test/hostcmd"
)

// TestKubectlWinnet runs the plugin binary (make build) against the cluster, as kubectl runs it: `kubectl
// winnet trace` prints the hops of a trace across the tunnel as a table and keeps the trace on request,
// `kubectl get ptrace` shows its phase and verdict, and `kubectl winnet status` lists every node Ready.
func TestKubectlWinnet(t *testing.T) {
	g := NewWithT(t)
	plugin := filepath.Join(c.BinDir, "kubectl-winnet")
	s, err := cluster.ServeEcho(pods["pod-b1"].NSPath, 8080)
	g.Expect(err).NotTo(HaveOccurred())
	defer s.Close()

	out, err := hostcmd.Command(plugin, "trace", "pod-a1", "pod-b1", "--port", "8080", "--keep", "--kubeconfig", c.Kubeconfig).CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "%s", out)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	g.Expect(lines[0]).To(MatchRegexp(`^PacketTrace default/kubectl-[a-z0-9]+ created$`))
	name := strings.TrimSuffix(strings.TrimPrefix(lines[0], "PacketTrace default/"), " created")
	g.Expect(lines[1]).To(Equal("Phase: Succeeded  Verdict: Delivered"))
	g.Expect(lines[2]).To(MatchRegexp(`^NODE\s+COMPONENT\s+ACTION\s+DETAIL$`))
	g.Expect(lines[3:]).To(ContainElements(
		MatchRegexp(`^node-a\s+Source\s+Injected\s+TCP `),
		MatchRegexp(`^node-a\s+Forwarding\s+Forwarded\s+tunnel to 192\.168\.77\.12 \(node node-b\)`),
		MatchRegexp(`^node-b\s+Output\s+Delivered\s+to `+strings.ReplaceAll(pods["pod-b1"].IP.String(), ".", `\.`)+`:8080`)))
	g.Expect(strings.Index(string(out), "node-a ")).To(BeNumerically("<", strings.Index(string(out), "node-b ")), "the source node first")
	defer func() {
		_, _ = hostcmd.Command("kubectl", "--kubeconfig", c.Kubeconfig, "delete", "ptrace", name).CombinedOutput()
	}()

	got, err := hostcmd.Command("kubectl", "--kubeconfig", c.Kubeconfig, "get", "ptrace", name).CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "%s", got)
	g.Expect(string(got)).To(MatchRegexp(`NAME\s+PHASE\s+VERDICT\s+DROPPED-BY\s+AGE`))
	g.Expect(string(got)).To(MatchRegexp(name + `\s+Succeeded\s+Delivered\s+`))

	// A bad request is refused before anything is created.
	out, err = hostcmd.Command(plugin, "trace", "pod-a1", "pod-b1", "--protocol", "sctp", "--kubeconfig", c.Kubeconfig).CombinedOutput()
	g.Expect(err).To(HaveOccurred())
	g.Expect(string(out)).To(ContainSubstring(`--protocol "sctp": tcp, udp or icmp`))

	// As a kubectl plugin: kubectl finds kubectl-winnet on PATH.
	cmd := hostcmd.Command("kubectl", "winnet", "status", "--kubeconfig", c.Kubeconfig)
	cmd.Env = append(os.Environ(), "PATH="+c.BinDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err = cmd.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "%s", out)
	g.Expect(string(out)).To(MatchRegexp(`NODE\s+READY\s+CONDITIONS\s+FLOWS\s+ROUTES\s+SERVICES\s+POLICIES`))
	for _, n := range []string{"node-a", "node-b", "node-c"} {
		g.Expect(string(out)).To(MatchRegexp(`(?m)^`+n+`\s+True\s+\S*Ready=True\S*\s+[1-9][0-9]*\s+[0-9]+/[0-9]+ \(0 failed\)`), "%s", out)
	}
}
