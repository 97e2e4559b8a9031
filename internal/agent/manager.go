package agent

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/service"
	// winnet_build_info on the registry the metrics endpoint serves.
	_ "github.com/winnet-io/winnet/internal/buildinfo"
	"github.com/winnet-io/winnet/internal/cmdline"
	winnetscheme "github.com/winnet-io/winnet/internal/scheme"
)

// Options configure winnet-agent.
type Options struct {
	// NodeName is the name of the Node the agent runs on; its caches hold only this node's objects.
	NodeName string
	// MetricsBindAddress is the address of the metrics endpoint ("0" disables it).
	MetricsBindAddress string
	// HealthProbeBindAddress is the address of /healthz and /readyz ("0" disables it).
	HealthProbeBindAddress string
	// PprofBindAddress is the address of the Go profiler's endpoints ("" or "0" disables them); only
	// a loopback address is accepted: the profiler is unauthenticated.
	PprofBindAddress string
	// MetricsCertDir holds the metrics endpoint's tls.crt and tls.key; without them (or empty) it
	// serves a self-signed certificate made at start. It belongs in the protected state directory:
	// controller-runtime's default, under %TEMP%, is writable by every user of a Windows node.
	MetricsCertDir string
	// SeveralAgentsPerProcess allows more than one agent manager in a process, as tests of
	// simulated nodes run them (controller names are otherwise unique per process).
	SeveralAgentsPerProcess bool
}

// Validate reports what is wrong with the options.
func (o Options) Validate() error {
	if o.NodeName == "" {
		return errors.New("the node name is required: pass --node-name or set NODE_NAME (the Pod's spec.nodeName)")
	}
	if len(o.NodeName) > networkv1alpha1.MaxPodEndpointNodeName {
		return fmt.Errorf("node name %q has %d characters: winnet supports node names of at most %d, so that its PodEndpoints' names (\"<node>.<Pod UID>\") fit the 253 characters of an object name",
			o.NodeName, len(o.NodeName), networkv1alpha1.MaxPodEndpointNodeName)
	}
	if err := cmdline.ValidateLoopback(o.PprofBindAddress); err != nil {
		return fmt.Errorf("--pprof-bind-address: %w", err)
	}
	return nil
}

// metricsOptions serves metrics over HTTPS, to callers the API server authenticates and allows
// get on the non-resource URL /metrics (the chart's winnet-metrics-reader ClusterRole).
func metricsOptions(opts Options) metricsserver.Options {
	return metricsserver.Options{
		BindAddress:    opts.MetricsBindAddress,
		SecureServing:  true,
		FilterProvider: filters.WithAuthenticationAndAuthorization,
		CertDir:        opts.MetricsCertDir,
	}
}

// NewManager returns the agent's manager. Its caches watch only the objects of opts.NodeName: its
// WindowsNodeNetwork and Node by name, its PodEndpoints and Pods by spec.nodeName. RemoteSubnetRoutes
// are cluster-wide: every node routes to every other node.
func NewManager(cfg *rest.Config, opts Options) (manager.Manager, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	scheme, err := winnetscheme.New()
	if err != nil {
		return nil, err
	}
	byName := fields.OneTermEqualSelector("metadata.name", opts.NodeName)
	onNode := fields.OneTermEqualSelector("spec.nodeName", opts.NodeName)
	mgr, err := manager.New(cfg, manager.Options{
		Scheme:                 scheme,
		Metrics:                metricsOptions(opts),
		HealthProbeBindAddress: opts.HealthProbeBindAddress,
		PprofBindAddress:       opts.PprofBindAddress,
		Controller:             config.Controller{SkipNameValidation: &opts.SeveralAgentsPerProcess},
		Cache: cache.Options{
			// No reconciler reads managed fields: every cached object goes without them (a kind
			// with a Transform of its own below drops them there).
			DefaultTransform: cache.TransformStripManagedFields(),
			ByObject: map[client.Object]cache.ByObject{
				&networkv1alpha1.WindowsNodeNetwork{}: {Field: byName},
				&corev1.Node{}:                        {Field: byName},
				&networkv1alpha1.PodEndpoint{}:        {Field: onNode},
				&corev1.Pod{}:                         {Field: onNode},
				// Only the running traces: a node installs flows and injects for them alone, and a
				// namespace's finished traces (kept for an hour) cost no agent anything.
				&networkv1alpha1.PacketTrace{}: {Field: fields.OneTermEqualSelector("status.phase", string(networkv1alpha1.PacketTraceRunning))},
				// Every Service and EndpointSlice of the cluster that winnet serves (10,000 Services
				// hold 50,000 or more endpoints), selected by the API server as kube-proxy selects
				// them (no other proxy's, no headless Service's slices), kept without what no
				// reconciler reads (service.TrimService, service.TrimEndpointSlice).
				&corev1.Service{}:            {Label: proxiedBy, Transform: service.TrimService},
				&discoveryv1.EndpointSlice{}: {Label: proxiedBy, Transform: service.TrimEndpointSlice},
			},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("creating the manager of node %q: %w", opts.NodeName, err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, fmt.Errorf("adding the health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return nil, fmt.Errorf("adding the readiness check: %w", err)
	}
	return mgr, nil
}

// proxiedBy selects the Services and EndpointSlices a node's proxy serves, as kube-proxy does
// (cmd/kube-proxy/app/server.go): none labelled service.kubernetes.io/service-proxy-name (another
// proxy serves them) or service.kubernetes.io/headless (the endpoint slice controller labels a headless
// Service's slices so; such a Service has no ClusterIP to serve). A Service that gains the label
// leaves the watch as if deleted, and its flows go.
var proxiedBy = func() labels.Selector {
	noProxyName, err := labels.NewRequirement("service.kubernetes.io/service-proxy-name", selection.DoesNotExist, nil)
	if err != nil {
		panic(err)
	}
	noHeadless, err := labels.NewRequirement(corev1.IsHeadlessService, selection.DoesNotExist, nil)
	if err != nil {
		panic(err)
	}
	return labels.NewSelector().Add(*noProxyName, *noHeadless)
}()
