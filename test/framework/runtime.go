package framework

import (
	"context"
	"testing"

	gocni "github.com/containerd/go-cni"
)

// Runtime calls CNI as containerd does, through containerd's go-cni with the CNI shim built by
// BuildShim, reloading the configuration directory before every call as containerd does on every
// change of it: with no configuration left, go-cni fails every call before any plugin runs.
type Runtime struct {
	cni gocni.CNI
}

// RuntimePod is what the runtime passes for a Pod sandbox: its ID, network namespace path and the
// Kubernetes labels that become CNI_ARGS.
type RuntimePod struct {
	Sandbox, Netns       string
	Namespace, Name, UID string
}

// NewRuntime returns a Runtime reading the CNI configuration directory confDir. Like containerd on
// Windows it needs one network and no loopback.
func NewRuntime(t testing.TB, confDir string) *Runtime {
	t.Helper()
	return NewRuntimeWithBinDir(t, confDir, BuildShim(t))
}

// NewRuntimeWithBinDir is NewRuntime running the plugins of binDir, such as the shim InstallShim
// installed.
func NewRuntimeWithBinDir(t testing.TB, confDir, binDir string) *Runtime {
	t.Helper()
	c, err := gocni.New(gocni.WithPluginDir([]string{binDir}), gocni.WithPluginConfDir(confDir),
		gocni.WithMinNetworkCount(1), gocni.WithInterfacePrefix("eth"))
	if err != nil {
		t.Fatal(err)
	}
	return &Runtime{cni: c}
}

// Reload loads the configuration directory again, as containerd does when it changes.
func (r *Runtime) Reload() error { return r.cni.Load(gocni.WithDefaultConf) }

func (p RuntimePod) labels() map[string]string {
	return map[string]string{"IgnoreUnknown": "1", "K8S_POD_NAMESPACE": p.Namespace, "K8S_POD_NAME": p.Name,
		"K8S_POD_INFRA_CONTAINER_ID": p.Sandbox, "K8S_POD_UID": p.UID}
}

// Setup is the runtime's ADD of the Pod's sandbox.
func (r *Runtime) Setup(ctx context.Context, p RuntimePod) error {
	if err := r.Reload(); err != nil {
		return err
	}
	_, err := r.cni.Setup(ctx, p.Sandbox, p.Netns, gocni.WithLabels(p.labels()))
	return err
}

// Remove is the runtime's DEL of the Pod's sandbox.
func (r *Runtime) Remove(ctx context.Context, p RuntimePod) error {
	if err := r.Reload(); err != nil {
		return err
	}
	return r.cni.Remove(ctx, p.Sandbox, p.Netns, gocni.WithLabels(p.labels()))
}
