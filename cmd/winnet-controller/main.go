// Command winnet-controller derives each Windows node's WindowsNodeNetwork and every node's
// RemoteSubnetRoute from the cluster's Nodes, and reports overlapping routes. It is leader-elected.
package main

import (
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/winnet-io/winnet/controllers/packettrace"
	"github.com/winnet-io/winnet/internal/cmdline"
	"github.com/winnet-io/winnet/internal/controller"
)

func main() {
	cmdline.Subcommand("winnet-controller uninstall", os.Args[1:], runUninstallCommand)
	opts := controller.Options{}
	fs := cmdline.FlagSet("winnet-controller", "Usage: winnet-controller [flags]\n\n"+
		"The cluster-wide controller of winnet (group network.winnet.io), leader-elected among its\n"+
		"replicas. From every Node it derives a RemoteSubnetRoute (and, for Windows nodes, a default\n"+
		"WindowsNodeNetwork), and it reports overlapping routes as conflicts. While the FlannelInterop\n"+
		"named default exists, it joins winnet's nodes to a flannel cluster (`kubectl explain flannelinterop`).\n\n"+
		"`winnet-controller uninstall --help` describes the uninstall (the Helm chart's pre-delete hook).")
	fs.BoolVar(&opts.LeaderElection, "leader-elect", true, "elect a leader among the replicas; only the leader reconciles")
	fs.StringVar(&opts.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader election Lease (default: the Pod's namespace)")
	fs.DurationVar(&opts.LeaseDuration, "leader-election-lease-duration", 0, "how long a lost leader keeps the Lease (default: controller-runtime's 15s)")
	fs.StringVar(&opts.AgentLeaseNamespace, "agent-lease-namespace", "", "namespace of the agents' Egress Leases, winnet's (default: the Pod's namespace, else winnet-system)")
	fs.StringVar(&opts.MetricsBindAddress, "metrics-bind-address", "0", `address of the metrics endpoint, such as ":8080" ("0" disables it)`)
	fs.StringVar(&opts.HealthProbeBindAddress, "health-probe-bind-address", ":8081", `address of /healthz and /readyz ("0" disables it)`)
	fs.StringVar(&opts.PprofBindAddress, "pprof-bind-address", "0", `address of the Go profiler's /debug/pprof endpoints, loopback only, such as "127.0.0.1:6060" ("0" disables them)`)
	fs.Func("cluster-cidrs", "comma-separated Pod CIDRs of the cluster, written into derived WindowsNodeNetworks (never SNATed)", func(v string) error {
		opts.Defaults.ClusterCIDRs = splitList(v)
		return nil
	})
	fs.Func("service-cidrs", "comma-separated Service CIDRs of the cluster, written into derived WindowsNodeNetworks (never SNATed)", func(v string) error {
		opts.Defaults.ServiceCIDRs = splitList(v)
		return nil
	})
	fs.Func("windows-node-selector", "label selector of the nodes that get a WindowsNodeNetwork (default kubernetes.io/os=windows)", func(v string) error {
		sel, err := labels.Parse(v)
		opts.Defaults.WindowsNodeSelector = sel
		return err
	})
	fs.BoolVar(&opts.PacketTraceAdmissionChecked, "packettrace-admission-checked", false,
		"the chart's admission policies check each PacketTrace creator's rights (set when they are on); "+
			"without it, traces to another namespace's Pod or Service and traces with disclosure Cluster fail with NotAuthorized")
	fs.IntVar(&opts.PacketTraceMaxInCluster, "packettrace-max-in-cluster", packettrace.DefaultMaxInCluster,
		"how many PacketTraces may be Pending or Running in the cluster at once; more fail with TooManyTracesInCluster")
	// client-go's defaults (5 requests/s, burst 10; controller-runtime raises them to 20 and 30) are
	// sized for one object at a time; at 5,000 Nodes a resync of every Node's route and network
	// would take minutes.
	qps := fs.Float64("kube-api-qps", 100, "requests per second to the API server (client-side rate limit)")
	burst := fs.Int("kube-api-burst", 200, "requests to the API server allowed at once above --kube-api-qps")
	kubeconfig := cmdline.KubeconfigFlag(fs)
	log := cmdline.ParseMain(fs, os.Args[1:])

	cfg, err := cmdline.RESTConfig(*kubeconfig, "")
	if err != nil {
		log.Error(err, "Cannot load a kubeconfig: use --kubeconfig, $KUBECONFIG or the in-cluster config")
		os.Exit(1)
	}
	if *qps <= 0 || *burst <= 0 {
		log.Error(nil, "--kube-api-qps and --kube-api-burst must be positive", "qps", *qps, "burst", *burst)
		os.Exit(2)
	}
	if opts.PacketTraceMaxInCluster <= 0 {
		log.Error(nil, "--packettrace-max-in-cluster must be positive", "max", opts.PacketTraceMaxInCluster)
		os.Exit(2)
	}
	cfg.QPS, cfg.Burst = float32(*qps), *burst
	mgr, err := controller.NewManager(cfg, opts)
	if err != nil {
		log.Error(err, "Cannot create the controller")
		os.Exit(1)
	}
	log.Info("Starting winnet-controller")
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "winnet-controller stopped")
		os.Exit(1)
	}
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
