//go:build linux && bench

package benchutil

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/hostcmd"
	"github.com/winnet-io/winnet/test/simnode"
)

// BuildAgent builds winnet-agent. A non-empty pprofOverlay is a Go file added to its main package
// through go build -overlay (the agent's sources are not changed), such as one serving
// net/http/pprof from the start of the process.
func BuildAgent(t *testing.T, pprofOverlay string) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "winnet-agent")
	args := []string{"build", "-o", bin}
	if pprofOverlay != "" {
		root := framework.RepoRoot()
		overlay, err := json.Marshal(map[string]map[string]string{"Replace": {
			filepath.Join(root, "cmd", "winnet-agent", "zz_bench_pprof.go"): pprofOverlay,
		}})
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(dir, "overlay.json")
		if err := os.WriteFile(file, overlay, 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "-overlay", file)
	}
	build := hostcmd.Command("go", append(args, "./cmd/winnet-agent")...)
	build.Dir = framework.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building winnet-agent: %v\n%s", err, out)
	}
	return bin
}

// Agent is a running winnet-agent process.
type Agent struct {
	Cmd    *exec.Cmd
	Exited chan struct{}
	Log    string
}

// StartAgent starts the agent binary for node, logging to logFile, with its CNI socket, conflist
// and state in the test's own directory, away from the host's. env is added to its environment
// and extraArgs to its flags. It is killed in t.Cleanup if still running.
func StartAgent(t *testing.T, bin, kubeconfig string, node *simnode.Node, logFile string, env []string, extraArgs ...string) *Agent {
	t.Helper()
	f, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--node-name", node.Name, "--kubeconfig", kubeconfig, "--ovsdb", node.OVS.DBSocket(),
		"--ovs-rundir", node.OVS.Dir, "--netns", node.NSPath, "--health-probe-bind-address", "0", "--metrics-bind-address", "0",
		"--zap-time-encoding", "rfc3339nano"}
	state := t.TempDir()
	args = append(args, "--state-dir", state, "--cni-socket", filepath.Join(state, "cni.sock"), "--cni-conf-dir", filepath.Join(state, "net.d"),
		"--audit-log-dir", filepath.Join(state, "audit"))
	if level := os.Getenv("BENCH_AGENT_LOG_LEVEL"); level != "" {
		args = append(args, "--zap-log-level", level)
	}
	cmd := hostcmd.Command(bin, append(args, extraArgs...)...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting winnet-agent: %v", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		_ = f.Close()
	})
	return &Agent{Cmd: cmd, Exited: exited, Log: logFile}
}

// Stop ends the agent as a service manager would.
func (a *Agent) Stop() {
	_ = a.Cmd.Process.Signal(syscall.SIGTERM)
	<-a.Exited
}

// FetchProfile saves the agent's /debug/pprof/<what> into file once its pprof server at addr
// answers; the channel closes when it is written.
func FetchProfile(t *testing.T, addr, what, file string) <-chan struct{} {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 200 {
			resp, err := http.Get("http://" + addr + "/debug/pprof/" + what)
			if err != nil {
				time.Sleep(5 * time.Millisecond) // the agent is still starting
				continue
			}
			defer resp.Body.Close()
			data, err := io.ReadAll(resp.Body)
			if err == nil && resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("%s: %s", resp.Status, data)
			}
			if err == nil {
				err = os.WriteFile(file, data, 0o600)
			}
			if err != nil {
				t.Errorf("saving the agent's %s profile: %v", what, err)
			}
			return
		}
		t.Errorf("the agent's pprof server at %s did not answer", addr)
	}()
	return done
}

// VswitchdPID finds the node's ovs-vswitchd.
func VswitchdPID(t *testing.T, node *simnode.Node) int {
	t.Helper()
	out, err := hostcmd.Command("pgrep", "-f", "ovs-vswitchd unix:"+node.OVS.DBSocket()).Output()
	if err != nil {
		t.Fatalf("finding the node's ovs-vswitchd: %v", err)
	}
	pid, err := strconv.Atoi(strings.Fields(string(out))[0])
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// CPUTime returns the user and system CPU time a process has used, with that of its children it
// waited for when children is set (USER_HZ is 100 on Linux).
func CPUTime(t *testing.T, pid int, children bool) time.Duration {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// The fields after the command name, which is in parentheses and may hold spaces.
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	ticks := 0
	fields := []int{11, 12} // utime, stime
	if children {
		fields = append(fields, 13, 14) // cutime, cstime
	}
	for _, i := range fields {
		n, _ := strconv.Atoi(f[i])
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

// RSSMB is a process's resident set size in MiB.
func RSSMB(t *testing.T, pid int) int {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			kb, _ := strconv.Atoi(strings.Fields(line)[1])
			return kb / 1024
		}
	}
	t.Fatal("no VmRSS")
	return 0
}
