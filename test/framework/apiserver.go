//go:build !windows

// envtest does not compile for windows in controller-runtime v0.25 (see LIBS.md).

package framework

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	winnetscheme "github.com/winnet-io/winnet/internal/scheme"
)

// AssetsDir returns the directory holding kube-apiserver, etcd and kubectl: $KUBEBUILDER_ASSETS, or
// the one hack/setup-test-deps.sh built under bin/k8s. It fails with the command to run when neither
// exists: a test that needs the API server never passes without one.
func AssetsDir() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, checkAssets(dir)
	}
	matches, _ := filepath.Glob(filepath.Join(RepoRoot(), "bin", "k8s", "*"))
	for i := len(matches) - 1; i >= 0; i-- {
		if checkAssets(matches[i]) == nil {
			return matches[i], nil
		}
	}
	return "", errors.New("no kube-apiserver/etcd found: run 'hack/setup-test-deps.sh' (or 'make test') to build them into bin/k8s, or set KUBEBUILDER_ASSETS")
}

func checkAssets(dir string) error {
	for _, b := range []string{"kube-apiserver", "etcd", "kubectl"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return fmt.Errorf("test asset %s missing in %s (run hack/setup-test-deps.sh): %w", b, dir, err)
		}
	}
	return nil
}

// APIServer is a running kube-apiserver and etcd, with winnet's CRDs installed unless started by
// StartAPIServerWithoutCRDs.
type APIServer struct {
	Env    *envtest.Environment
	Config *rest.Config
	Client client.Client
	// Kubectl is the path of the kubectl built with the server.
	Kubectl string
	// KubeconfigPath is an admin kubeconfig for kubectl.
	KubeconfigPath string
}

// StartAPIServer starts kube-apiserver and etcd, installs config/crd/bases and returns a client.
// Call Stop when done.
func StartAPIServer() (*APIServer, error) {
	return startAPIServer(APIServerOptions{}, filepath.Join(RepoRoot(), "config", "crd", "bases"))
}

// StartAPIServerWithoutCRDs starts kube-apiserver and etcd without winnet's CRDs, for a test that
// installs them itself (the Helm chart). Call Stop when done.
func StartAPIServerWithoutCRDs() (*APIServer, error) {
	return startAPIServer(APIServerOptions{})
}

// APIServerOptions change how the API server starts.
type APIServerOptions struct {
	// Args are kube-apiserver flags (name without dashes -> value) set over envtest's defaults, such as
	// "advertise-address" and "service-cluster-ip-range" for a cluster whose Pods reach the API server.
	Args map[string]string
	// OmitCRDFiles are files of config/crd/bases not installed (StartAPIServerWith), for a test
	// that installs a CRD after winnet started (ClusterNetworkPolicyCRDFile).
	OmitCRDFiles []string
	// CRDDir is the directory of CRDs installed instead of config/crd/bases: another release's (an
	// upgrade test starts the previous release's cluster).
	CRDDir string
	// EtcdArgs are etcd flags (name without dashes -> value) set over envtest's defaults, such as
	// "quota-backend-bytes" for a cluster larger than etcd's default 2 GiB quota holds.
	EtcdArgs map[string]string
}

// ClusterNetworkPolicyCRDFile is the ClusterNetworkPolicy CRD in config/crd/bases, the one the
// chart ships (copied from the network-policy-api module by make manifests).
const ClusterNetworkPolicyCRDFile = "policy.networking.k8s.io_clusternetworkpolicies.yaml"

// CRDBasesDir is config/crd/bases: winnet's CRDs and the ClusterNetworkPolicy CRD.
func CRDBasesDir() string {
	return filepath.Join(RepoRoot(), "config", "crd", "bases")
}

// StartAPIServerWith starts kube-apiserver with the options and etcd, installs config/crd/bases (or CRDDir) and
// returns a client. Call Stop when done.
func StartAPIServerWith(opts APIServerOptions) (*APIServer, error) {
	dir := CRDBasesDir()
	if opts.CRDDir != "" {
		dir = opts.CRDDir
	}
	if len(opts.OmitCRDFiles) == 0 {
		return startAPIServer(opts, dir)
	}
	// envtest installs directories or files: the files of the directory but those omitted.
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("listing the CRDs: %w", err)
	}
	var files []string
	omitted := 0
	for _, e := range entries {
		if slices.Contains(opts.OmitCRDFiles, e.Name()) {
			omitted++
			continue
		}
		files = append(files, filepath.Join(dir, e.Name()))
	}
	if omitted != len(opts.OmitCRDFiles) {
		return nil, fmt.Errorf("omitting CRD files %v: not all are in %s", opts.OmitCRDFiles, dir)
	}
	return startAPIServer(opts, files...)
}

// apiServerStartTimeout bounds the start of kube-apiserver and etcd.
const apiServerStartTimeout = 90 * time.Second

// apiServerStopTimeout bounds the stop of kube-apiserver and etcd: kube-apiserver's request timeout and
// some.
const apiServerStopTimeout = 90 * time.Second

func startAPIServer(opts APIServerOptions, crdDirs ...string) (*APIServer, error) {
	assets, err := AssetsDir()
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     crdDirs,
		ErrorIfCRDPathMissing: true,
		// envtest's default of 20 s is too short when several suites start their API servers at
		// once on a loaded 2-core machine ("timeout waiting for process kube-apiserver to start").
		ControlPlaneStartTimeout: apiServerStartTimeout,
		// envtest's default of 20 s is too short to stop too: kube-apiserver drains its in-flight
		// requests for up to its request timeout (1 min) before it exits, and kubelets, CoreDNS and
		// e2e.test's clients leave many (Kubernetes' e2e suite against the kubelet nodes, load 30-50:
		// "timeout waiting for process kube-apiserver to stop" in each of three runs).
		ControlPlaneStopTimeout: apiServerStopTimeout,
	}
	for name, value := range opts.Args {
		env.ControlPlane.GetAPIServer().Configure().Set(name, value)
	}
	if len(opts.EtcdArgs) > 0 {
		env.ControlPlane.Etcd = &envtest.Etcd{}
		for name, value := range opts.EtcdArgs {
			env.ControlPlane.Etcd.Configure().Set(name, value)
		}
	}
	cfg, err := env.Start()
	if err != nil {
		// Start fails after the control plane is up when a CRD is refused: stop what it started.
		return nil, errors.Join(fmt.Errorf("starting kube-apiserver and etcd from %s: %w", assets, err), env.Stop())
	}
	s := &APIServer{Env: env, Config: cfg, Kubectl: filepath.Join(assets, "kubectl")}
	scheme, err := winnetscheme.New()
	if err != nil {
		return nil, errors.Join(err, env.Stop())
	}
	if s.Client, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return nil, errors.Join(fmt.Errorf("creating a client: %w", err), env.Stop())
	}
	f, err := os.CreateTemp("", "winnet-kubeconfig-*")
	if err == nil {
		_, err = f.Write(env.KubeConfig)
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("writing the kubeconfig: %w", err), env.Stop())
	}
	s.KubeconfigPath = f.Name()
	return s, nil
}

// Stop stops the API server and etcd and removes the kubeconfig.
func (s *APIServer) Stop() error {
	if s.KubeconfigPath != "" {
		_ = os.Remove(s.KubeconfigPath)
	}
	return s.Env.Stop()
}

// WarningReasons lists the reasons of the Warning Events in namespace about the object named name:
// what a reconciler that cannot realise an object tells its user.
func (s *APIServer) WarningReasons(ctx context.Context, namespace, name string) ([]string, error) {
	list := &eventsv1.EventList{}
	if err := s.Client.List(ctx, list, client.InNamespace(namespace)); err != nil {
		return nil, err
	}
	var reasons []string
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Type == corev1.EventTypeWarning {
			reasons = append(reasons, e.Reason)
		}
	}
	return reasons, nil
}
