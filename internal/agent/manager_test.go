//go:build !windows

package agent_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/agent"
	"github.com/winnet-io/winnet/test/framework"
)

func TestOptionsRequireNodeName(t *testing.T) {
	g := NewWithT(t)
	g.Expect(agent.Options{}.Validate()).To(MatchError(ContainSubstring("--node-name")))
	g.Expect(agent.Options{NodeName: "win-node-1"}.Validate()).To(Succeed())
	g.Expect(agent.Options{NodeName: strings.Repeat("n", 216)}.Validate()).To(Succeed())
	g.Expect(agent.Options{NodeName: strings.Repeat("n", 217)}.Validate()).To(MatchError(ContainSubstring("at most 216")),
		"a PodEndpoint's name <node>.<Pod UID> must fit 253 characters")
}

// TestManagerSeesOnlyItsNode starts the agent's manager for node-a against a real API server holding
// objects of node-a and node-b, and checks what its cache holds.
func TestManagerSeesOnlyItsNode(t *testing.T) {
	g := NewWithT(t)
	server, err := framework.StartAPIServer()
	if err != nil {
		t.Fatalf("this test needs a real kube-apiserver: %v", err)
	}
	t.Cleanup(func() { _ = server.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	for _, n := range []struct {
		node   string
		cidr   networkv1alpha1.CIDR
		nodeIP networkv1alpha1.IPAddress
		podIP  networkv1alpha1.InterfaceAddress
	}{
		{"node-a", "10.244.1.0/24", "192.168.1.1", "10.244.1.5/24"},
		{"node-b", "10.244.2.0/24", "192.168.1.2", "10.244.2.5/24"},
	} {
		node := n.node
		objs := []client.Object{
			&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}},
			&networkv1alpha1.WindowsNodeNetwork{
				ObjectMeta: metav1.ObjectMeta{Name: node},
				Spec:       networkv1alpha1.WindowsNodeNetworkSpec{PodCIDRs: []networkv1alpha1.CIDR{n.cidr}},
			},
			&networkv1alpha1.RemoteSubnetRoute{
				ObjectMeta: metav1.ObjectMeta{Name: node},
				Spec: networkv1alpha1.RemoteSubnetRouteSpec{
					NodeName: node, NodeIP: n.nodeIP,
					PodCIDRs: []networkv1alpha1.CIDR{n.cidr},
				},
			},
			&corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "web-" + node, Namespace: "default"},
				Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "web", Image: "web"}}},
			},
			&networkv1alpha1.PodEndpoint{
				ObjectMeta: metav1.ObjectMeta{Name: "web-" + node, Namespace: "default"},
				Spec: networkv1alpha1.PodEndpointSpec{
					PodName: "web-" + node, PodUID: "uid-" + node, NodeName: node, SandboxID: "sandbox-" + node,
					IPs: []networkv1alpha1.InterfaceAddress{n.podIP},
					MAC: "02:42:0a:f4:01:05",
				},
			},
		}
		for _, obj := range objs {
			g.Expect(server.Client.Create(ctx, obj)).To(Succeed(), "creating %T %s", obj, obj.GetName())
		}
	}

	// What the API server answers the agent, by path: its built-in kinds in protobuf.
	cfg := rest.CopyConfig(server.Config)
	var contentTypes sync.Map
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if err == nil {
				contentTypes.Store(req.URL.Path, resp.Header.Get("Content-Type"))
			}
			return resp, err
		})
	})
	mgr, err := agent.NewManager(cfg, agent.Options{NodeName: "node-a", MetricsBindAddress: "0", HealthProbeBindAddress: "0"})
	g.Expect(err).NotTo(HaveOccurred())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	g.Expect(mgr.GetCache().WaitForCacheSync(ctx)).To(BeTrue())

	names := func(list client.ObjectList) []string {
		g.Expect(mgr.GetCache().List(ctx, list)).To(Succeed())
		items, err := meta.ExtractList(list)
		g.Expect(err).NotTo(HaveOccurred())
		var out []string
		for _, item := range items {
			out = append(out, item.(client.Object).GetName())
		}
		return out
	}
	g.Expect(names(&networkv1alpha1.WindowsNodeNetworkList{})).To(ConsistOf("node-a"))
	g.Expect(names(&corev1.NodeList{})).To(ConsistOf("node-a"))
	g.Expect(names(&networkv1alpha1.PodEndpointList{})).To(ConsistOf("web-node-a"))
	g.Expect(names(&corev1.PodList{})).To(ConsistOf("web-node-a"))
	g.Expect(names(&networkv1alpha1.RemoteSubnetRouteList{})).To(ConsistOf("node-a", "node-b"), "every node routes to every other node")

	for _, path := range []string{"/api/v1/pods", "/api/v1/nodes"} {
		ct, ok := contentTypes.Load(path)
		g.Expect(ok).To(BeTrue(), "the agent did not list %s", path)
		g.Expect(ct).To(HavePrefix("application/vnd.kubernetes.protobuf"), "the agent reads %s as %s", path, ct)
	}

	// The API server gives every object written managed fields; no cached one keeps them.
	for _, list := range []client.ObjectList{&networkv1alpha1.WindowsNodeNetworkList{}, &corev1.NodeList{}, &networkv1alpha1.PodEndpointList{},
		&corev1.PodList{}, &networkv1alpha1.RemoteSubnetRouteList{}} {
		g.Expect(mgr.GetCache().List(ctx, list)).To(Succeed())
		items, err := meta.ExtractList(list)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(items).NotTo(BeEmpty())
		for _, item := range items {
			obj := item.(client.Object)
			g.Expect(obj.GetManagedFields()).To(BeEmpty(), "%T %s keeps its managed fields in the cache", obj, obj.GetName())
		}
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
