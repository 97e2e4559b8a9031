//go:build linux

package hns

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/test/hostcmd"
)

// testContainerd is Debian's containerd 1.6 (test/hostcmd's list) running for one test with everything under
// a temporary directory: its socket, root, state and runc's root. It has no CRI plugin; the test plays
// kubelet's runtime with ctr in containerd's namespace k8s.io, as the CRI plugin does.
type testContainerd struct {
	t              *testing.T
	dir, socket    string
	rootfs, cgroup string
}

func startTestContainerd(t *testing.T) *testContainerd {
	t.Helper()
	for _, b := range []string{"containerd", "ctr", "containerd-shim-runc-v2", "runc", "ldd"} {
		if err := hostcmd.Check(b); err != nil {
			t.Fatalf("the containerd sandbox tests need %s: %v", b, err)
		}
	}
	dir := t.TempDir()
	c := &testContainerd{t: t, dir: dir, socket: filepath.Join(dir, "c.sock"), rootfs: filepath.Join(dir, "rootfs"),
		cgroup: "/winnet-hns-test-" + filepath.Base(dir)}
	config := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = %q
[ttrpc]
  address = %q
[plugins."io.containerd.internal.v1.opt"]
  path = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), c.socket, c.socket+".ttrpc", filepath.Join(dir, "opt"))
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	c.makeRootfs("/bin/sleep", "/bin/true")
	log, err := os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := hostcmd.Command("containerd", "--config", filepath.Join(dir, "config.toml"))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting containerd: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		c.removeAll()
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		_ = log.Close()
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			t.Logf("containerd's log:\n%s", tailLines(string(b), 30))
		}
		for _, h := range []string{"blkio", "cpu", "cpuacct", "cpuset", "devices", "freezer", "memory", "pids", "systemd", "unified"} {
			_ = syscall.Rmdir(filepath.Join("/sys/fs/cgroup", h, c.cgroup))
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := c.ctr("version"); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("containerd does not answer: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return c
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// makeRootfs copies the binaries, and the libraries ldd names for them, into the containers' root filesystem.
func (c *testContainerd) makeRootfs(binaries ...string) {
	c.t.Helper()
	files := map[string]bool{}
	for _, b := range binaries {
		files[b] = true
		out, err := hostcmd.Command("ldd", b).Output()
		if err != nil {
			c.t.Fatalf("ldd %s: %v", b, err)
		}
		for _, f := range strings.Fields(string(out)) {
			if strings.HasPrefix(f, "/") {
				files[f] = true
			}
		}
	}
	for f := range files {
		b, err := os.ReadFile(f) // follows symbolic links
		if err != nil {
			c.t.Fatal(err)
		}
		dst := filepath.Join(c.rootfs, f)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			c.t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o755); err != nil {
			c.t.Fatal(err)
		}
	}
	for _, d := range []string{"proc", "dev", "sys", "tmp"} {
		if err := os.MkdirAll(filepath.Join(c.rootfs, d), 0o755); err != nil {
			c.t.Fatal(err)
		}
	}
}

func (c *testContainerd) ctr(args ...string) (string, error) {
	out, err := hostcmd.Command("ctr", append([]string{"--address", c.socket, "-n", ContainerdNamespace}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// run starts a container sleeping in the network namespace at netnsPath (a path under /run/netns: a Pod's
// sandbox, as the CRI plugin gives runc the path CNI ADD got; /proc/<pid>/ns/net: an application container
// joining its sandbox's) and returns its task's pid.
func (c *testContainerd) run(id, netnsPath string) int {
	c.t.Helper()
	if _, err := c.ctr("run", "-d", "--rootfs", "--runc-root", filepath.Join(c.dir, "runc"), "--cgroup", c.cgroup+"/"+id,
		"--with-ns", "network:"+netnsPath, c.rootfs, id, "/bin/sleep", "3600"); err != nil {
		c.t.Fatal(err)
	}
	out, err := c.ctr("task", "ls")
	if err != nil {
		c.t.Fatal(err)
	}
	for _, l := range strings.Split(out, "\n") {
		var name string
		var pid int
		if n, _ := fmt.Sscanf(l, "%s %d", &name, &pid); n == 2 && name == id {
			return pid
		}
	}
	c.t.Fatalf("container %s has no task:\n%s", id, out)
	return 0
}

// stop kills the container's task (its exit event) and, unless keepTask, deletes the task (containerd 1.6's
// delete event) and the container.
func (c *testContainerd) stop(id string, keepTask bool) {
	c.t.Helper()
	if _, err := c.ctr("task", "kill", "-s", "KILL", id); err != nil {
		c.t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, err := c.ctr("task", "ls")
		if err != nil {
			c.t.Fatal(err)
		}
		if !strings.Contains(out, id+" ") || strings.Contains(out, "STOPPED") {
			break
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("task %s does not stop:\n%s", id, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if keepTask {
		return
	}
	if _, err := c.ctr("task", "delete", id); err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.ctr("container", "delete", id); err != nil {
		c.t.Fatal(err)
	}
}

// removeAll kills and deletes every task and container (the test's cleanup).
func (c *testContainerd) removeAll() {
	out, _ := c.ctr("container", "ls", "-q")
	for _, id := range strings.Fields(out) {
		_, _ = c.ctr("task", "kill", "-s", "KILL", id)
		for i := 0; i < 100; i++ {
			if _, err := c.ctr("task", "delete", id); err == nil || strings.Contains(err.Error(), "not found") {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		_, _ = c.ctr("container", "delete", id)
	}
}

// sandboxMarks lists the started sandboxes in dir.
func sandboxMarks(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return []string{}, nil
	}
	if err != nil {
		return nil, err
	}
	names := []string{}
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names, nil
}

// TestContainerdSandboxes runs the simulator's sandbox source against a real containerd: on connecting, it
// marks the sandboxes whose tasks run and forgets a mark left by a sandbox that no longer does; then a task of
// a container that owns a network namespace starts its sandbox, a container joining another's namespace
// (/proc/<pid>/ns/net) and an exec'd process's exit change nothing, and the owner's exit (its task not even
// deleted, as containerd 2.x's sandbox controller does) or its delete stops it.
func TestContainerdSandboxes(t *testing.T) {
	g := NewWithT(t)
	c := startTestContainerd(t)
	_, nsA := newNetNS(t, "ctdA")
	_, nsB := newNetNS(t, "ctdB")
	_, nsC := newNetNS(t, "ctdC")
	sandboxes := filepath.Join(c.dir, "sandboxes")

	// Before the source runs: sandbox a runs; a mark of a sandbox gone while nobody looked is left.
	c.run("a", nsA)
	g.Expect(StartSandbox(sandboxes, "/run/netns/gone")).To(Succeed())

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		ContainerdSandboxes{Address: c.socket, SandboxDir: sandboxes, Log: testr.New(t)}.Run(ctx)
		close(done)
	}()
	t.Cleanup(func() { cancel(); <-done })
	marks := func() ([]string, error) { return sandboxMarks(sandboxes) }
	const wait, poll = 20 * time.Second, 20 * time.Millisecond
	g.Eventually(marks, wait, poll).Should(Equal([]string{sandboxFileName(nsA)}), "caught up: a runs, the gone one is forgotten")

	// b owns its namespace: its start starts its sandbox. b-app joins b's namespace through /proc: nothing.
	pidB := c.run("b", nsB)
	g.Eventually(marks, wait, poll).Should(ConsistOf(sandboxFileName(nsA), sandboxFileName(nsB)))
	c.run("b-app", fmt.Sprintf("/proc/%d/ns/net", pidB))
	// A process exec'd in b exits: b's sandbox still runs.
	if _, err := c.ctr("task", "exec", "--exec-id", "probe", "b", "/bin/true"); err != nil {
		t.Fatal(err)
	}
	// c starts after b-app and the exec: once c's mark is there, the events before it were handled.
	c.run("c", nsC)
	g.Eventually(marks, wait, poll).Should(ConsistOf(sandboxFileName(nsA), sandboxFileName(nsB), sandboxFileName(nsC)))
	c.stop("b-app", false)
	g.Consistently(marks, time.Second, poll).Should(ConsistOf(sandboxFileName(nsA), sandboxFileName(nsB), sandboxFileName(nsC)),
		"an application container's exit stops no sandbox")

	// a's task exits and stays (containerd 2.x sends no delete): its exit stops it. c is deleted (1.6).
	c.stop("a", true)
	g.Eventually(marks, wait, poll).Should(ConsistOf(sandboxFileName(nsB), sandboxFileName(nsC)))
	c.stop("c", false)
	g.Eventually(marks, wait, poll).Should(ConsistOf(sandboxFileName(nsB)))
}
