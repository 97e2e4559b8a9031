package controller

import (
	"fmt"
	"os"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/winnet-io/winnet/controllers/cluster"
	"github.com/winnet-io/winnet/controllers/clusternetworkpolicy"
	"github.com/winnet-io/winnet/controllers/packettrace"
	// winnet_build_info on the registry the metrics endpoint serves.
	_ "github.com/winnet-io/winnet/internal/buildinfo"
	"github.com/winnet-io/winnet/internal/cmdline"
	winnetscheme "github.com/winnet-io/winnet/internal/scheme"
	"github.com/winnet-io/winnet/internal/servedcrd"
)

// LeaderElectionID is the name of the Lease that elects the active winnet-controller.
const LeaderElectionID = "winnet-controller.network.winnet.io"

// Options configure winnet-controller.
type Options struct {
	// LeaderElection turns on leader election; only the leader reconciles.
	LeaderElection bool
	// LeaderElectionNamespace is the namespace of the Lease (default: the Pod's namespace).
	LeaderElectionNamespace string
	// LeaseDuration is how long a lost leader keeps the Lease before another instance takes over.
	LeaseDuration time.Duration
	// MetricsBindAddress is the address of the metrics endpoint ("0" disables it).
	MetricsBindAddress string
	// HealthProbeBindAddress is the address of /healthz and /readyz ("0" disables it).
	HealthProbeBindAddress string
	// PprofBindAddress is the address of the Go profiler's endpoints ("" or "0" disables them), as
	// the agent's: only a loopback address is accepted, since the profiler is unauthenticated.
	// make bench-scale reads the controller's heap there.
	PprofBindAddress string
	// Namespace is winnet-controller's namespace, where `winnet-controller uninstall` creates the
	// Lease that stops it (cluster.UninstallLeaseName); empty means LeaderElectionNamespace, then
	// the Pod's namespace, then "default".
	Namespace string
	// AgentLeaseNamespace is the namespace of the agents' Egress Leases (winnet's); empty means the
	// Pod's namespace, else "winnet-system" (the agents' default).
	AgentLeaseNamespace string
	// Defaults are written into every WindowsNodeNetwork derived from a Node.
	Defaults cluster.NetworkDefaults
	// PacketTraceAdmissionChecked says that the chart's admission policies check each PacketTrace's
	// creator's rights (a destination of another namespace, Cluster disclosure); when false,
	// winnet-controller fails such traces with NotAuthorized, since it cannot know those rights.
	PacketTraceAdmissionChecked bool
	// PacketTraceMaxInCluster is how many PacketTraces may be Pending or Running in the cluster at
	// once; zero means packettrace.DefaultMaxInCluster.
	PacketTraceMaxInCluster int
	// SeveralPerProcess allows more than one manager in a process, as tests run them (controller
	// names are otherwise unique per process).
	SeveralPerProcess bool
}

// namespace is the namespace winnet-controller runs in (see Options.Namespace).
func (o Options) namespace() string {
	if o.Namespace != "" {
		return o.Namespace
	}
	if o.LeaderElectionNamespace != "" {
		return o.LeaderElectionNamespace
	}
	if b, err := os.ReadFile(inClusterNamespaceFile); err == nil && strings.TrimSpace(string(b)) != "" {
		return strings.TrimSpace(string(b))
	}
	return "default"
}

// agentLeaseNamespace is where the agents renew their Egress Leases (see Options.AgentLeaseNamespace).
func (o Options) agentLeaseNamespace() string {
	if o.AgentLeaseNamespace != "" {
		return o.AgentLeaseNamespace
	}
	if b, err := os.ReadFile(inClusterNamespaceFile); err == nil && strings.TrimSpace(string(b)) != "" {
		return strings.TrimSpace(string(b))
	}
	return "winnet-system"
}

// inClusterNamespaceFile holds the namespace of the Pod's ServiceAccount.
const inClusterNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// NewManager returns winnet-controller's manager with its reconcilers registered.
func NewManager(cfg *rest.Config, opts Options) (manager.Manager, error) {
	if err := cmdline.ValidateLoopback(opts.PprofBindAddress); err != nil {
		return nil, fmt.Errorf("--pprof-bind-address: %w", err)
	}
	scheme, err := winnetscheme.New()
	if err != nil {
		return nil, err
	}
	mopts := manager.Options{
		Scheme: scheme,
		// Metrics over HTTPS, to callers the API server authenticates and allows get on the
		// non-resource URL /metrics (the chart's winnet-metrics-reader), as the agent's: they name
		// every node and its routes, which is not for every Pod of the cluster to read.
		Metrics: metricsserver.Options{
			BindAddress:    opts.MetricsBindAddress,
			SecureServing:  true,
			FilterProvider: filters.WithAuthenticationAndAuthorization,
		},
		HealthProbeBindAddress:  opts.HealthProbeBindAddress,
		PprofBindAddress:        opts.PprofBindAddress,
		Controller:              config.Controller{SkipNameValidation: &opts.SeveralPerProcess},
		LeaderElection:          opts.LeaderElection,
		LeaderElectionID:        LeaderElectionID,
		LeaderElectionNamespace: opts.LeaderElectionNamespace,
		// Nothing reads managed fields: the cached Nodes (a kubelet's status writes make theirs
		// large) and the rest go without them.
		// Leases only in winnet's namespace (the agents' Egress Leases): the Role grants no more.
		Cache: cache.Options{DefaultTransform: cache.TransformStripManagedFields(), ByObject: map[client.Object]cache.ByObject{
			&coordinationv1.Lease{}: {Namespaces: map[string]cache.Config{opts.agentLeaseNamespace(): {}}},
		}},
	}
	if opts.LeaseDuration > 0 {
		mopts.LeaseDuration = &opts.LeaseDuration
	}
	mgr, err := manager.New(cfg, mopts)
	if err != nil {
		return nil, fmt.Errorf("creating the controller manager: %w", err)
	}
	nodes := &cluster.NodeReconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("winnet-controller"), Defaults: opts.Defaults,
		Uninstall: cluster.UninstallSignal{Reader: mgr.GetAPIReader(), Namespace: opts.namespace()}}
	if err := nodes.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the node reconciler: %w", err)
	}
	conflicts := &cluster.RouteConflictReconciler{Client: mgr.GetClient()}
	if err := conflicts.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the route conflict reconciler: %w", err)
	}
	egresses := &cluster.EgressReconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("winnet-controller"),
		LeaseNamespace: opts.agentLeaseNamespace()}
	if err := egresses.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the egress reconciler: %w", err)
	}
	// ClusterNetworkPolicies' conditions, while the cluster serves their CRD (the chart installs
	// it; another product may install it, or delete it, later): no restart needed.
	cnps, err := servedcrd.ClusterNetworkPolicies(mgr)
	if err != nil {
		return nil, err
	}
	if err := (&clusternetworkpolicy.Reconciler{Client: mgr.GetClient(), Policies: cnps}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the ClusterNetworkPolicy status reconciler: %w", err)
	}
	traces := &packettrace.Reconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(),
		AdmissionChecked: opts.PacketTraceAdmissionChecked, MaxInCluster: opts.PacketTraceMaxInCluster}
	if err := traces.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the packet trace reconciler: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, fmt.Errorf("adding the health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return nil, fmt.Errorf("adding the readiness check: %w", err)
	}
	return mgr, nil
}
