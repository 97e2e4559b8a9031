//go:build !windows

package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/winnet-io/winnet/controllers/nodenetwork"
	"github.com/winnet-io/winnet/internal/agent"
	"github.com/winnet-io/winnet/internal/securefs"
	"github.com/winnet-io/winnet/test/framework"
)

// TestStateDirectoryAtStart starts the agent's Pod network against a real API server with a state
// directory prepared the ways a local user could have left it: a corrupt Pod record is set aside
// and the agent starts; a directory open to everyone is narrowed and the agent starts; a directory
// owned by another user stops the agent. Each says so in an Event on the Node.
func TestStateDirectoryAtStart(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test chowns a directory: run it as root")
	}
	server, err := framework.StartAPIServer()
	if err != nil {
		t.Fatalf("this test needs a real kube-apiserver: %v", err)
	}
	t.Cleanup(func() { _ = server.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// start sets up and starts the Pod network of node; it returns SetupPodNetwork's error.
	start := func(g *WithT, node, stateDir string) error {
		g.Expect(server.Client.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})).To(Succeed())
		mgr, err := agent.NewManager(server.Config, agent.Options{NodeName: node, MetricsBindAddress: "0", HealthProbeBindAddress: "0", SeveralAgentsPerProcess: true})
		g.Expect(err).NotTo(HaveOccurred())
		dir := t.TempDir()
		_, err = agent.SetupPodNetwork(ctx, mgr, agent.PodNetworkOptions{
			NodeName: node, State: nodenetwork.NewState(),
			CNISocket: filepath.Join(dir, "run", "cni.sock"), CNIConfDir: filepath.Join(dir, "net.d"), StateDir: stateDir,
		})
		if err != nil {
			return err
		}
		mctx, mcancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- mgr.Start(mctx) }()
		t.Cleanup(func() { mcancel(); <-done })
		g.Consistently(done).WithTimeout(2*time.Second).ShouldNot(Receive(), "the agent runs")
		return nil
	}
	events := func(g Gomega, node string) []string {
		list := &corev1.EventList{}
		g.Expect(server.Client.List(ctx, list, client.InNamespace(metav1.NamespaceDefault))).To(Succeed())
		var out []string
		for _, e := range list.Items {
			if e.InvolvedObject.Kind == "Node" && e.InvolvedObject.Name == node {
				out = append(out, e.Reason+": "+e.Message)
			}
		}
		return out
	}

	t.Run("a corrupt Pod record is set aside and the agent starts", func(t *testing.T) {
		g := NewWithT(t)
		stateDir := filepath.Join(t.TempDir(), "state")
		_, err := securefs.EnsureDir(filepath.Join(stateDir, "pods"), securefs.Private)
		g.Expect(err).NotTo(HaveOccurred())
		record := filepath.Join(stateDir, "pods", "sandbox-1.json")
		g.Expect(os.WriteFile(record, []byte(`{"sandboxID":"sandbox-1","podName":`), 0o600)).To(Succeed())

		g.Expect(start(g, "node-corrupt", stateDir)).To(Succeed())
		g.Expect(record).NotTo(BeAnExistingFile())
		g.Expect(record+".untrusted-1").To(BeAnExistingFile(), "kept for a person to look at")
		g.Eventually(func(g Gomega) []string { return events(g, "node-corrupt") }).Should(
			ContainElement(And(HavePrefix(agent.RecordSetAsideReason+": "), ContainSubstring(record))))
	})

	t.Run("a state directory open to everyone is narrowed and the agent starts", func(t *testing.T) {
		g := NewWithT(t)
		stateDir := filepath.Join(t.TempDir(), "state")
		g.Expect(os.MkdirAll(filepath.Join(stateDir, "pods"), 0o700)).To(Succeed())
		g.Expect(os.Chmod(stateDir, 0o777)).To(Succeed())

		g.Expect(start(g, "node-open", stateDir)).To(Succeed())
		g.Expect(securefs.CheckDir(stateDir, securefs.Private)).To(Succeed())
		g.Eventually(func(g Gomega) []string { return events(g, "node-open") }).Should(
			ContainElement(And(HavePrefix(agent.DirectoryRepairedReason+": "), ContainSubstring(stateDir))))
	})

	t.Run("a state directory owned by another user stops the agent", func(t *testing.T) {
		g := NewWithT(t)
		stateDir := filepath.Join(t.TempDir(), "state")
		g.Expect(os.MkdirAll(stateDir, 0o700)).To(Succeed())
		g.Expect(os.Chown(stateDir, 65534, 65534)).To(Succeed())

		err := start(g, "node-foreign", stateDir)
		g.Expect(err).To(MatchError(securefs.ErrUntrustedOwner))
		g.Expect(err.Error()).To(ContainSubstring(stateDir))
		g.Eventually(func(g Gomega) []string { return events(g, "node-foreign") }).Should(
			ContainElement(And(HavePrefix(agent.UntrustedDirectoryReason+": "), ContainSubstring(stateDir))))
	})
}
