//go:build linux

package cluster

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/winnet-io/winnet/test/hostcmd"
)

// A run directory holds, besides logs and per-node state:
const (
	ownerFile  = "owner.pid" // the pid of the process that built the cluster
	prefixFile = "prefix"    // the run prefix carried by every namespace of the run
	pidsFile   = "pids"      // "<pid> <name>" for every process started, appended as they start
	dirsFile   = "dirs"      // directories outside the run directory to remove at teardown
)

// registry records what a run creates in its run directory, so that a later Teardown finds it.
type registry struct {
	dir string
	mu  sync.Mutex
}

func (r *registry) appendLine(file, line string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	f, err := os.OpenFile(filepath.Join(r.dir, file), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("recording in %s: %w", file, err)
	}
	_, err = fmt.Fprintln(f, line)
	return errors.Join(err, f.Close())
}

func (r *registry) recordPid(pid int, name string) error {
	return r.appendLine(pidsFile, fmt.Sprintf("%d %s", pid, name))
}

func (r *registry) recordDir(dir string) error { return r.appendLine(dirsFile, dir) }

// process is a daemon the harness started (an agent, winnet-controller), stopped by pid.
type process struct {
	name string
	args []string
	// env is added to the harness's environment.
	env     []string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{}
}

// startProcess starts args[0] with its output appended to logPath and records its pid. The process dies with
// the harness (PR_SET_PDEATHSIG) unless detached; a detached one (the demo's) runs in its own session.
func (r *registry) startProcess(name, logPath string, detached bool, args ...string) (*process, error) {
	p := &process{name: name, args: args, logPath: logPath}
	return p, p.start(r, detached)
}

// startProcessWithEnv is startProcess with variables added to the environment (flanneld's NODE_NAME).
func (r *registry) startProcessWithEnv(name, logPath string, env []string, args ...string) (*process, error) {
	p := &process{name: name, args: args, logPath: logPath, env: env}
	return p, p.start(r, false)
}

func (p *process) start(r *registry, detached bool) error {
	log, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("opening the log of %s: %w", p.name, err)
	}
	cmd := hostcmd.Command(p.args[0], p.args[1:]...)
	cmd.Stdout, cmd.Stderr = log, log
	if len(p.env) > 0 {
		cmd.Env = append(os.Environ(), p.env...)
	}
	if detached {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	} else {
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	}
	err = cmd.Start()
	_ = log.Close() // the child has its own descriptor
	if err != nil {
		return fmt.Errorf("starting %s (%s): %w", p.name, p.args[0], err)
	}
	p.cmd, p.done = cmd, make(chan struct{})
	go func(done chan struct{}) {
		_ = cmd.Wait()
		close(done)
	}(p.done)
	return r.recordPid(cmd.Process.Pid, programName(p.args))
}

// programName is the name of the program the command runs: the one `ip netns exec NS` execs, else args[0].
func programName(args []string) string {
	if len(args) > 4 && filepath.Base(args[0]) == "ip" && args[1] == "netns" && args[2] == "exec" {
		return filepath.Base(args[4])
	}
	// nsenter and unshare exec the program after "--".
	if b := filepath.Base(args[0]); b == "nsenter" || b == "unshare" {
		for i, a := range args {
			if a == "--" && i+1 < len(args) {
				return filepath.Base(args[i+1])
			}
		}
	}
	return filepath.Base(args[0])
}

// running reports whether the process has not exited.
func (p *process) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// stop signals the process and waits up to timeout for it to exit, then kills it.
func (p *process) stop(sig syscall.Signal, timeout time.Duration) error {
	if p.cmd == nil || !p.running() {
		return nil
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signalling %s (pid %d): %w", p.name, p.cmd.Process.Pid, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s (pid %d) did not exit within %v of %v; killed", p.name, p.cmd.Process.Pid, timeout, sig)
	}
}

// kill signals the running process with sig and waits up to timeout for it to exit. Unlike stop, it is for
// injecting a fault and checks that the fault happened: it fails when the process was not running, did not
// exit, or (SIGKILL) did not die of the signal. It returns the pid that died.
func (p *process) kill(sig syscall.Signal, timeout time.Duration) (int, error) {
	if p.cmd == nil || !p.running() {
		return 0, fmt.Errorf("%s is not running: nothing to stop", p.name)
	}
	pid := p.cmd.Process.Pid
	if err := p.stop(sig, timeout); err != nil {
		return pid, err
	}
	if processAlive(pid, "") {
		return pid, fmt.Errorf("%s (pid %d) still runs after %v", p.name, pid, sig)
	}
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if sig == syscall.SIGKILL && (!ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL) {
		return pid, fmt.Errorf("%s (pid %d) ended with %v, not by SIGKILL", p.name, pid, p.cmd.ProcessState)
	}
	return pid, nil
}

// exitState describes how the process ended ("exit status 0", "signal: killed"), empty while it runs.
func (p *process) exitState() string {
	if p.cmd == nil || p.running() {
		return ""
	}
	return p.cmd.ProcessState.String()
}

// logTail returns the last n lines of the process's log.
func (p *process) logTail(n int) string { return tailFile(p.logPath, n) }

func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// recordedPids reads the pids file of a run directory.
func recordedPids(runDir string) map[int]string {
	pids := map[int]string{}
	f, err := os.Open(filepath.Join(runDir, pidsFile))
	if err != nil {
		return pids
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) != 2 {
			continue
		}
		if pid, err := strconv.Atoi(fields[0]); err == nil {
			pids[pid] = fields[1]
		}
	}
	return pids
}

// processAlive reports whether pid runs a program named name (guarding against pid reuse); an empty name
// accepts any program.
func processAlive(pid int, name string) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(cmdline) == 0 {
		return false
	}
	if name == "" {
		return true
	}
	argv0 := strings.SplitN(string(cmdline), "\x00", 2)[0]
	return filepath.Base(argv0) == name
}

// killRecorded kills (SIGKILL) every recorded process that still runs the recorded program and waits for them
// to be gone.
func killRecorded(runDir string) {
	pids := recordedPids(runDir)
	for pid, name := range pids {
		if processAlive(pid, name) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	waitGone(pids)
}

func waitGone(pids map[int]string) {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		alive := false
		for pid, name := range pids {
			alive = alive || processAlive(pid, name)
		}
		if !alive {
			return
		}
	}
}

// childPids returns the pids of the children of this process whose program is one of names (the envtest
// API server and etcd, which it starts without exposing their pids).
func childPids(names ...string) map[int]string {
	found := map[int]string{}
	entries, _ := os.ReadDir("/proc")
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so parse after the last ')'.
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(s[i+1:])
		if len(fields) < 2 {
			continue
		}
		if ppid, _ := strconv.Atoi(fields[1]); ppid != self {
			continue
		}
		comm := s[strings.IndexByte(s, '(')+1 : i]
		for _, n := range names {
			if comm == n {
				found[pid] = n
			}
		}
	}
	return found
}
