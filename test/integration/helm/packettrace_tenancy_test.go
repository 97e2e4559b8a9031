//go:build !windows

package helm

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	winnetscheme "github.com/winnet-io/winnet/internal/scheme"
	"github.com/winnet-io/winnet/test/framework"
)

// tenancyPolicy is the chart's admission policy on PacketTrace creators.
const tenancyPolicy = "winnet-packettrace-tenancy"

// beRefusedByTenancy matches a refusal of the chart's PacketTrace tenancy policy carrying message.
func beRefusedByTenancy(message string) OmegaMatcher { return beDeniedBy(tenancyPolicy, message) }

// impersonating returns a client that acts as user (no groups but system:authenticated), through the
// admin's right to impersonate: what a tenant's own kubeconfig would do.
func impersonating(t *testing.T, server *framework.APIServer, user string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(server.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	scheme, err := winnetscheme.New()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// grant gives user the verbs on the resources in namespace (a Role and its RoleBinding).
func grant(ctx context.Context, g Gomega, admin client.Client, namespace, user string, rules ...rbacv1.PolicyRule) {
	name := "test-" + user
	g.Expect(admin.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Rules: rules})).To(Succeed())
	g.Expect(admin.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}})).To(Succeed())
}

var (
	tracesAll = rbacv1.PolicyRule{APIGroups: []string{networkv1alpha1.GroupVersion.Group}, Resources: []string{"packettraces"}, Verbs: []string{"*"}}
	podsRead  = rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods", "services"}, Verbs: []string{"get", "list", "watch"}}
	npRead    = rbacv1.PolicyRule{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: []string{"get", "list", "watch"}}
)

func newTrace(namespace, name string, src networkv1alpha1.ObjectReference, dst networkv1alpha1.PacketTraceDestination, level networkv1alpha1.PacketTraceDisclosure) *networkv1alpha1.PacketTrace {
	return &networkv1alpha1.PacketTrace{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: networkv1alpha1.PacketTraceSpec{Source: networkv1alpha1.PacketTraceSource{Pod: src}, Destination: dst,
			Packet: networkv1alpha1.PacketTracePacket{Protocol: networkv1alpha1.PacketTraceTCP, DstPort: 80}, Disclosure: level}}
}

// testPacketTraceTenancy proves, with users impersonated by the admin whose only rights are Roles in
// their namespaces, that the chart's tenancy policy refuses a trace that would send as another
// namespace's Pod or name what its creator may not read, and admits the creator's own traces; and that
// an agent writes a hop only into a trace whose path holds its node.
func testPacketTraceTenancy(ctx context.Context, t *testing.T, server *framework.APIServer, admin client.Client, agentA, agentB client.Client) {
	g := NewWithT(t)
	for _, n := range []string{"tenant-x", "tenant-y", "shared"} {
		g.Expect(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}})).To(Succeed())
	}
	// alice: the Role of a namespace's user who traces: traces, and read on Pods, Services and
	// NetworkPolicies of tenant-x. bob: the Role, without NetworkPolicies.
	grant(ctx, g, admin, "tenant-x", "alice", tracesAll, podsRead, npRead)
	grant(ctx, g, admin, "tenant-y", "bob", tracesAll, podsRead)
	alice, bob := impersonating(t, server, "alice"), impersonating(t, server, "bob")
	own := networkv1alpha1.ObjectReference{Name: "client"}
	toOwnPod := networkv1alpha1.PacketTraceDestination{Pod: &networkv1alpha1.ObjectReference{Name: "server"}}
	ns, cl := networkv1alpha1.PacketTraceDisclosureNamespace, networkv1alpha1.PacketTraceDisclosureCluster

	// The policy may take a moment to become active after the install.
	g.Eventually(func() error {
		return alice.Create(ctx, newTrace("tenant-x", "as-default", networkv1alpha1.ObjectReference{Namespace: "default", Name: "pod-a1"}, toOwnPod, ns))
	}, 10*time.Second, 200*time.Millisecond).Should(beRefusedByTenancy(
		"a PacketTrace sends only as a Pod of its own namespace: spec.source.pod.namespace is default, the trace is in tenant-x"))

	cases := []struct {
		name    string
		c       client.Client
		tr      *networkv1alpha1.PacketTrace
		refused string // "" when admitted
	}{
		{"to another namespace's Pod", alice, newTrace("tenant-x", "to-default-pod", own,
			networkv1alpha1.PacketTraceDestination{Pod: &networkv1alpha1.ObjectReference{Namespace: "default", Name: "pod-b2"}}, ns),
			"spec.destination.pod is in namespace default, whose Pods alice may not get"},
		{"to another namespace's Service", alice, newTrace("tenant-x", "to-default-svc", own,
			networkv1alpha1.PacketTraceDestination{Service: &networkv1alpha1.ObjectReference{Namespace: "default", Name: "kubernetes"}}, ns),
			"spec.destination.service is in namespace default, whose Services alice may not get"},
		{"Cluster disclosure", alice, newTrace("tenant-x", "cluster-wide", own, toOwnPod, cl),
			"spec.disclosure Cluster names any Pod, NetworkPolicy or ClusterNetworkPolicy: alice needs get"},
		{"without the right to read its namespace's NetworkPolicies", bob, newTrace("tenant-y", "no-np-rights", own, toOwnPod, ns),
			"spec.disclosure Namespace names the Pods and NetworkPolicies of namespace tenant-y: bob needs get on pods and networkpolicies there"},
		{"in a namespace it may not create traces in", alice, newTrace("tenant-y", "elsewhere", own, toOwnPod, ns), ""},
		{"its own trace", alice, newTrace("tenant-x", "own", own, toOwnPod, ns), ""},
		{"its own trace to an address", alice, newTrace("tenant-x", "own-ip", own, networkv1alpha1.PacketTraceDestination{IP: "10.244.2.7"}, ""), ""},
		{"the cluster admin's trace of Cluster disclosure", admin, newTrace("tenant-x", "admin-cluster", own,
			networkv1alpha1.PacketTraceDestination{Pod: &networkv1alpha1.ObjectReference{Namespace: "default", Name: "pod-b2"}}, cl), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			err := c.c.Create(ctx, c.tr)
			switch {
			case c.name == "in a namespace it may not create traces in":
				g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "RBAC refuses it: %v", err)
			case c.refused != "":
				g.Expect(err).To(beRefusedByTenancy(c.refused))
				g.Expect(apierrors.IsNotFound(admin.Get(ctx, client.ObjectKeyFromObject(c.tr), &networkv1alpha1.PacketTrace{}))).To(BeTrue(), "nothing was created")
			default:
				g.Expect(err).NotTo(HaveOccurred())
				got := &networkv1alpha1.PacketTrace{}
				g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(c.tr), got)).To(Succeed())
				g.Expect(got.Spec.Disclosure).NotTo(BeEmpty(), "the API server defaults the disclosure")
			}
		})
	}

	t.Run("once granted get on another namespace's Pods, a trace may name one as its destination", func(t *testing.T) {
		g := NewWithT(t)
		grant(ctx, g, admin, "shared", "alice", podsRead)
		g.Eventually(func() error {
			return alice.Create(ctx, newTrace("tenant-x", "to-shared", own,
				networkv1alpha1.PacketTraceDestination{Pod: &networkv1alpha1.ObjectReference{Namespace: "shared", Name: "db"}}, ns))
		}, 10*time.Second, 200*time.Millisecond).Should(Succeed())
	})

	t.Run("an agent writes a hop only into a trace whose path holds its node", func(t *testing.T) {
		g := NewWithT(t)
		tr := newTrace("tenant-x", "path", own, toOwnPod, ns)
		g.Expect(admin.Create(ctx, tr)).To(Succeed())
		g.Expect(admin.Status().Patch(ctx, tr, client.RawPatch(types.MergePatchType,
			[]byte(`{"status":{"phase":"Running","tag":5,"sourceNode":"win-a","nodes":["win-a"]}}`)))).To(Succeed())
		hop := func(c client.Client, node string) error {
			u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": networkv1alpha1.GroupVersion.String(), "kind": "PacketTrace",
				"metadata": map[string]any{"name": tr.Name, "namespace": tr.Namespace},
				"status": map[string]any{"hops": []any{map[string]any{"node": node, "observations": []any{
					map[string]any{"component": "Output", "action": "Delivered", "detail": "reported by " + node}}}}}}}
			return c.Status().Patch(ctx, u, client.Apply, client.FieldOwner("winnet-agent-"+node), client.ForceOwnership)
		}
		g.Expect(hop(agentB, "win-b")).To(beDenied("winnet-agent of node win-b may write a hop only into a PacketTrace whose path"))
		g.Expect(hop(agentA, "win-a")).To(Succeed(), "the source node's agent")
	})

	t.Run("control characters are refused in what a trace's status says", func(t *testing.T) {
		g := NewWithT(t)
		tr := &networkv1alpha1.PacketTrace{}
		g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: "tenant-x", Name: "path"}, tr)).To(Succeed())
		for _, patch := range []string{
			`{"status":{"message":"done\u001b[2J"}}`,
			`{"status":{"hops":[{"node":"win-a","observations":[{"component":"Output","action":"Delivered","detail":"x\u009b31m"}]}]}}`,
		} {
			err := admin.Status().Patch(ctx, tr, client.RawPatch(types.MergePatchType, []byte(patch)))
			g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%s: %v", patch, err)
			g.Expect(err.Error()).To(ContainSubstring("should match"))
		}
	})
}
