// Command winnet-agent converges the network of the Windows node it runs on toward the node's
// WindowsNodeNetwork, RemoteSubnetRoutes and PodEndpoints, and serves the CNI shim.
package main

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/winnet-io/winnet/internal/agent"
	"github.com/winnet-io/winnet/internal/cni"
)

func main() {
	// `winnet-agent service ...` manages the Windows service; `service run` (under the SCM) sets the
	// process up and continues below with the agent flags (service_windows.go).
	if handled, err := runServiceCommand(os.Args[1:]); handled || err != nil {
		if err != nil {
			fmt.Fprintln(os.Stderr, "winnet-agent:", err)
			os.Exit(1)
		}
		return
	}
	// `winnet-agent reset ...` gives the node its network back offline (reset.go).
	if handled, err := runResetCommand(os.Args[1:]); handled || err != nil {
		if err != nil {
			fmt.Fprintln(os.Stderr, "winnet-agent reset:", err)
			os.Exit(1)
		}
		return
	}
	opts := agent.Options{}
	fs := flag.NewFlagSet("winnet-agent", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: winnet-agent [flags]\n       winnet-agent reset [--dry-run] [flags]   (give this node its network back, offline)\n\n"+
			"The per-node agent of winnet: it converges this node's network (HNS network, OVS bridge,\n"+
			"uplink, gateway, tunnel, OpenFlow pipeline) toward its WindowsNodeNetwork\n"+
			"(group network.winnet.io) and reports it in the object's status. It serves the winnet-cni\n"+
			"shim: Pod addresses from host-local's allocator, one HNS endpoint and OVS port per Pod, PodEndpoints.\n\nFlags:\n")
		printShownDefaults(fs)
	}
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
	if runtime.GOOS == "linux" {
		fs.DurationVar(&hostOpts.HNSSimLatency, hnsSimLatencyFlag, 0, "Linux only: latency added to every call of the HNS simulator (benchmarks)")
		fs.StringVar(&hostOpts.HNSSimContainerd, hnsSimContainerdFlag, "", "Linux only: containerd socket whose task events start and stop the HNS simulator's sandboxes (nodes with a real kubelet)")
	}
	kubeconfig := fs.String("kubeconfig", "", "path to a kubeconfig (default: $KUBECONFIG, the in-cluster config, then ~/.kube/config)")
	apiServer := fs.String("apiserver", "", "URL of the API server (https://host:port), overriding the kubeconfig's: winnet provides Services on this node, so the agent must not depend on the kubernetes Service's ClusterIP")
	zopts := zap.Options{}
	zopts.BindFlags(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		if err == flag.ErrHelp {
			os.Exit(0)
		}
		os.Exit(2)
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zopts)))
	log := ctrl.Log.WithName("winnet-agent")

	cfg, err := restConfig(*kubeconfig, *apiServer)
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
	ctx, done := agentContext() // also ends on a Windows service Stop
	defer done()
	if err := agent.SetupNodeNetwork(ctx, mgr, opts.NodeName, hostOpts); err != nil {
		log.Error(err, "Cannot set up the node network reconciler")
		os.Exit(1)
	}
	log.Info("Starting winnet-agent", "node", opts.NodeName)
	if err := mgr.Start(ctx); err != nil {
		log.Error(err, "winnet-agent stopped")
		os.Exit(1)
	}
}

// hnsSimLatencyFlag is a hidden flag: the benchmarks' knob of the HNS simulator.
const hnsSimLatencyFlag = "hns-sim-latency"

// hnsSimContainerdFlag is a hidden flag: the test clusters' nodes with a real kubelet and containerd.
const hnsSimContainerdFlag = "hns-sim-containerd"

// printShownDefaults prints the flags' defaults but the hidden ones'.
func printShownDefaults(fs *flag.FlagSet) {
	shown := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
	shown.SetOutput(fs.Output())
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name != hnsSimLatencyFlag && f.Name != hnsSimContainerdFlag {
			shown.Var(f.Value, f.Name, f.Usage)
			shown.Lookup(f.Name).DefValue = f.DefValue
		}
	})
	shown.PrintDefaults()
}

// restConfig loads the kubeconfig at path, or controller-runtime's default chain when path is empty;
// a non-empty apiServer replaces the server it names (credentials and CA stay).
func restConfig(path, apiServer string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if path == "" {
		cfg, err = ctrl.GetConfig()
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", path)
	}
	if err != nil {
		return nil, err
	}
	if apiServer != "" {
		u, err := url.Parse(apiServer)
		if err != nil || u.Scheme != "https" || u.Host == "" {
			return nil, fmt.Errorf("--apiserver %q is not an https://host:port URL", apiServer)
		}
		cfg.Host = apiServer
	}
	return cfg, nil
}
