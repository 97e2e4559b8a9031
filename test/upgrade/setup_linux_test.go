//go:build (upgrade || soak) && linux

package upgrade

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	cnpv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/test/e2e/cluster"
)

// The cluster: two winnet nodes with a real kubelet and containerd, a third winnet node played by the harness
// where CoreDNS runs (as the conformance tier's), the flannel node linux-a with a Pod, and the external host.
var (
	kubeA   = cluster.NodeSpec{Name: "kube-a", IP: netip.MustParseAddr("192.168.85.11"), PodCIDR: netip.MustParsePrefix("10.249.1.0/24")}
	kubeB   = cluster.NodeSpec{Name: "kube-b", IP: netip.MustParseAddr("192.168.85.12"), PodCIDR: netip.MustParsePrefix("10.249.2.0/24")}
	dnsNode = cluster.NodeSpec{Name: "dns", IP: netip.MustParseAddr("192.168.85.13"), PodCIDR: netip.MustParsePrefix("10.249.3.0/24")}
	linuxA  = cluster.FlannelNodeSpec{Name: "linux-a", IP: netip.MustParseAddr("192.168.85.21"), PodCIDR: netip.MustParsePrefix("10.249.9.0/24")}
)

const (
	appNamespace = "upg"
	// echoPort is where the test's echo servers answer inside the Pods and on the external host.
	echoPort     = 9000
	readyTimeout = 3 * time.Minute
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// kubectl runs kubectl with the cluster's admin kubeconfig.
func kubectl(c *cluster.Cluster, stdin string, args ...string) (string, error) {
	return c.RunKubectl(stdin, args...)
}

// netexecPod is an agnhost netexec Pod on node, probed Ready by kubelet; the test's echo server answers on
// echoPort inside it.
func netexecPod(name, node string, labels map[string]string) string {
	var l strings.Builder
	for k, v := range labels {
		fmt.Fprintf(&l, "    %s: %q\n", k, v)
	}
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  labels:
%sspec:
  nodeSelector: {kubernetes.io/hostname: %s}
  terminationGracePeriodSeconds: 1
  containers:
  - name: netexec
    image: %s
    args: [netexec, --http-port=8080, --udp-port=8081]
    readinessProbe:
      httpGet: {path: /hostname, port: 8080}
      periodSeconds: 1
`, name, l.String(), node, cluster.KubeletImages.Agnhost)
}

// The workload's Pods, by name: node and labels.
var appPods = []struct {
	name, node string
	labels     map[string]string
}{
	{"client", "kube-a", map[string]string{"app": "client"}},
	{"web-a", "kube-a", map[string]string{"app": "web", "allowed": "yes"}},
	{"web-b", "kube-b", map[string]string{"app": "web"}},
	{"locked", "kube-b", map[string]string{"role": "locked"}},
	{"guarded", "kube-b", map[string]string{"admin": "guarded"}},
}

// setUp builds the cluster's nodes and workload; agentArgs, when set, gives each winnet node's agent
// more flags (the soak's profiler address).
func setUp(t *testing.T, c *cluster.Cluster, agentArgs func(node string) []string) *world {
	ctx := context.Background()
	if err := c.Client.Create(ctx, &networkv1alpha1.FlannelInterop{ObjectMeta: metav1.ObjectMeta{Name: networkv1alpha1.FlannelInteropName}}); err != nil {
		t.Fatalf("turning flannel interop on: %v", err)
	}
	for _, n := range []struct {
		spec cluster.NodeSpec
		rt   cluster.Runtime
	}{{kubeA, cluster.DebianContainerd()}, {kubeB, cluster.BuiltContainerd()}} {
		if agentArgs != nil {
			n.spec.AgentArgs = agentArgs(n.spec.Name)
		}
		if _, err := c.AddKubeletNode(ctx, n.spec, n.rt); err != nil {
			t.Fatalf("adding node %s: %v", n.spec.Name, err)
		}
	}
	dnsSpec := dnsNode
	if agentArgs != nil {
		dnsSpec.AgentArgs = agentArgs(dnsSpec.Name)
	}
	dns, err := c.AddNode(ctx, dnsSpec)
	must(t, err)
	taintControlPlane(t, c, dns.Name)
	fl, err := c.AddFlannelNode(ctx, linuxA)
	must(t, err)
	c.SetRoutesToFlannelNodes(true)
	if err := c.WaitReady(ctx, readyTimeout); err != nil {
		t.Fatalf("the winnet networks are not Ready: %v", err)
	}
	if _, err := c.StartDNS(ctx, dns, 2*time.Minute); err != nil {
		t.Fatalf("starting the cluster DNS: %v", err)
	}
	lx, err := c.AddFlannelPod(ctx, fl, "lx-1")
	must(t, err)

	// The workload: Pods through kubelet, a Service over web-a and web-b, a NetworkPolicy isolating locked, a
	// ClusterNetworkPolicy (Admin tier) denying client's connections to guarded, the audit log on.
	_, err = kubectl(c, fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata:
  name: %s
  annotations: {%s: "%s"}
`, appNamespace, networkv1alpha1.AuditLogAnnotation, networkv1alpha1.AuditLogOn), "apply", "-f", "-")
	must(t, err)
	var manifests []string
	for _, p := range appPods {
		manifests = append(manifests, netexecPod(p.name, p.node, p.labels))
	}
	manifests = append(manifests, fmt.Sprintf(`apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{name: echo, port: 80, targetPort: %d}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: locked}
spec:
  podSelector: {matchLabels: {role: locked}}
  policyTypes: [Ingress]
  ingress:
  - from: [{podSelector: {matchLabels: {allowed: "yes"}}}]
    ports: [{port: %d, protocol: TCP}]
`, echoPort, echoPort))
	_, err = kubectl(c, strings.Join(manifests, "---\n"), "-n", appNamespace, "apply", "-f", "-")
	must(t, err)
	guarded := &cnpv1beta1.ClusterNetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "upg-admin-deny", Annotations: map[string]string{networkv1alpha1.AuditLogAnnotation: networkv1alpha1.AuditLogOn}},
		Spec: cnpv1beta1.ClusterNetworkPolicySpec{
			Tier: cnpv1beta1.AdminTier, Priority: 5,
			Subject: cnpv1beta1.ClusterNetworkPolicySubject{Pods: &cnpv1beta1.NamespacedPod{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"admin": "guarded"}}}},
			Ingress: []cnpv1beta1.ClusterNetworkPolicyIngressRule{{
				Action: cnpv1beta1.ClusterNetworkPolicyRuleActionDeny,
				From: []cnpv1beta1.ClusterNetworkPolicyIngressPeer{{Pods: &cnpv1beta1.NamespacedPod{
					PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}}}}},
				Protocols: []cnpv1beta1.ClusterNetworkPolicyProtocol{{TCP: &cnpv1beta1.ClusterNetworkPolicyProtocolTCP{
					DestinationPort: &cnpv1beta1.Port{Number: echoPort}}}},
			}},
		},
	}
	must(t, c.Client.Create(ctx, guarded))
	var names []string
	for _, p := range appPods {
		names = append(names, "pod/"+p.name)
	}
	if out, err := kubectl(c, "", append([]string{"-n", appNamespace, "wait", "--for=condition=Ready", "--timeout=180s"}, names...)...); err != nil {
		desc, _ := kubectl(c, "", "-n", appNamespace, "describe", "pods")
		t.Fatalf("%v\n%s\n%s", err, out, desc)
	}
	w := &world{c: c, lx: lx.Place(), places: map[string]cluster.Place{}, uids: map[string]string{}}
	for _, p := range appPods {
		place, err := c.KubeletPodPlace(ctx, c.Node(p.node), appNamespace, p.name, p.name)
		must(t, err)
		w.places[p.name] = place
		if p.name != "client" {
			e, err := cluster.ServeNamedEcho("/run/netns/"+place.NS, p.name, []int{echoPort}, nil)
			must(t, err)
			t.Cleanup(e.Close)
		}
		pod := &corev1.Pod{}
		must(t, c.Client.Get(ctx, client.ObjectKey{Namespace: appNamespace, Name: p.name}, pod))
		w.uids[p.name] = string(pod.UID)
	}
	e, err := cluster.ServeNamedEcho(c.External.NSPath, "external", []int{echoPort}, nil)
	must(t, err)
	t.Cleanup(e.Close)
	svc := &corev1.Service{}
	must(t, c.Client.Get(ctx, client.ObjectKey{Namespace: appNamespace, Name: "web"}, svc))
	w.clusterIP = netip.MustParseAddr(svc.Spec.ClusterIP)
	w.waitWorkload(t)
	return w
}

// taintControlPlane taints the node as kubeadm's control plane: the scheduler puts no Pod there.
func taintControlPlane(t *testing.T, c *cluster.Cluster, name string) {
	ctx := context.Background()
	var node corev1.Node
	must(t, c.Client.Get(ctx, client.ObjectKey{Name: name}, &node))
	patch := client.MergeFrom(node.DeepCopy())
	node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule})
	must(t, c.Client.Patch(ctx, &node, patch))
}
