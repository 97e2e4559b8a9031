package ovstest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/winnet-io/winnet/test/hostcmd"
)

// Binaries the harness needs; all come with Debian's openvswitch-switch.
var requiredBinaries = []string{"ovsdb-tool", "ovsdb-server", "ovs-vswitchd", "ovs-vsctl", "ovs-ofctl", "ovs-appctl"}

// schemaPaths are the places where the vswitchd schema is looked up.
var schemaPaths = []string{"/usr/share/openvswitch/vswitch.ovsschema", "/usr/local/share/openvswitch/vswitch.ovsschema"}

// Options configures a test OVS instance.
type Options struct {
	// NetNS is the name of an existing network namespace (as created by `ip
	// netns add`) in which the daemons run. Empty creates a private namespace
	// for this instance and deletes it in Stop: the userspace datapath creates
	// tap devices (ovs-netdev, one per internal port) whose names are global in
	// a namespace, so two instances must never share one.
	NetNS string
	// StartTimeout bounds how long each daemon may take to come up; default 10s.
	StartTimeout time.Duration
}

// OVS is one private ovsdb-server + ovs-vswitchd pair living in a temp dir.
type OVS struct {
	// Dir is the run, db, log and sysconf directory of this instance.
	Dir   string
	opts  Options
	ownNS bool

	mu       sync.Mutex
	dbCmd    *exec.Cmd
	vsCmd    *exec.Cmd
	dbDone   chan struct{}
	vsDone   chan struct{}
	stopOnce sync.Once
}

// CheckPrerequisites reports why a real OVS cannot be started here, or nil.
func CheckPrerequisites() error {
	if os.Geteuid() != 0 {
		return errors.New("OVS integration tests must run as root (ovs-vswitchd needs /dev/net/tun and network namespaces)")
	}
	var missing []string
	for _, b := range requiredBinaries {
		if _, err := lookPath(b); err != nil {
			missing = append(missing, b)
		}
	}
	if _, err := schemaPath(); err != nil {
		missing = append(missing, "vswitch.ovsschema")
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing %s", strings.Join(missing, ", "))
	}
	return nil
}

// Start starts a fresh OVS for the test and stops it in t.Cleanup. A missing
// prerequisite fails the test; it never skips.
func Start(t testing.TB, opts Options) *OVS {
	t.Helper()
	if err := CheckPrerequisites(); err != nil {
		t.Fatalf("cannot start Open vSwitch for this test: %v; install openvswitch-switch: run hack/setup-test-deps.sh", err)
	}
	o, err := New(opts)
	if err != nil {
		t.Fatalf("starting Open vSwitch: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			o.dumpLogs(t)
		}
		o.Stop()
	})
	return o
}

// New starts a fresh OVS without a testing.TB (for benchmarks and tools). Call Stop.
func New(opts Options) (*OVS, error) {
	if err := CheckPrerequisites(); err != nil {
		return nil, fmt.Errorf("%w; install openvswitch-switch: run hack/setup-test-deps.sh", err)
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 10 * time.Second
	}
	// Short directory: unix socket paths must stay below 108 bytes.
	dir, err := os.MkdirTemp("/tmp", "ovs")
	if err != nil {
		return nil, fmt.Errorf("creating OVS temp dir: %w", err)
	}
	o := &OVS{Dir: dir, opts: opts}
	if opts.NetNS == "" {
		o.opts.NetNS = "wn" + filepath.Base(dir)
		if out, err := hostcmd.Command("ip", "netns", "add", o.opts.NetNS).CombinedOutput(); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("creating network namespace %s: %w: %s", o.opts.NetNS, err, out)
		}
		o.ownNS = true
		_ = hostcmd.Command("ip", "netns", "exec", o.opts.NetNS, "ip", "link", "set", "lo", "up").Run()
	}
	schema, err := schemaPath()
	if err != nil {
		return nil, err
	}
	if out, err := o.command("ovsdb-tool", "create", o.dbFile(), schema).CombinedOutput(); err != nil {
		o.Stop()
		return nil, fmt.Errorf("creating OVS database: %w: %s", err, out)
	}
	if err := o.StartOVSDB(); err != nil {
		o.Stop()
		return nil, err
	}
	if _, err := o.Vsctl("--no-wait", "init"); err != nil {
		o.Stop()
		return nil, err
	}
	if err := o.StartVswitchd(); err != nil {
		o.Stop()
		return nil, err
	}
	return o, nil
}

// NetNS is the network namespace the daemons run in.
func (o *OVS) NetNS() string { return o.opts.NetNS }

// DBSocket is the path of ovsdb-server's unix socket.
func (o *OVS) DBSocket() string { return filepath.Join(o.Dir, "db.sock") }

// MgmtSocket is the path of the OpenFlow management socket of a bridge.
func (o *OVS) MgmtSocket(bridge string) string { return filepath.Join(o.Dir, bridge+".mgmt") }

func (o *OVS) dbFile() string { return filepath.Join(o.Dir, "conf.db") }

func (o *OVS) env() []string {
	return append(os.Environ(),
		"OVS_RUNDIR="+o.Dir, "OVS_DBDIR="+o.Dir, "OVS_LOGDIR="+o.Dir, "OVS_SYSCONFDIR="+o.Dir, "OVS_PKGDATADIR=/usr/share/openvswitch")
}

// command builds a command for an OVS binary, inside the namespace if any.
func (o *OVS) command(name string, args ...string) *exec.Cmd {
	path, err := lookPath(name)
	if err != nil {
		path = name
	}
	var cmd *exec.Cmd
	if o.opts.NetNS != "" {
		cmd = hostcmd.Command("ip", append([]string{"netns", "exec", o.opts.NetNS, path}, args...)...)
	} else {
		cmd = hostcmd.Command(path, args...)
	}
	cmd.Env = o.env()
	cmd.Dir = o.Dir
	return cmd
}

// StartOVSDB starts ovsdb-server on the existing database.
func (o *OVS) StartOVSDB() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	_ = os.Remove(o.DBSocket())
	cmd := o.command("ovsdb-server", o.dbFile(),
		"--remote=punix:"+o.DBSocket(),
		"--unixctl="+filepath.Join(o.Dir, "ovsdb-server.ctl"),
		"--log-file="+filepath.Join(o.Dir, "ovsdb-server.log"),
		"--no-chdir")
	done, err := startDaemon(cmd)
	if err != nil {
		return fmt.Errorf("starting ovsdb-server: %w", err)
	}
	o.dbCmd, o.dbDone = cmd, done
	if err := waitFor(o.opts.StartTimeout, done, func() bool { return socketReady(o.DBSocket()) }); err != nil {
		return fmt.Errorf("waiting for ovsdb-server socket %s: %w", o.DBSocket(), err)
	}
	return nil
}

// StartVswitchd starts ovs-vswitchd against the database.
func (o *OVS) StartVswitchd() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	ctl := filepath.Join(o.Dir, "ovs-vswitchd.ctl")
	_ = os.Remove(ctl)
	cmd := o.command("ovs-vswitchd", "unix:"+o.DBSocket(),
		"--unixctl="+ctl,
		"--log-file="+filepath.Join(o.Dir, "ovs-vswitchd.log"),
		"--no-chdir")
	done, err := startDaemon(cmd)
	if err != nil {
		return fmt.Errorf("starting ovs-vswitchd: %w", err)
	}
	o.vsCmd, o.vsDone = cmd, done
	if err := waitFor(o.opts.StartTimeout, done, func() bool { return socketReady(ctl) }); err != nil {
		return fmt.Errorf("waiting for ovs-vswitchd control socket: %w", err)
	}
	return nil
}

// KillVswitchd kills ovs-vswitchd with SIGKILL and waits for it to exit. It fails unless ovs-vswitchd was
// running and died of the signal, so that a test injecting the fault knows it happened.
func (o *OVS) KillVswitchd() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return killDaemon("ovs-vswitchd", o.vsCmd, o.vsDone)
}

// KillOVSDB kills ovsdb-server with SIGKILL (a crash: no clean close of the database or its clients) and waits
// for it to exit; it fails unless ovsdb-server was running and died of the signal. StartOVSDB starts it again
// on the same database.
func (o *OVS) KillOVSDB() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return killDaemon("ovsdb-server", o.dbCmd, o.dbDone)
}

// VswitchdPid and OVSDBPid return the pids of the running daemons, 0 for one that is not running.
func (o *OVS) VswitchdPid() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return runningPid(o.vsCmd, o.vsDone)
}

// OVSDBPid: see VswitchdPid.
func (o *OVS) OVSDBPid() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return runningPid(o.dbCmd, o.dbDone)
}

func runningPid(cmd *exec.Cmd, done chan struct{}) int {
	if cmd == nil || cmd.Process == nil {
		return 0
	}
	select {
	case <-done:
		return 0
	default:
		return cmd.Process.Pid
	}
}

// RestartVswitchd kills ovs-vswitchd with SIGKILL and starts it again.
func (o *OVS) RestartVswitchd() error {
	if err := o.KillVswitchd(); err != nil {
		return err
	}
	return o.StartVswitchd()
}

// RestartOVSDB stops ovsdb-server (SIGTERM) and starts it again on the same database.
func (o *OVS) RestartOVSDB() error {
	o.mu.Lock()
	err := stopDaemon(o.dbCmd, o.dbDone, syscall.SIGTERM)
	o.mu.Unlock()
	if err != nil {
		return err
	}
	return o.StartOVSDB()
}

// Stop stops both daemons by pid and removes the directory.
func (o *OVS) Stop() {
	o.stopOnce.Do(func() {
		o.mu.Lock()
		_ = stopDaemon(o.vsCmd, o.vsDone, syscall.SIGTERM)
		_ = stopDaemon(o.dbCmd, o.dbDone, syscall.SIGTERM)
		o.mu.Unlock()
		if o.ownNS {
			_ = hostcmd.Command("ip", "netns", "del", o.opts.NetNS).Run()
		}
		_ = os.RemoveAll(o.Dir)
	})
}

// Vsctl runs ovs-vsctl against this instance.
func (o *OVS) Vsctl(args ...string) (string, error) {
	return o.run("ovs-vsctl", append([]string{"--db=unix:" + o.DBSocket(), "--timeout=10"}, args...)...)
}

// Ofctl runs ovs-ofctl with OpenFlow 1.5; pass the bridge name as usual, it
// resolves to this instance's management socket through OVS_RUNDIR.
func (o *OVS) Ofctl(args ...string) (string, error) {
	return o.run("ovs-ofctl", append([]string{"-O", "OpenFlow15"}, args...)...)
}

// Appctl runs ovs-appctl against ovs-vswitchd.
func (o *OVS) Appctl(args ...string) (string, error) {
	return o.run("ovs-appctl", append([]string{"-t", filepath.Join(o.Dir, "ovs-vswitchd.ctl")}, args...)...)
}

// ExactMatchDatapath makes ovs-vswitchd cache only exact-match datapath flows (`ovs-appctl
// upcall/disable-megaflows`), as the Windows datapath does: it has no masks and looks a packet's
// whole key up (OvsLookupFlow in openvswitch/ovs v2.17.0 datapath-windows/ovsext/Flow.c). Tests that
// judge enforcement after many OpenFlow changes need it on Debian's OVS 3.1.0: with megaflows, the
// userspace datapath can keep a stale megaflow after the revalidator modifies two overlapping ones
// (it finds the flow to modify by key, not by UFID, and changes the wrong one), so a packet can take
// an action the flow tables no longer have; fixed in OVS 3.1.3 (commit 21410ff80, "dpif-netdev: Fix
// dpif_netdev_flow_put"; hack/ovs-stale-megaflow.sh reproduces it). It lasts until ovs-vswitchd
// restarts.
//
// ovs-vswitchd registers its upcall/ commands only when it creates its first datapath, after it
// read its configuration: a call right after it started is refused as "not a valid command", so
// this waits up to 10 s for the command to exist.
func (o *OVS) ExactMatchDatapath(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := o.Appctl("list-commands")
		if err == nil && strings.Contains(out, "upcall/disable-megaflows") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("disabling megaflows: ovs-vswitchd has no upcall/disable-megaflows command after 10 s (%v): %s", err, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if out, err := o.Appctl("upcall/disable-megaflows"); err != nil {
		t.Fatalf("disabling megaflows: %v: %s", err, out)
	}
}

// MustVsctl runs ovs-vsctl and fails the test on error.
func (o *OVS) MustVsctl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := o.Vsctl(args...)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return out
}

// MustOfctl runs ovs-ofctl and fails the test on error.
func (o *OVS) MustOfctl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := o.Ofctl(args...)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return out
}

// AddBridge creates a userspace (netdev) bridge speaking OpenFlow 1.5 with ovs-vsctl.
func (o *OVS) AddBridge(t testing.TB, name string) {
	t.Helper()
	o.MustVsctl(t, "add-br", name, "--", "set", "bridge", name, "datapath_type=netdev", "protocols=OpenFlow15")
}

// AddPort adds a port named name to the bridge with the OpenFlow port number ofport, and the
// interface settings opts ("type=internal", "options:key=flow"...); it fails the test otherwise.
func (o *OVS) AddPort(t testing.TB, bridge, name string, ofport uint32, opts ...string) {
	t.Helper()
	o.MustVsctl(t, append([]string{"add-port", bridge, name, "--", "set", "interface", name, fmt.Sprintf("ofport_request=%d", ofport)}, opts...)...)
}

// DumpFlows returns the flows of a bridge as `ovs-ofctl dump-flows --no-stats`
// prints them, one flow a line, trimmed, sorted, without the reply header.
func (o *OVS) DumpFlows(bridge string, extra ...string) ([]string, error) {
	out, err := o.Ofctl(append([]string{"dump-flows", "--no-stats", bridge}, extra...)...)
	if err != nil {
		return nil, err
	}
	return sortedLines(out), nil
}

// DumpGroups returns the groups of a bridge as `ovs-ofctl dump-groups` prints them.
func (o *OVS) DumpGroups(bridge string) ([]string, error) {
	out, err := o.Ofctl("dump-groups", bridge)
	if err != nil {
		return nil, err
	}
	return sortedLines(out), nil
}

func sortedLines(out string) []string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "OFPST_") || strings.HasPrefix(l, "NXST_") {
			continue
		}
		lines = append(lines, l)
	}
	sort.Strings(lines)
	return lines
}

func (o *OVS) run(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := o.command(name, args...)
	c := hostcmd.CommandContext(ctx, cmd.Path, cmd.Args[1:]...)
	c.Env, c.Dir = cmd.Env, cmd.Dir
	out, err := c.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

func (o *OVS) dumpLogs(t testing.TB) {
	for _, f := range []string{"ovsdb-server.log", "ovs-vswitchd.log"} {
		b, err := os.ReadFile(filepath.Join(o.Dir, f))
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) > 40 {
			lines = lines[len(lines)-40:]
		}
		t.Logf("last lines of %s:\n%s", f, strings.Join(lines, "\n"))
	}
}

func startDaemon(cmd *exec.Cmd) (chan struct{}, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	return done, nil
}

func stopDaemon(cmd *exec.Cmd, done chan struct{}, sig syscall.Signal) error {
	if cmd == nil || cmd.Process == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	default:
	}
	// With `ip netns exec` the daemon is a child of the ip process (which
	// execs it, so the pid is the daemon's); signal the pid itself.
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signalling pid %d: %w", cmd.Process.Pid, err)
	}
	select {
	case <-done:
		return nil
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("pid %d did not exit after %v", cmd.Process.Pid, sig)
	}
}

// killDaemon kills a running daemon with SIGKILL and checks that it died of it.
func killDaemon(name string, cmd *exec.Cmd, done chan struct{}) error {
	pid := runningPid(cmd, done)
	if pid == 0 {
		return fmt.Errorf("%s is not running: nothing to kill", name)
	}
	if err := stopDaemon(cmd, done, syscall.SIGKILL); err != nil {
		return fmt.Errorf("killing %s: %w", name, err)
	}
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		return fmt.Errorf("%s (pid %d) ended with %v, not by SIGKILL", name, pid, cmd.ProcessState)
	}
	return nil
}

func waitFor(timeout time.Duration, done chan struct{}, ready func() bool) error {
	deadline := time.Now().Add(timeout)
	for {
		if ready() {
			return nil
		}
		select {
		case <-done:
			return errors.New("process exited")
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v", timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// socketReady reports whether a daemon accepts connections on the unix socket at path. The file
// alone is not enough: it exists from bind(), before listen(), and a client connecting in between
// is refused (ovs-vsctl init failed so under load).
func socketReady(path string) bool {
	c, err := net.DialTimeout("unix", path, 100*time.Millisecond)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

func lookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"} {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found", name)
}

func schemaPath() (string, error) {
	for _, p := range schemaPaths {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("vswitch.ovsschema not found")
}

// SignalVswitchd sends sig to ovs-vswitchd: SIGSTOP freezes it with its connections open (a request
// sent then gets no reply), SIGCONT resumes it.
func (o *OVS) SignalVswitchd(sig syscall.Signal) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.vsCmd == nil || o.vsCmd.Process == nil {
		return fmt.Errorf("ovs-vswitchd is not running")
	}
	return o.vsCmd.Process.Signal(sig)
}
