package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/winnet-io/winnet/internal/agent"
	"github.com/winnet-io/winnet/internal/cmdline"
	"github.com/winnet-io/winnet/internal/preflight"
	"github.com/winnet-io/winnet/internal/scheme"
	"github.com/winnet-io/winnet/internal/securefs"
)

// logFiles is a repeatable flag: the agent's log files.
type logFiles []string

func (l *logFiles) String() string     { return strings.Join(*l, ",") }
func (l *logFiles) Set(v string) error { *l = append(*l, v); return nil }

// runBundleCommand runs `winnet-agent support-bundle -o FILE [flags]` when args start with
// "support-bundle": it writes what a maintainer asks for first about this node (agent.SupportBundle)
// into a new owner-only .tar.gz.
func runBundleCommand(args []string) (handled bool, err error) {
	if len(args) == 0 || args[0] != "support-bundle" {
		return false, nil
	}
	fs := cmdline.FlagSet("winnet-agent support-bundle", "Usage: winnet-agent support-bundle -o FILE [flags]\n\n"+
		"Writes a gzipped tar of this node's network for a maintainer: the bridge's OpenFlow flows and groups\n"+
		"(read over a connection of its own, changing nothing), OVSDB's bridges, ports and interfaces, HNS's\n"+
		"network and endpoints (the simulator's state on Linux), the host's links, addresses and routes, the\n"+
		"state directory's listing (no contents), the preflight's report (winnet-agent preflight), the tail\n"+
		"of the agent's logs (--log) and, with an API server, the node's WindowsNodeNetwork, PodEndpoints and\n"+
		"the RemoteSubnetRoutes with their status. Tokens,\n"+
		"keys, certificates and credentials are redacted. FILE is created owner-only (an explicit DACL on\n"+
		"Windows); an existing FILE or a link there is refused. Run it beside the agent, with its flags.")
	out := fs.String("o", "", "the bundle to create (a .tar.gz); must not exist")
	opts := agent.BundleOptions{}
	hostOpts := agent.HostOptions{}
	fs.StringVar(&opts.NodeName, "node-name", os.Getenv("NODE_NAME"), "name of this node (default $NODE_NAME)")
	fs.StringVar(&opts.Bridge, "bridge", "", "the OVS bridge whose flows and groups to collect (default br-int)")
	fs.StringVar(&opts.HNSNetwork, "hns-network", agent.DefaultHNSNetwork, "name of winnet's HNS network")
	var logs logFiles
	fs.Var(&logs, "log", `an agent log file to include the tail of (repeatable; default on Windows the service's C:\ProgramData\winnet\logs\winnet-agent.log and its .1); the agent logs to stderr, which the Windows service or the Pod's runtime writes to a file`)
	fs.Int64Var(&opts.LogBytes, "log-bytes", 8<<20, "how many bytes of each log's end to include")
	fs.StringVar(&hostOpts.OVSDBAddress, "ovsdb", "", "ovsdb-server socket (Linux) or named pipe (Windows) (default: the platform's)")
	fs.StringVar(&hostOpts.OVSRunDir, "ovs-rundir", "", "OVS's run directory (default: the platform's)")
	fs.StringVar(&hostOpts.NetNSPath, "netns", "", "Linux only: collect from this network namespace instead of the command's own (simulated nodes)")
	fs.StringVar(&hostOpts.StateDir, "state-dir", agent.DefaultStateDir, "the agent's state directory")
	fs.StringVar(&hostOpts.CNIConfDir, "cni-conf-dir", agent.DefaultCNIConfDir, "the agent's --cni-conf-dir, for the preflight")
	fs.StringVar(&hostOpts.CNIShimPath, "cni-shim-path", "", "the agent's --cni-shim-path, for the preflight (default: its directory not compared)")
	fs.StringVar(&hostOpts.AuditLog.Dir, "audit-log-dir", agent.DefaultAuditLogDir, "the agent's --audit-log-dir, for the preflight")
	kubeconfig := cmdline.KubeconfigFlag(fs)
	apiServer := fs.String("apiserver", "", "URL of the API server (https://host:port), overriding the kubeconfig's")
	noAPI := fs.Bool("no-api-server", false, "leave the node's winnet objects out (no API server is reachable)")
	if help, err := cmdline.Parse(fs, args[1:]); help || err != nil {
		return true, err
	}
	if err := cmdline.NoArgs(fs); err != nil {
		return true, err
	}
	if *out == "" {
		return true, errors.New("-o FILE is required")
	}
	opts.Logs = logs
	if len(opts.Logs) == 0 {
		opts.Logs = defaultBundleLogs()
	}
	if !*noAPI {
		if opts.NodeName == "" {
			return true, errors.New("--node-name (or $NODE_NAME) is required to collect the node's objects (or --no-api-server)")
		}
		c, err := apiClient(*kubeconfig, *apiServer)
		if err != nil {
			return true, err
		}
		opts.Client = c
		cfg, err := cmdline.RESTConfig(*kubeconfig, *apiServer)
		if err != nil {
			return true, err
		}
		opts.ServerTime = preflight.APIServerTime(cfg, nil)
	}
	f, err := securefs.CreateNew(*out, securefs.Private)
	if err != nil {
		return true, err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	names, err := agent.SupportBundle(ctx, hostOpts, opts, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(*out)
		return true, err
	}
	fmt.Fprintf(os.Stdout, "wrote %s: %s\n", *out, strings.Join(names, ", "))
	return true, nil
}

func apiClient(kubeconfig, apiServer string) (client.Client, error) {
	cfg, err := cmdline.RESTConfig(kubeconfig, apiServer)
	if err != nil {
		return nil, fmt.Errorf("loading a kubeconfig (or --no-api-server): %w", err)
	}
	cfg.Timeout = 30 * time.Second
	s, err := scheme.New()
	if err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: s})
}

var _ flag.Value = (*logFiles)(nil)
