// Command winnet-agent converges the network of the Windows node it runs on toward the node's
// WindowsNodeNetwork, RemoteSubnetRoutes and PodEndpoints, and serves the CNI shim.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/winnet-io/winnet/internal/agent"
	"github.com/winnet-io/winnet/internal/auditlog"
	"github.com/winnet-io/winnet/internal/cmdline"
	"github.com/winnet-io/winnet/internal/cni"
	"github.com/winnet-io/winnet/internal/egress"
	"github.com/winnet-io/winnet/internal/memlimit"
)

func main() {
	// `winnet-agent service ...` manages the Windows service; `service run` (under the SCM) sets the
	// process up and continues below with the agent flags (service_windows.go).
	cmdline.Subcommand("winnet-agent", os.Args[1:], runServiceCommand)
	// `winnet-agent reset ...` gives the node its network back offline (reset.go).
	cmdline.Subcommand("winnet-agent reset", os.Args[1:], runResetCommand)
	// `winnet-agent takeover --from flannel,kube-proxy` removes what those stacks left on this node
	// (takeover.go).
	cmdline.Subcommand("winnet-agent takeover", os.Args[1:], runTakeoverCommand)
	// `winnet-agent support-bundle -o FILE` collects this node's network for a maintainer (bundle.go).
	cmdline.Subcommand("winnet-agent support-bundle", os.Args[1:], runBundleCommand)
	// `winnet-agent preflight` checks whether this node is fit for winnet; its exit status is its
	// verdict (preflight.go).
	if handled, code := runPreflightCommand(os.Args[1:], os.Stdout, os.Stderr); handled {
		os.Exit(code)
	}
	opts := agent.Options{}
	fs := cmdline.FlagSet("winnet-agent", "Usage: winnet-agent [flags]\n"+subcommandsUsage+"\n"+
		"The per-node agent of winnet: it converges this node's network (HNS network, OVS bridge,\n"+
		"uplink, gateway, tunnel, OpenFlow pipeline) toward its WindowsNodeNetwork\n"+
		"(group network.winnet.io) and reports it in the object's status. It serves the winnet-cni\n"+
		"shim: Pod addresses from host-local's allocator, one HNS endpoint and OVS port per Pod, PodEndpoints.", hnsSimLatencyFlag, hnsSimContainerdFlag)
	fs.StringVar(&opts.NodeName, "node-name", os.Getenv("NODE_NAME"), "name of the Node this agent runs on (default $NODE_NAME)")
	fs.StringVar(&opts.MetricsBindAddress, "metrics-bind-address", "0", `address of the metrics endpoint, such as ":8443" ("0" disables it); HTTPS, each scrape authenticated and authorized by the API server (get on /metrics)`)
	fs.StringVar(&opts.HealthProbeBindAddress, "health-probe-bind-address", "127.0.0.1:8081", `address of /healthz and /readyz, plain HTTP ("0" disables it)`)
	fs.StringVar(&opts.PprofBindAddress, "pprof-bind-address", "0", `address of the Go profiler's /debug/pprof endpoints, loopback only, such as "127.0.0.1:6060" ("0" disables them)`)
	hostOpts := agent.HostOptions{}
	fs.StringVar(&hostOpts.OVSDBAddress, "ovsdb", "", "ovsdb-server socket (Linux) or named pipe (Windows) (default: the platform's)")
	fs.StringVar(&hostOpts.OVSRunDir, "ovs-rundir", "", "OVS's run directory: the bridges' OpenFlow management sockets <dir>/<bridge>.mgmt, on Windows the named pipes OVS derives from those paths (default: the platform's)")
	fs.StringVar(&hostOpts.NetNSPath, "netns", "", "Linux only: manage this network namespace instead of the agent's own (simulated nodes)")
	fs.StringVar(&hostOpts.CNISocket, "cni-socket", cni.DefaultAddress, "unix socket (Linux) or named pipe (Windows) on which the agent serves the winnet-cni shim")
	fs.StringVar(&hostOpts.CNIConfDir, "cni-conf-dir", agent.DefaultCNIConfDir, "directory the agent writes "+cni.ConfListName+" into once the node network is Ready")
	// The agent allocates Pod addresses with host-local's code in-process (internal/cni/ipam); the
	// flag stays accepted so that existing configurations (the Helm chart's) keep starting.
	_ = fs.String("cni-bin-dir", strings.Join(agent.DefaultCNIBinDirs, string(os.PathListSeparator)),
		"unused: the agent allocates Pod addresses with host-local's allocator and on-disk format in-process (accepted for existing configurations)")
	fs.StringVar(&hostOpts.CNIShimPath, "cni-shim-path", "", "the "+cni.PluginType+" binary winnet installed (the Helm chart sets <cni.binDir>/"+cni.PluginType+".exe): when the node network is torn down it goes with the node's last Pod sandbox (default: leave the shim alone)")
	fs.StringVar(&hostOpts.StateDir, "state-dir", agent.DefaultStateDir, "directory of the agent's state: IPAM allocations (ipam/), Pod attachments (pods/)")
	fs.StringVar(&hostOpts.AuditLog.Dir, "audit-log-dir", agent.DefaultAuditLogDir, "directory of the audit log of policy decisions ("+auditlog.FileName+"), created private to the node's administrators; a link or a file of another owner there is refused. \"\" turns audit logging off (annotations are ignored)")
	auditMaxSizeMB := fs.Int("audit-log-max-size", auditlog.DefaultMaxSize>>20, "size in MB beyond which the audit log is rotated")
	fs.IntVar(&hostOpts.AuditLog.MaxFiles, "audit-log-max-files", auditlog.DefaultMaxFiles, "rotated audit log files kept ("+auditlog.FileName+".1 is the newest)")
	fs.Float64Var(&hostOpts.AuditLog.Rate, "audit-log-rate", auditlog.DefaultRate, "audit log lines per second each namespace (its NetworkPolicies and default drops) or ClusterNetworkPolicy writes at most (one per new connection and rule); beyond, its decisions are counted in winnet_audit_log_dropped_total{reason=\"rate\"} and in its summary line")
	fs.IntVar(&hostOpts.AuditLog.Burst, "audit-log-burst", auditlog.DefaultBurst, "audit log lines each namespace or ClusterNetworkPolicy may write at once beyond --audit-log-rate")
	fs.Float64Var(&hostOpts.AuditLog.NodeRate, "audit-log-node-rate", 0, fmt.Sprintf("audit log lines per second the node writes at most, all namespaces and ClusterNetworkPolicies together (0: %d times --audit-log-rate); beyond, decisions are counted in winnet_audit_log_dropped_total{reason=\"ceiling\"}", auditlog.DefaultNodeFactor))
	fs.IntVar(&hostOpts.AuditLog.NodeBurst, "audit-log-node-burst", 0, fmt.Sprintf("audit log lines the node may write at once beyond --audit-log-node-rate (0: %d times --audit-log-burst)", auditlog.DefaultNodeFactor))
	fs.DurationVar(&hostOpts.AuditLog.Window, "audit-log-dedup-window", auditlog.DefaultWindow, "the packets of one 5-tuple and rule within this window are one audit log line with their count")
	fs.DurationVar(&hostOpts.AuditLog.SuspendAfter, "audit-log-suspend-after", auditlog.DefaultSuspendAfter, "when a namespace's or ClusterNetworkPolicy's decisions are dropped beyond --audit-log-rate with no second free of drops for this long, its audited flows (only its) stop sending to the agent for --audit-log-cooldown (an Event on the node's WindowsNodeNetwork says so); so do those of the namespaces and ClusterNetworkPolicies that sent at least their share when the node's ceiling (--audit-log-node-rate) dropped decisions for this long; a negative value never suspends")
	fs.DurationVar(&hostOpts.AuditLog.Cooldown, "audit-log-cooldown", auditlog.DefaultCooldown, "how long a namespace's or ClusterNetworkPolicy's audit log stays suspended (--audit-log-suspend-after)")
	if runtime.GOOS == "linux" {
		fs.DurationVar(&hostOpts.HNSSimLatency, hnsSimLatencyFlag, 0, "Linux only: latency added to every call of the HNS simulator (benchmarks)")
		fs.StringVar(&hostOpts.HNSSimContainerd, hnsSimContainerdFlag, "", "Linux only: containerd socket whose task events start and stop the HNS simulator's sandboxes (nodes with a real kubelet)")
	}
	kubeconfig := cmdline.KubeconfigFlag(fs)
	fs.StringVar(&hostOpts.LeaseNamespace, "lease-namespace", "", "winnet's namespace, where the agent renews its node's Egress Lease "+egress.LeasePrefix+"<node> (default: the Pod's namespace, else "+agent.DefaultNamespace+")")
	fs.DurationVar(&hostOpts.EgressLeaseDuration, "egress-lease-duration", agent.DefaultEgressLeaseDuration, "the fencing bound of egress IPs, whole seconds: the node gives up its egress IPs when the API server has not confirmed its Egress Lease for this long, and winnet-controller moves an Egress off a node whose Lease it saw unrenewed for this long, to another node after this long again")
	fs.DurationVar(&hostOpts.EgressLeaseRenewInterval, "egress-lease-renew-interval", agent.DefaultEgressLeaseRenewInterval, "how often the agent renews its node's Egress Lease; at most half of --egress-lease-duration")
	apiServer := fs.String("apiserver", "", "URL of the API server (https://host:port), overriding the kubeconfig's: winnet provides Services on this node, so the agent must not depend on the kubernetes Service's ClusterIP")
	log := cmdline.ParseMain(fs, os.Args[1:])
	// The agent holds much and makes little garbage: a lower collection target than the runtime's
	// (memlimit.AgentGCPercent) unless the operator set GOGC.
	log.Info("Garbage collection target", "gcPercent", memlimit.SetGCPercent(os.Getenv, memlimit.AgentGCPercent), "fromGOGC", os.Getenv("GOGC") != "")
	if fs.NArg() > 0 {
		// The flags end at the first word that is not one: an unknown subcommand, or a stray
		// argument, which would otherwise be ignored with every flag after it.
		fmt.Fprintf(os.Stderr, "winnet-agent: unknown command or stray argument %q (the agent takes only flags); the commands are:\n%s\n", fs.Arg(0), subcommandsUsage)
		os.Exit(2)
	}
	hostOpts.AuditLog.MaxSize = int64(*auditMaxSizeMB) << 20
	if *auditMaxSizeMB < 1 || hostOpts.AuditLog.MaxFiles < 1 || hostOpts.AuditLog.Rate <= 0 || hostOpts.AuditLog.Burst < 1 || hostOpts.AuditLog.Window <= 0 ||
		hostOpts.AuditLog.NodeRate < 0 || hostOpts.AuditLog.NodeBurst < 0 || hostOpts.AuditLog.SuspendAfter == 0 || hostOpts.AuditLog.Cooldown <= 0 {
		log.Error(nil, "--audit-log-max-size, --audit-log-max-files, --audit-log-rate, --audit-log-burst, --audit-log-dedup-window and --audit-log-cooldown must be positive, --audit-log-node-rate and --audit-log-node-burst not negative, --audit-log-suspend-after not zero")
		os.Exit(2)
	}

	if d, r := hostOpts.EgressLeaseDuration, hostOpts.EgressLeaseRenewInterval; d < time.Second || d%time.Second != 0 || r <= 0 || 2*r > d {
		log.Error(nil, "--egress-lease-duration must be whole seconds, at least 1s, and --egress-lease-renew-interval positive and at most half of it",
			"duration", d, "renewInterval", r)
		os.Exit(2)
	}
	cfg, err := cmdline.RESTConfig(*kubeconfig, *apiServer)
	if err != nil {
		log.Error(err, "Cannot load a kubeconfig: use --kubeconfig, $KUBECONFIG or the in-cluster config")
		os.Exit(1)
	}
	// The metrics certificate, if an administrator provides one, lives in the protected state
	// directory (internal/securefs), never under %TEMP%.
	opts.MetricsCertDir = filepath.Join(hostOpts.StateDir, "metrics-certs")
	mgr, err := agent.NewManager(cfg, opts)
	if err != nil {
		log.Error(err, "Cannot create the agent")
		os.Exit(1)
	}
	stopping, done := agentContext() // also ends on a Windows service Stop
	defer done()
	// The manager's context ends only once the node's switch is frozen (SetupNodeNetwork).
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	hostOpts.ReservedPorts = agent.ReservedBindPorts(opts.HealthProbeBindAddress, opts.MetricsBindAddress)
	freeze, err := agent.SetupNodeNetwork(ctx, mgr, opts.NodeName, hostOpts)
	if err != nil {
		log.Error(err, "Cannot set up the node network reconciler")
		os.Exit(1)
	}
	context.AfterFunc(stopping, func() {
		freeze()
		log.Info("Stopping: the switch keeps its flows and groups for the next agent")
		stop()
	})
	log.Info("Starting winnet-agent", "node", opts.NodeName)
	if err := mgr.Start(ctx); err != nil {
		log.Error(err, "winnet-agent stopped")
		os.Exit(1)
	}
}

// subcommandsUsage lists winnet-agent's subcommands, each of which answers --help.
const subcommandsUsage = "       winnet-agent preflight [--output json] [flags]   (check whether this node is fit for winnet; exit 0, 1 warnings, 2 failures)\n" +
	"       winnet-agent reset [--dry-run] [flags]   (give this node its network back, offline)\n" +
	"       winnet-agent takeover --from flannel,kube-proxy [--dry-run] [flags]   (remove what flannel and kube-proxy left on this node)\n" +
	"       winnet-agent support-bundle -o FILE [flags]   (collect this node's network for a maintainer)\n" +
	"       winnet-agent service install|uninstall|start|stop|run [flags]   (Windows: run the agent as a Windows service)"

// hnsSimLatencyFlag is a hidden flag: the benchmarks' knob of the HNS simulator.
const hnsSimLatencyFlag = "hns-sim-latency"

// hnsSimContainerdFlag is a hidden flag: the test clusters' nodes with a real kubelet and containerd.
const hnsSimContainerdFlag = "hns-sim-containerd"
