package main

// Windows service mode: `winnet-agent service install|uninstall|start|stop` manages a Windows
// service that runs the agent's normal main loop under the Service Control Manager (SCM). The
// service's command line is `winnet-agent.exe service run <service options> -- <agent flags>`; the
// `run` subcommand prepares the process (home directory, log file), connects to the SCM and hands the
// agent flags back to main, which then runs as usual with agentContext's stop signal.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/windows"
	"golang.org/x/sys/windows/svc"
	"golang.org/x/sys/windows/svc/mgr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/winnet-io/winnet/internal/securefs"
)

const (
	defaultServiceName = "winnet-agent"
	// stopTimeout bounds a graceful stop: the manager's own shutdown timeout (30s) plus margin.
	stopTimeout = 45 * time.Second
	// stateTimeout bounds how long start, stop and uninstall wait for the service to change state.
	stateTimeout = 60 * time.Second
	// logRotateSize is the size above which the log file is moved to <log>.1 when the service starts.
	logRotateSize = 100 << 20
)

// serviceOptions are the options of the service subcommands.
type serviceOptions struct {
	name        string
	displayName string
	home        string
	logFile     string
	deps        string
}

func (o *serviceOptions) bind(fs *flag.FlagSet, sub string) {
	fs.StringVar(&o.name, "name", defaultServiceName, "name of the Windows service")
	if sub == "install" || sub == "run" {
		fs.StringVar(&o.home, "home", `C:\ProgramData\winnet`, "home directory of the service: its working directory and the default place of its log")
		fs.StringVar(&o.logFile, "log-file", "", `file the service logs to (default <home>\logs\winnet-agent.log); rotated to <file>.1 at start above 100 MiB`)
	}
	if sub == "install" {
		fs.StringVar(&o.displayName, "display-name", "winnet agent", "display name of the Windows service")
		fs.StringVar(&o.deps, "dependencies", "", "comma-separated services that must run first, such as ovsdb-server,ovs-vswitchd")
	}
}

func (o *serviceOptions) logPath() string {
	if o.logFile != "" {
		return o.logFile
	}
	return filepath.Join(o.home, "logs", "winnet-agent.log")
}

func serviceUsage(w io.Writer) {
	fmt.Fprint(w, `Usage: winnet-agent service <command> [options] [-- agent flags]

Runs winnet-agent as a Windows service instead of a HostProcess Pod.

Commands:
  install    create the service (automatic start, restarted on failure); agent flags after "--",
             such as: service install -- --kubeconfig C:\ProgramData\winnet\kubeconfig
             (--node-name defaults to this host's lower-case name, as kubelet's does)
  uninstall  stop the service if it runs, and delete it
  start      start the service and wait until it runs
  stop       stop the service gracefully and wait until it has stopped
  run        what the Service Control Manager runs; not for interactive use

Options (each command takes those that apply; --help lists them):
  --name, --home, --log-file, --display-name, --dependencies
`)
}

// runServiceCommand handles `winnet-agent service ...`. It reports handled=false when args are not a
// service command, and also for `service run` once the process is set up under the SCM: then os.Args
// holds the agent's own flags and main continues with its normal loop.
func runServiceCommand(args []string) (handled bool, err error) {
	if len(args) == 0 || args[0] != "service" {
		return false, nil
	}
	if len(args) < 2 || args[1] == "-h" || args[1] == "--help" || args[1] == "help" {
		serviceUsage(os.Stdout)
		return true, nil
	}
	sub := args[1]
	opts := serviceOptions{}
	fs := flag.NewFlagSet("winnet-agent service "+sub, flag.ContinueOnError)
	opts.bind(fs, sub)
	if err := fs.Parse(args[2:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return true, nil
		}
		return true, err
	}
	agentArgs := fs.Args()
	if sub != "install" && sub != "run" && len(agentArgs) > 0 {
		return true, fmt.Errorf("service %s takes no arguments, got %q", sub, agentArgs)
	}
	switch sub {
	case "install":
		return true, installService(opts, agentArgs)
	case "uninstall":
		return true, uninstallService(opts.name)
	case "start":
		return true, startService(opts.name)
	case "stop":
		return true, stopService(opts.name)
	case "run":
		if err := prepareServiceRun(opts, agentArgs); err != nil {
			return true, err
		}
		return false, nil
	default:
		serviceUsage(os.Stderr)
		return true, fmt.Errorf("unknown service command %q", sub)
	}
}

func installService(opts serviceOptions, agentArgs []string) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this executable: %w", err)
	}
	if exe, err = filepath.Abs(exe); err != nil {
		return fmt.Errorf("finding this executable: %w", err)
	}
	if !hasFlag(agentArgs, "node-name") {
		host, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("no --node-name given and the host name is unknown: %w", err)
		}
		agentArgs = append(agentArgs, "--node-name="+strings.ToLower(host))
	}
	// The home is the service's working directory and the default place of its log: SYSTEM and
	// Administrators only (internal/securefs); one owned by anyone else is refused.
	if _, err := securefs.EnsureDir(opts.home, securefs.Private); err != nil {
		return fmt.Errorf("preparing the home directory %s: %w", opts.home, err)
	}
	m, err := mgr.Connect()
	if err != nil {
		return fmt.Errorf("connecting to the Service Control Manager (run as Administrator): %w", err)
	}
	defer func() { _ = m.Disconnect() }()
	if s, err := m.OpenService(opts.name); err == nil {
		_ = s.Close()
		return fmt.Errorf("service %s already exists: run 'winnet-agent service uninstall --name %s' first", opts.name, opts.name)
	}
	runArgs := append([]string{"service", "run", "--name", opts.name, "--home", opts.home, "--log-file", opts.logPath(), "--"}, agentArgs...)
	cfg := mgr.Config{
		DisplayName:  opts.displayName,
		Description:  "winnet: converges this Windows node's network (HNS, Open vSwitch, routes) toward its WindowsNodeNetwork and serves the winnet CNI plugin.",
		StartType:    mgr.StartAutomatic,
		ErrorControl: mgr.ErrorNormal,
	}
	for _, d := range strings.Split(opts.deps, ",") {
		if d = strings.TrimSpace(d); d != "" {
			cfg.Dependencies = append(cfg.Dependencies, d)
		}
	}
	s, err := m.CreateService(opts.name, exe, cfg, runArgs...)
	if err != nil {
		return fmt.Errorf("creating service %s: %w", opts.name, err)
	}
	defer func() { _ = s.Close() }()
	// Restart after a crash or an exit with an error, backing off; forget failures after a day.
	restart := []mgr.RecoveryAction{
		{Type: mgr.ServiceRestart, Delay: 5 * time.Second},
		{Type: mgr.ServiceRestart, Delay: 15 * time.Second},
		{Type: mgr.ServiceRestart, Delay: 60 * time.Second},
	}
	if err := s.SetRecoveryActions(restart, uint32((24 * time.Hour).Seconds())); err != nil {
		return errors.Join(fmt.Errorf("setting the recovery actions of service %s: %w", opts.name, err), s.Delete())
	}
	if err := s.SetRecoveryActionsOnNonCrashFailures(true); err != nil {
		return errors.Join(fmt.Errorf("setting the recovery actions of service %s: %w", opts.name, err), s.Delete())
	}
	fmt.Printf("Installed service %s: %s %s\nLogs: %s\nStart it with: winnet-agent service start --name %s\n",
		opts.name, exe, strings.Join(runArgs, " "), opts.logPath(), opts.name)
	return nil
}

func hasFlag(args []string, name string) bool {
	for _, a := range args {
		if a == "-"+name || a == "--"+name || strings.HasPrefix(a, "-"+name+"=") || strings.HasPrefix(a, "--"+name+"=") {
			return true
		}
	}
	return false
}

// openService connects to the SCM and opens the named service; close releases both.
func openService(name string) (s *mgr.Service, closeFn func(), err error) {
	m, err := mgr.Connect()
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to the Service Control Manager (run as Administrator): %w", err)
	}
	s, err = m.OpenService(name)
	if err != nil {
		_ = m.Disconnect()
		return nil, nil, fmt.Errorf("opening service %s: %w", name, err)
	}
	return s, func() { _ = s.Close(); _ = m.Disconnect() }, nil
}

// waitForState polls the service until it reaches want or timeout passes.
func waitForState(s *mgr.Service, want svc.State, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		st, err := s.Query()
		if err != nil {
			return fmt.Errorf("querying service %s: %w", s.Name, err)
		}
		if st.State == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("service %s is in state %d, not %d, after %s", s.Name, st.State, want, timeout)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func startService(name string) error {
	s, closeFn, err := openService(name)
	if err != nil {
		return err
	}
	defer closeFn()
	if err := s.Start(); err != nil {
		return fmt.Errorf("starting service %s: %w", name, err)
	}
	if err := waitForState(s, svc.Running, stateTimeout); err != nil {
		return err
	}
	fmt.Printf("Service %s is running\n", name)
	return nil
}

// stopAndWait asks a running service to stop and waits until it has; a stopped service is left alone.
func stopAndWait(s *mgr.Service) error {
	st, err := s.Query()
	if err != nil {
		return fmt.Errorf("querying service %s: %w", s.Name, err)
	}
	if st.State == svc.Stopped {
		return nil
	}
	if st.State != svc.StopPending {
		if _, err := s.Control(svc.Stop); err != nil {
			return fmt.Errorf("stopping service %s: %w", s.Name, err)
		}
	}
	return waitForState(s, svc.Stopped, stateTimeout)
}

func stopService(name string) error {
	s, closeFn, err := openService(name)
	if err != nil {
		return err
	}
	defer closeFn()
	if err := stopAndWait(s); err != nil {
		return err
	}
	fmt.Printf("Service %s is stopped\n", name)
	return nil
}

func uninstallService(name string) error {
	s, closeFn, err := openService(name)
	if err != nil {
		return err
	}
	defer closeFn()
	if err := stopAndWait(s); err != nil {
		return err
	}
	if err := s.Delete(); err != nil {
		return fmt.Errorf("deleting service %s: %w", name, err)
	}
	fmt.Printf("Service %s is uninstalled\n", name)
	return nil
}

// scmService connects the agent's main loop to the SCM: a Stop or Shutdown request closes stop, and
// the SCM learns that the service has stopped only once the main loop has returned.
type scmService struct {
	name     string
	stop     chan struct{} // closed on Stop or Shutdown
	mainDone chan struct{} // closed when the agent's main loop has returned
	runDone  chan error    // receives svc.Run's result
}

// scm is set by `service run`; nil when the agent runs in a console or a Pod.
var scm *scmService

func prepareServiceRun(opts serviceOptions, agentArgs []string) error {
	inService, err := svc.IsWindowsService()
	if err != nil {
		return fmt.Errorf("detecting the Service Control Manager: %w", err)
	}
	if !inService {
		return errors.New("'service run' is what the Service Control Manager starts: use 'winnet-agent service start' instead")
	}
	if _, err := securefs.EnsureDir(opts.home, securefs.Private); err != nil {
		return fmt.Errorf("preparing the home directory %s: %w", opts.home, err)
	}
	if err := os.Chdir(opts.home); err != nil {
		return fmt.Errorf("changing to the home directory %s: %w", opts.home, err)
	}
	if err := redirectOutput(opts.logPath()); err != nil {
		return err
	}
	scm = &scmService{name: opts.name, stop: make(chan struct{}), mainDone: make(chan struct{}), runDone: make(chan error, 1)}
	go func() { scm.runDone <- svc.Run(opts.name, scm) }()
	// main parses os.Args[1:]: from here on they are the agent's flags.
	os.Args = append([]string{os.Args[0]}, agentArgs...)
	return nil
}

// redirectOutput sends stdout and stderr (where the agent's logger writes) to the log file, moving a
// log larger than logRotateSize to <file>.1 first.
func redirectOutput(path string) error {
	if _, err := securefs.EnsureDir(filepath.Dir(path), securefs.Private); err != nil {
		return fmt.Errorf("preparing the log directory of %s: %w", path, err)
	}
	if fi, err := os.Stat(path); err == nil && fi.Size() > logRotateSize {
		_ = os.Rename(path, path+".1")
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("opening the log file %s: %w", path, err)
	}
	h := windows.Handle(f.Fd())
	if err := windows.SetStdHandle(windows.STD_OUTPUT_HANDLE, h); err != nil {
		return fmt.Errorf("redirecting stdout to %s: %w", path, err)
	}
	if err := windows.SetStdHandle(windows.STD_ERROR_HANDLE, h); err != nil {
		return fmt.Errorf("redirecting stderr to %s: %w", path, err)
	}
	os.Stdout, os.Stderr = f, f
	return nil
}

// Execute implements svc.Handler: it reports Running at once, turns Stop and Shutdown into a closed
// stop channel, and returns (the SCM then records Stopped) when the main loop has returned or the
// graceful stop has timed out.
func (s *scmService) Execute(_ []string, req <-chan svc.ChangeRequest, status chan<- svc.Status) (bool, uint32) {
	status <- svc.Status{State: svc.StartPending}
	status <- svc.Status{State: svc.Running, Accepts: svc.AcceptStop | svc.AcceptShutdown}
	for {
		select {
		case <-s.mainDone:
			// The main loop returned without being asked to: report it as a service-specific
			// failure so that the recovery actions restart the agent.
			return true, 1
		case c := <-req:
			switch c.Cmd {
			case svc.Interrogate:
				status <- c.CurrentStatus
			case svc.Stop, svc.Shutdown:
				status <- svc.Status{State: svc.StopPending, WaitHint: uint32(stopTimeout / time.Millisecond)}
				close(s.stop)
				select {
				case <-s.mainDone:
				case <-time.After(stopTimeout):
					fmt.Fprintf(os.Stderr, "winnet-agent: the agent did not stop within %s; stopping anyway\n", stopTimeout)
				}
				return false, 0
			}
		}
	}
}

// agentContext returns the context of the agent's main loop and the function to call when the loop
// has returned. In a console or a Pod the context ends on Ctrl+C or termination; under the SCM it
// also ends on Stop or Shutdown, and done waits until the SCM has been told the service stopped.
func agentContext() (ctx context.Context, done func()) {
	ctx = ctrl.SetupSignalHandler()
	if scm == nil {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-scm.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, func() {
		cancel()
		close(scm.mainDone)
		if err := <-scm.runDone; err != nil {
			fmt.Fprintf(os.Stderr, "winnet-agent: service %s: %v\n", scm.name, err)
		}
	}
}

// defaultBundleLogs are the logs the support bundle takes when --log is not given: the service's
// default log file and its rotated predecessor, when they exist.
func defaultBundleLogs() []string {
	o := serviceOptions{home: `C:\ProgramData\winnet`}
	var out []string
	for _, p := range []string{o.logPath(), o.logPath() + ".1"} {
		if _, err := os.Lstat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// defaultPreflightLogDir is the directory of the service's default log, which preflight checks.
func defaultPreflightLogDir() string {
	o := serviceOptions{home: `C:\ProgramData\winnet`}
	return filepath.Dir(o.logPath())
}
