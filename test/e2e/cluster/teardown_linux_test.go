//go:build linux

package cluster

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/test/hostcmd"
)

// startSleep starts `sleep 300`, inside namespace ns when given, and reaps it when it dies.
func startSleep(t *testing.T, ns string) int {
	t.Helper()
	args := []string{"sleep", "300"}
	if ns != "" {
		args = append([]string{"ip", "netns", "exec", ns}, args...)
	}
	cmd := hostcmd.Command(args[0], args[1:]...)
	NewWithT(t).Expect(cmd.Start()).To(Succeed())
	go func() { _ = cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return cmd.Process.Pid
}

// TestSweepRemovesDeadRuns builds what a killed run leaves behind — a recorded process, a namespace with a
// process inside, a recorded directory, a run directory whose owner is gone — and checks that Sweep removes it
// all while it leaves a run whose owner lives alone.
func TestSweepRemovesDeadRuns(t *testing.T) {
	g := NewWithT(t)
	if err := checkPrerequisites(); err != nil {
		t.Fatalf("%v", err)
	}
	b := make([]byte, 2)
	_, _ = rand.Read(b)
	prefix := "wne" + hex.EncodeToString(b)
	dead := filepath.Join(RunRoot, prefix)
	g.Expect(os.MkdirAll(dead, 0o755)).To(Succeed())
	t.Cleanup(func() { _ = Teardown(dead) })

	finished := hostcmd.Command("true")
	g.Expect(finished.Run()).To(Succeed())
	ns := prefix + "-node"
	g.Expect(addNS(ns)).To(Succeed())
	inside := startSleep(t, ns)
	recorded := startSleep(t, "")
	extra := t.TempDir()
	reg := &registry{dir: dead}
	g.Expect(os.WriteFile(filepath.Join(dead, ownerFile), []byte(strconv.Itoa(finished.Process.Pid)), 0o644)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(dead, prefixFile), []byte(prefix), 0o644)).To(Succeed())
	g.Expect(reg.recordPid(recorded, "sleep")).To(Succeed())
	g.Expect(reg.recordDir(extra)).To(Succeed())

	live := filepath.Join(RunRoot, prefix+"l")
	g.Expect(os.MkdirAll(live, 0o755)).To(Succeed())
	t.Cleanup(func() { _ = os.RemoveAll(live) })
	g.Expect(os.WriteFile(filepath.Join(live, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644)).To(Succeed())

	// `ip netns exec` enters the namespace and then execs sleep: until it has, Sweep cannot find it there.
	g.Eventually(func() bool { return processAlive(inside, "sleep") && processAlive(recorded, "sleep") }).
		WithTimeout(5 * time.Second).Should(BeTrue())
	g.Expect(Sweep()).To(Succeed())
	g.Eventually(func() bool { return processAlive(recorded, "sleep") || processAlive(inside, "sleep") }).
		WithTimeout(5 * time.Second).Should(BeFalse())
	g.Expect(nsPath(ns)).NotTo(BeAnExistingFile())
	g.Expect(extra).NotTo(BeADirectory())
	g.Expect(dead).NotTo(BeADirectory())
	g.Expect(live).To(BeADirectory(), "a run whose owner lives is not touched")
}
