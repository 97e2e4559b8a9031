//go:build linux

package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The agents run with the credentials winnet's Helm chart gives winnet-agent: its ServiceAccount in the
// release namespace, its ClusterRole and binding, and the ValidatingAdmissionPolicies that let an agent write
// only its own node's objects and Events, rendered from the chart of the cluster's release by helm (not
// copied; ApplyChart), and a ServiceAccount token bound
// to the agent's Node (the chart's is bound to the agent's Pod on that Node; both carry the node-name claim
// the policy checks, and the harness runs no agent Pods).
const (
	// AgentNamespace is the release namespace the chart is rendered for.
	AgentNamespace = "winnet-system"
	// AgentServiceAccount is the agents' ServiceAccount, as the chart names it.
	AgentServiceAccount = "winnet-agent"
	// ControllerServiceAccount is winnet-controller's ServiceAccount, as the chart names it
	// (Options.ControllerServiceAccount).
	ControllerServiceAccount = "winnet-controller"
	// agentTokenLifetime outlives any test run; the agent reads its kubeconfig once.
	agentTokenLifetime = 48 * 3600
)

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
	if err := os.WriteFile(n.AgentKubeconfig(), []byte(c.tokenKubeconfig("winnet-agent", tr.Status.Token)), 0o600); err != nil {
		return fmt.Errorf("writing the kubeconfig of node %s's agent: %w", n.Name, err)
	}
	return nil
}

// writeControllerKubeconfig requests a token of winnet-controller's ServiceAccount and writes a
// kubeconfig with it (RunDir/winnet-controller.kubeconfig), whose path it returns
// (Options.ControllerServiceAccount).
func (c *Cluster) writeControllerKubeconfig(ctx context.Context) (string, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: AgentNamespace, Name: ControllerServiceAccount}}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](agentTokenLifetime)}}
	if err := c.Client.SubResource("token").Create(ctx, sa, tr); err != nil {
		return "", fmt.Errorf("requesting a token of ServiceAccount %s/%s: %w", AgentNamespace, ControllerServiceAccount, err)
	}
	path := filepath.Join(c.RunDir, "winnet-controller.kubeconfig")
	if err := os.WriteFile(path, []byte(c.tokenKubeconfig("winnet-controller", tr.Status.Token)), 0o600); err != nil {
		return "", fmt.Errorf("writing winnet-controller's kubeconfig: %w", err)
	}
	return path, nil
}

// tokenKubeconfig is a kubeconfig of the cluster's API server that authenticates with token.
func (c *Cluster) tokenKubeconfig(user, token string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: %[3]s
  user:
    token: %[4]s
contexts:
- name: %[3]s
  context:
    cluster: e2e
    user: %[3]s
current-context: %[3]s
`, c.Config.Host, c.CAFile, user, token)
}
