//go:build linux

package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/winnet-io/winnet/internal/cni"
	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/hostcmd"
)

// Release is one version of winnet as an operator installs it: its binaries, its Helm chart and its CRDs.
// Each component of a cluster runs a release of its own, switched on restart as helm upgrade and a DaemonSet
// rollout switch them: the CRDs (ApplyCRDs), the chart's RBAC and admission policies (ApplyChart),
// winnet-controller (RestartControllerWith), and per node the agent (Node.SetAgentRelease) and the CNI shim
// (Node.InstallShim).
type Release struct {
	// Version names the release in logs and result lines.
	Version string
	// BinDir holds its linux winnet-agent, winnet-controller and winnet-cni.
	BinDir string
	// ChartDir is its Helm chart (config/helm/winnet of its tree).
	ChartDir string
	// CRDDir holds its CRDs (config/crd/bases of its tree, ClusterNetworkPolicy's included).
	CRDDir string
}

func (r Release) String() string { return r.Version }

// CurrentRelease is the release of this tree: VERSION, bin/linux, the chart and config/crd/bases.
func CurrentRelease() Release {
	root := framework.RepoRoot()
	version := "unversioned"
	if b, err := os.ReadFile(filepath.Join(root, "VERSION")); err == nil {
		version = strings.TrimSpace(string(b))
	}
	return Release{Version: version, BinDir: filepath.Join(root, "bin", "linux"), ChartDir: framework.ChartDir(),
		CRDDir: framework.CRDBasesDir()}
}

// PreviousRelease is the release hack/previous-release names, as make previous-release built it
// (framework.PreviousRelease: the directory WINNET_PREVIOUS_RELEASE_DIR names): its binaries, and the chart
// and CRDs of its source tree. It fails, saying how to build it, when that has not been done.
func PreviousRelease() (Release, error) {
	b, err := framework.PreviousRelease()
	if err != nil {
		return Release{}, err
	}
	r := Release{Version: b.Version, BinDir: b.BinDir, ChartDir: filepath.Join(b.Dir, "src", "config", "helm", "winnet"),
		CRDDir: filepath.Join(b.Dir, "src", "config", "crd", "bases")}
	for _, p := range []string{filepath.Join(r.ChartDir, "Chart.yaml"), r.CRDDir} {
		if _, err := os.Stat(p); err != nil {
			return Release{}, fmt.Errorf("the build of release %s in %s has no source tree: run 'make previous-release': %w", b.Version, b.Dir, err)
		}
	}
	return r, nil
}

// ApplyCRDs replaces the cluster's CRDs by those of r, as an operator applies a release's CRDs before helm
// upgrade (helm installs crds/ once and never upgrades or downgrades them).
func (c *Cluster) ApplyCRDs(ctx context.Context, r Release) error {
	c.logf("Applying the CRDs of release %s", r)
	cmd := hostcmd.CommandContext(ctx, c.Kubectl, "--kubeconfig", c.Kubeconfig, "apply", "--server-side", "--force-conflicts",
		"--field-manager", "winnet-upgrade", "-f", r.CRDDir)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("applying the CRDs of release %s: %w: %s", r, err, out)
	}
	return nil
}

// The chart objects the harness installs (ApplyChart), by kind and name: winnet-agent's credentials (its
// ServiceAccount, RBAC and the admission policies on what agents write), and the admission policy on
// PacketTrace creators (winnet-controller runs with --packettrace-admission-checked when it has the flag, as
// the chart runs it). Every release has chartObjectsRequired; the others only those that have them.
var (
	chartObjectsRequired = []string{
		"ServiceAccount/" + AgentServiceAccount,
		"ClusterRole/winnet-agent",
		"ClusterRoleBinding/winnet-agent",
		"ValidatingAdmissionPolicy/winnet-agent-own-node",
		"ValidatingAdmissionPolicyBinding/winnet-agent-own-node",
	}
	chartObjectsOptional = []string{
		"ValidatingAdmissionPolicy/winnet-agent-events",
		"ValidatingAdmissionPolicyBinding/winnet-agent-events",
		"ValidatingAdmissionPolicy/winnet-packettrace-tenancy",
		"ValidatingAdmissionPolicyBinding/winnet-packettrace-tenancy",
		"Role/winnet-agent",
		"RoleBinding/winnet-agent",
		"ValidatingAdmissionPolicy/winnet-agent-egress-lease",
		"ValidatingAdmissionPolicyBinding/winnet-agent-egress-lease",
	}
	// chartControllerObjects are winnet-controller's credentials, installed too with
	// Options.ControllerServiceAccount.
	chartControllerObjects = []string{
		"ServiceAccount/" + ControllerServiceAccount,
		"ClusterRole/winnet-controller",
		"ClusterRoleBinding/winnet-controller",
		"Role/winnet-controller",
		"RoleBinding/winnet-controller",
	}
)

// ApplyChart makes the chart's objects of chartObjectsRequired and chartObjectsOptional what r's chart
// renders, as helm install, upgrade and rollback do: objects it renders are created or updated, those it no
// longer renders are deleted.
func (c *Cluster) ApplyChart(ctx context.Context, r Release) error {
	c.logf("Applying the RBAC and admission policies of release %s's chart", r)
	rendered, err := c.renderChart(ctx, r)
	if err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: AgentNamespace}}
	if err := c.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", AgentNamespace, err)
	}
	required := slices.Clone(chartObjectsRequired)
	if c.opts.ControllerServiceAccount {
		required = append(required, chartControllerObjects...)
	}
	for _, key := range required {
		if _, ok := rendered[key]; !ok {
			return fmt.Errorf("the chart of release %s renders no %s", r, key)
		}
	}
	for _, key := range append(required, chartObjectsOptional...) {
		u, ok := rendered[key]
		if !ok {
			gone := &unstructured.Unstructured{}
			gone.SetAPIVersion(apiVersionOf(key))
			gone.SetKind(strings.SplitN(key, "/", 2)[0])
			gone.SetName(strings.SplitN(key, "/", 2)[1])
			if kind := gone.GetKind(); kind == "Role" || kind == "RoleBinding" {
				gone.SetNamespace(AgentNamespace)
			}
			if err := c.Client.Delete(ctx, gone); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("deleting %s, which release %s's chart does not have: %w", key, r, err)
			}
			continue
		}
		old := &unstructured.Unstructured{}
		old.SetGroupVersionKind(u.GroupVersionKind())
		err := c.Client.Get(ctx, client.ObjectKeyFromObject(u), old)
		switch {
		case apierrors.IsNotFound(err):
			err = c.Client.Create(ctx, u)
		case err == nil:
			u.SetResourceVersion(old.GetResourceVersion())
			err = c.Client.Update(ctx, u)
		}
		if err != nil {
			return fmt.Errorf("applying release %s's %s: %w", r, key, err)
		}
	}
	return nil
}

// apiVersionOf is the API version of the chart objects' kinds.
func apiVersionOf(key string) string {
	switch strings.SplitN(key, "/", 2)[0] {
	case "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
		return "admissionregistration.k8s.io/v1"
	case "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
		return "rbac.authorization.k8s.io/v1"
	}
	return "v1"
}

// renderChart renders r's chart with helm (its ServiceAccounts, RBAC and admission policies) and returns the
// objects by kind and name.
func (c *Cluster) renderChart(ctx context.Context, r Release) (map[string]*unstructured.Unstructured, error) {
	helm, err := framework.HelmBinary()
	if err != nil {
		return nil, err
	}
	home := filepath.Join(c.RunDir, "helm")
	cmd := hostcmd.CommandContext(ctx, helm, "template", "winnet", r.ChartDir, "--namespace", AgentNamespace,
		"--show-only", "templates/serviceaccounts.yaml", "--show-only", "templates/rbac.yaml", "--show-only", "templates/admission-policy.yaml")
	// Keep helm away from the user's repositories, plugins and cache.
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("rendering the chart of release %s: helm template: %w: %s", r, err, stderr.String())
	}
	objs := map[string]*unstructured.Unstructured{}
	dec := utilyaml.NewYAMLOrJSONDecoder(&stdout, 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("reading the rendered chart of release %s: %w", r, err)
		}
		if len(u.Object) > 0 {
			objs[u.GetKind()+"/"+u.GetName()] = u
		}
	}
	return objs, nil
}

// RestartControllerWith stops winnet-controller (SIGTERM) and starts release r's, as its Deployment's rollout
// does; Options.ControllerArgs are kept.
func (c *Cluster) RestartControllerWith(r Release) error {
	if c.controller != nil {
		if err := c.controller.stop(syscall.SIGTERM, 10*time.Second); err != nil {
			return err
		}
	}
	c.controllerRelease = r
	return c.startController()
}

// ControllerRelease is the release winnet-controller runs.
func (c *Cluster) ControllerRelease() Release { return c.controllerRelease }

// SetAgentRelease makes the node's agent release r's from its next start (StartAgent, RestartAgent), as a
// DaemonSet's new Pod template does.
func (n *Node) SetAgentRelease(r Release) {
	n.agentBinary = filepath.Join(r.BinDir, "winnet-agent")
	n.agentRelease = r
}

// AgentRelease is the release the node's agent runs (from its last start).
func (n *Node) AgentRelease() Release { return n.agentRelease }

// InstallShim replaces the node's CNI shim by release r's, as the agent Pod's installer does: the runtime's
// next CNI call runs it (a rename, so that no call runs half a file).
func (n *Node) InstallShim(r Release) error {
	src := filepath.Join(r.BinDir, cni.PluginType)
	if n.kubelet == nil {
		// The harness's own CNI calls run the shim of shimDir.
		n.shimDir = r.BinDir
		n.shimRelease = r
		return nil
	}
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("reading release %s's CNI shim: %w", r, err)
	}
	dst := filepath.Join(n.kubelet.dir, "cni-bin", cni.PluginType)
	tmp := dst + ".new"
	if err := os.WriteFile(tmp, b, 0o755); err != nil {
		return err
	}
	if err := os.Rename(tmp, dst); err != nil {
		return fmt.Errorf("installing release %s's CNI shim on %s: %w", r, n.Name, err)
	}
	n.shimRelease = r
	return nil
}

// ShimRelease is the release of the node's CNI shim.
func (n *Node) ShimRelease() Release { return n.shimRelease }

// RunKubectl runs the cluster's kubectl with its admin kubeconfig, stdin (when not empty) on its standard
// input, and returns its standard output; an error carries its standard error.
func (c *Cluster) RunKubectl(stdin string, args ...string) (string, error) {
	cmd := hostcmd.Command(c.Kubectl, append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}
