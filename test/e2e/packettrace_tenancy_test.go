//go:build linux

package e2e

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/scheme"
	"github.com/winnet-io/winnet/test/e2e/cluster"
)

// TestPacketTraceByTenant: a user whose only rights are a Role in the Pods' namespace (traces, and read on
// its Pods, Services and NetworkPolicies), impersonated by the admin, traces its own Pod's packet end to
// end; the chart's admission policy refuses the same user a trace that sends as another namespace's Pod, or
// one of Cluster disclosure, and nothing is created.
func TestPacketTraceByTenant(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	const user = "tenant-tracer"
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.PodNamespace, Name: user}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{networkv1alpha1.GroupVersion.Group}, Resources: []string{"packettraces"}, Verbs: []string{"*"}},
		{APIGroups: []string{""}, Resources: []string{"pods", "services"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: []string{"get", "list", "watch"}},
	}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.PodNamespace, Name: user},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}}
	g.Expect(c.Client.Create(ctx, role)).To(Succeed())
	t.Cleanup(func() { _ = c.Client.Delete(context.Background(), role) })
	g.Expect(c.Client.Create(ctx, binding)).To(Succeed())
	t.Cleanup(func() { _ = c.Client.Delete(context.Background(), binding) })
	cfg := rest.CopyConfig(c.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	s, err := scheme.New()
	g.Expect(err).NotTo(HaveOccurred())
	tenant, err := client.New(cfg, client.Options{Scheme: s})
	g.Expect(err).NotTo(HaveOccurred())

	tr := runTraceAs(t, tenant, "trace-by-tenant", networkv1alpha1.PacketTraceDestination{Pod: &networkv1alpha1.ObjectReference{Name: "pod-b1"}},
		networkv1alpha1.PacketTracePacket{Protocol: networkv1alpha1.PacketTraceICMP}, "pod-a1", "")
	g.Expect(tr.Status.Verdict).To(Equal(networkv1alpha1.PacketTraceDelivered), hopsText(tr))
	g.Expect(tr.Spec.Disclosure).To(Equal(networkv1alpha1.PacketTraceDisclosureNamespace))
	g.Expect(observations(tr, "node-b")).To(ContainElement(ContainSubstring("Pod "+cluster.PodNamespace+"/pod-b1")), "its own namespace's Pod is named")
	got := &networkv1alpha1.PacketTrace{}
	g.Expect(tenant.Get(ctx, client.ObjectKeyFromObject(tr), got)).To(Succeed(), "the tenant reads its trace")

	for name, spec := range map[string]networkv1alpha1.PacketTraceSpec{
		"trace-as-another-namespace": {Source: networkv1alpha1.PacketTraceSource{Pod: networkv1alpha1.ObjectReference{Namespace: "kube-system", Name: "coredns"}},
			Destination: networkv1alpha1.PacketTraceDestination{IP: networkv1alpha1.IPv4Address(pods["pod-b1"].IP.String())}},
		"trace-cluster-wide": {Source: networkv1alpha1.PacketTraceSource{Pod: networkv1alpha1.ObjectReference{Name: "pod-a1"}},
			Destination: networkv1alpha1.PacketTraceDestination{IP: networkv1alpha1.IPv4Address(pods["pod-b1"].IP.String())},
			Disclosure:  networkv1alpha1.PacketTraceDisclosureCluster},
	} {
		spec.Packet = networkv1alpha1.PacketTracePacket{Protocol: networkv1alpha1.PacketTraceICMP}
		refused := &networkv1alpha1.PacketTrace{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.PodNamespace, Name: name}, Spec: spec}
		err := tenant.Create(ctx, refused)
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%s: refused, got %v", name, err)
		g.Expect(err.Error()).To(ContainSubstring("winnet-packettrace-tenancy"))
		g.Expect(apierrors.IsNotFound(c.Client.Get(ctx, client.ObjectKeyFromObject(refused), &networkv1alpha1.PacketTrace{}))).To(BeTrue(), "%s was not created", name)
	}
}
