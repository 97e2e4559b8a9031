package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/agent"
	"github.com/winnet-io/winnet/internal/cmdline"
	"github.com/winnet-io/winnet/internal/preflight"
)

// preflightErrorExit is the exit status of a preflight that could not run (a bad flag, no
// kubeconfig): 0, 1 and 2 are its verdicts.
const preflightErrorExit = 3

// runPreflightCommand runs `winnet-agent preflight [flags]` when args start with "preflight" and
// returns its exit status: 0 when every check passed (or does not apply on this platform), 1 with
// warnings, 2 with failures, 3 when it could not run.
func runPreflightCommand(args []string, stdout, stderr io.Writer) (handled bool, code int) {
	if len(args) == 0 || args[0] != "preflight" {
		return false, 0
	}
	fs := cmdline.FlagSet("winnet-agent preflight", "Usage: winnet-agent preflight [--output text|json] [flags]\n\n"+
		"Checks whether this node is fit for winnet, before install or on a running node, changing nothing:\n"+
		"the Windows build and features, HNS, Open vSwitch (services, version, extension, driver signing),\n"+
		"containerd and its CNI directories, kube-proxy, the uplink, the clock against the API server's,\n"+
		"and the agent's directories. Each check prints PASS, WARN, FAIL (with the fix in one line) or SKIP\n"+
		"(not checked on this platform). Exit status: 0 all passed, 1 warnings, 2 failures, 3 preflight\n"+
		"could not run. Give it the agent's flags (the chart's values) so that it checks what the agent uses.")
	fs.SetOutput(stderr)
	output := fs.String("output", "text", "text, or json for scripts")
	opts := preflight.Options{}
	fs.StringVar(&opts.NodeName, "node-name", os.Getenv("NODE_NAME"), "name of this node (default $NODE_NAME)")
	fs.StringVar(&opts.HNSNetwork, "hns-network", agent.DefaultHNSNetwork, "name of winnet's HNS network")
	fs.StringVar(&opts.Bridge, "bridge", networkv1alpha1.DefaultBridgeName, "winnet's OVS bridge (the management vNIC's name on a converged node)")
	fs.StringVar(&opts.StateDir, "state-dir", agent.DefaultStateDir, "the agent's state directory")
	fs.StringVar(&opts.CNIConfDir, "cni-conf-dir", agent.DefaultCNIConfDir, "the agent's --cni-conf-dir (the chart's cni.confDir)")
	shim := fs.String("cni-shim-path", "", "the agent's --cni-shim-path (the chart's <cni.binDir>/winnet-cni.exe): its directory is compared with containerd's (default: not compared)")
	fs.StringVar(&opts.AuditLogDir, "audit-log-dir", agent.DefaultAuditLogDir, "the agent's --audit-log-dir (\"\": not checked)")
	fs.StringVar(&opts.LogDir, "log-dir", defaultPreflightLogDir(), "the Windows service's log directory (\"\": not checked)")
	fs.StringVar(&opts.OVSDBAddress, "ovsdb", "", "ovsdb-server socket (Linux) or named pipe (Windows) (default: the platform's)")
	fs.StringVar(&opts.OVSRunDir, "ovs-rundir", "", "OVS's run directory (default: the platform's)")
	fs.StringVar(&opts.NetNSPath, "netns", "", "Linux only: check this network namespace (a simulated node)")
	fs.StringVar(&opts.ContainerdConfig, "containerd-config", "", "containerd's config.toml, whose CNI conf_dir and bin_dir must be the agent's (default "+preflight.DefaultContainerdConfig+"; none with --netns)")
	kubeconfig := cmdline.KubeconfigFlag(fs)
	apiServer := fs.String("apiserver", "", "URL of the API server (https://host:port), overriding the kubeconfig's")
	noAPI := fs.Bool("no-api-server", false, "check without the API server (before the node joins): the Node's checks warn")
	fail := func(err error) (bool, int) {
		fmt.Fprintln(stderr, "winnet-agent preflight:", err)
		return true, preflightErrorExit
	}
	if help, err := cmdline.Parse(fs, args[1:]); help {
		return true, 0
	} else if err != nil {
		return true, preflightErrorExit
	}
	if err := cmdline.NoArgs(fs); err != nil {
		return fail(err)
	}
	if *output != "text" && *output != "json" {
		return fail(fmt.Errorf("--output %q: want text or json", *output))
	}
	if *shim != "" {
		opts.CNIBinDir = filepath.Dir(*shim)
	}
	if !*noAPI {
		if opts.NodeName == "" {
			return fail(errors.New("--node-name (or $NODE_NAME) is required (or --no-api-server)"))
		}
		cfg, err := cmdline.RESTConfig(*kubeconfig, *apiServer)
		if err != nil {
			return fail(fmt.Errorf("loading a kubeconfig (or --no-api-server): %w", err))
		}
		cfg.Timeout = 30 * time.Second
		c, err := apiClient(*kubeconfig, *apiServer)
		if err != nil {
			return fail(err)
		}
		opts.Reader = client.Reader(c)
		opts.ServerTime = preflight.APIServerTime(cfg, nil)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	rep := preflight.Run(ctx, preflight.Checks(), preflight.Gather(ctx, opts))
	write := rep.WriteText
	if *output == "json" {
		write = rep.WriteJSON
	}
	if err := write(stdout); err != nil {
		return fail(err)
	}
	return true, rep.ExitCode()
}
