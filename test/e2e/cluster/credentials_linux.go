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

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/hostcmd"
)

// The agents run with the credentials winnet's Helm chart gives winnet-agent: its ServiceAccount in the
// release namespace, its ClusterRole and binding, and the ValidatingAdmissionPolicies that let an agent write
// only its own node's objects and Events, rendered from the chart by helm (not copied), and a ServiceAccount token bound
// to the agent's Node (the chart's is bound to the agent's Pod on that Node; both carry the node-name claim
// the policy checks, and the harness runs no agent Pods).
const (
	// AgentNamespace is the release namespace the chart is rendered for.
	AgentNamespace = "winnet-system"
	// AgentServiceAccount is the agents' ServiceAccount, as the chart names it.
	AgentServiceAccount = "winnet-agent"
	// agentTokenLifetime outlives any test run; the agent reads its kubeconfig once.
	agentTokenLifetime = 48 * 3600
)

// agentChartObjects are the chart's objects that make up winnet-agent's credentials, and the admission
// policy on PacketTrace creators (winnet-controller runs with --packettrace-admission-checked, as the
// chart runs it), by kind and name.
var agentChartObjects = []string{
	"ServiceAccount/" + AgentServiceAccount,
	"ClusterRole/winnet-agent",
	"ClusterRoleBinding/winnet-agent",
	"ValidatingAdmissionPolicy/winnet-agent-own-node",
	"ValidatingAdmissionPolicyBinding/winnet-agent-own-node",
	"ValidatingAdmissionPolicy/winnet-agent-events",
	"ValidatingAdmissionPolicyBinding/winnet-agent-events",
	"ValidatingAdmissionPolicy/winnet-packettrace-tenancy",
	"ValidatingAdmissionPolicyBinding/winnet-packettrace-tenancy",
}

// installAgentCredentials renders the chart with helm and creates winnet-agent's ServiceAccount, RBAC and
// admission policy from it.
func (c *Cluster) installAgentCredentials(ctx context.Context) error {
	c.logf("Installing winnet-agent's ServiceAccount, RBAC and admission policy from the Helm chart")
	helm, err := framework.HelmBinary()
	if err != nil {
		return err
	}
	home := filepath.Join(c.RunDir, "helm")
	cmd := hostcmd.CommandContext(ctx, helm, "template", "winnet", framework.ChartDir(), "--namespace", AgentNamespace,
		"--show-only", "templates/serviceaccounts.yaml", "--show-only", "templates/rbac.yaml", "--show-only", "templates/admission-policy.yaml")
	// Keep helm away from the user's repositories, plugins and cache.
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("rendering the chart: helm template: %w: %s", err, stderr.String())
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: AgentNamespace}}
	if err := c.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", AgentNamespace, err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(&stdout, 4096)
	var created []string
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return fmt.Errorf("reading the rendered chart: %w", err)
		}
		if len(u.Object) == 0 || !slices.Contains(agentChartObjects, u.GetKind()+"/"+u.GetName()) {
			continue
		}
		if err := c.Client.Create(ctx, u); err != nil {
			return fmt.Errorf("creating the chart's %s %s: %w", u.GetKind(), u.GetName(), err)
		}
		created = append(created, u.GetKind()+"/"+u.GetName())
	}
	for _, o := range agentChartObjects {
		if !slices.Contains(created, o) {
			return fmt.Errorf("the rendered chart has no %s", o)
		}
	}
	return nil
}

// AgentKubeconfig is the kubeconfig the node's agent runs with (see writeAgentKubeconfig).
func (n *Node) AgentKubeconfig() string { return filepath.Join(n.Dir, "agent.kubeconfig") }

// writeAgentKubeconfig requests a token of winnet-agent bound to the node's Node object and writes the agent's
// kubeconfig with it. A Node deleted and created again needs a new one: the token names the Node's UID.
func (n *Node) writeAgentKubeconfig(ctx context.Context) error {
	c := n.c
	node := &corev1.Node{}
	if err := c.Client.Get(ctx, client.ObjectKey{Name: n.Name}, node); err != nil {
		return fmt.Errorf("getting Node %s for its agent's token: %w", n.Name, err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: AgentNamespace, Name: AgentServiceAccount}}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To[int64](agentTokenLifetime),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: node.Name, UID: node.UID},
	}}
	if err := c.Client.SubResource("token").Create(ctx, sa, tr); err != nil {
		return fmt.Errorf("requesting a token of ServiceAccount %s/%s bound to Node %s: %w", AgentNamespace, AgentServiceAccount, n.Name, err)
	}
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: winnet-agent
  user:
    token: %s
contexts:
- name: winnet-agent
  context:
    cluster: e2e
    user: winnet-agent
current-context: winnet-agent
`, c.Config.Host, c.CAFile, tr.Status.Token)
	if err := os.WriteFile(n.AgentKubeconfig(), []byte(kubeconfig), 0o600); err != nil {
		return fmt.Errorf("writing the kubeconfig of node %s's agent: %w", n.Name, err)
	}
	return nil
}
