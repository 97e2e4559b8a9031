//go:build !windows

package helm

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/egress"
	"github.com/winnet-io/winnet/test/framework"
)

// testEgressTenancy: a tenant whose only rights are a Role in their namespace (every verb on Pods)
// cannot create, change or read Egresses (so not which node holds one), cannot read the agents' Egress
// Leases nor label their namespace, and a Pod they label as an Egress's podSelector asks is not selected
// when the Egress's namespaceSelector excludes their namespace: the set the agents compute (egress.Applies,
// from the Pod's and the namespace's labels as the API server stores them) does not hold it.
func testEgressTenancy(ctx context.Context, t *testing.T, server *framework.APIServer, admin client.Client) {
	g := NewWithT(t)
	const tenantNS, user = "egress-tenant", "mallory"
	g.Expect(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenantNS, Labels: map[string]string{"team": "marketing"}}})).To(Succeed())
	grant(ctx, g, admin, tenantNS, user, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"*"}})
	mallory := impersonating(t, server, user)

	eg := &networkv1alpha1.Egress{ObjectMeta: metav1.ObjectMeta{Name: "finance-billing"}, Spec: networkv1alpha1.EgressSpec{
		PodSelector:       networkv1alpha1.LabelSelector{MatchLabels: map[string]networkv1alpha1.LabelValue{"app": "billing"}},
		NamespaceSelector: networkv1alpha1.LabelSelector{MatchLabels: map[string]networkv1alpha1.LabelValue{"team": "finance"}},
		EgressIP:          "192.168.10.200",
	}}
	g.Expect(admin.Create(ctx, eg.DeepCopy())).To(Succeed())
	t.Cleanup(func() { _ = admin.Delete(context.Background(), eg) })

	forbidden := func(err error) bool { return apierrors.IsForbidden(err) }
	own := eg.DeepCopy()
	own.Name = "mallorys-own"
	g.Expect(mallory.Create(ctx, own)).To(Satisfy(forbidden), "create an Egress")
	g.Expect(mallory.Get(ctx, client.ObjectKeyFromObject(eg), &networkv1alpha1.Egress{})).To(Satisfy(forbidden), "read an Egress (and the node holding it)")
	g.Expect(mallory.List(ctx, &networkv1alpha1.EgressList{})).To(Satisfy(forbidden), "list Egresses")
	g.Expect(mallory.Patch(ctx, eg.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"namespaceSelector":{"matchLabels":{"team":"marketing"}}}}`)))).
		To(Satisfy(forbidden), "widen an Egress's namespaceSelector")
	g.Expect(mallory.Status().Patch(ctx, eg.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"status":{"node":"win-a"}}`)))).
		To(Satisfy(forbidden), "assign an Egress")
	g.Expect(mallory.List(ctx, &coordinationv1.LeaseList{}, client.InNamespace(ns))).To(Satisfy(forbidden), "read the agents' Egress Leases")
	g.Expect(mallory.Patch(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenantNS}},
		client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"finance"}}}`)))).To(Satisfy(forbidden), "label their namespace as the Egress selects")

	// Their Pod, labelled as the Egress's podSelector asks.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: "imposter", Labels: map[string]string{"app": "billing"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}
	g.Expect(mallory.Create(ctx, pod)).To(Succeed())
	stored, storedNS, stored2 := &corev1.Pod{}, &corev1.Namespace{}, &networkv1alpha1.Egress{}
	g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(pod), stored)).To(Succeed())
	g.Expect(admin.Get(ctx, client.ObjectKey{Name: tenantNS}, storedNS)).To(Succeed())
	g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(eg), stored2)).To(Succeed())
	compiled, err := egress.Compile(stored2)
	g.Expect(err).NotTo(HaveOccurred())
	_, selected := egress.Applies([]egress.Compiled{compiled}, labels.Set(stored.Labels), labels.Set(storedNS.Labels))
	g.Expect(selected).To(BeFalse(), "a Pod of a namespace the Egress's namespaceSelector excludes is not selected, whatever its labels")
	// The same Pod in a namespace the Egress selects would be: the check above is not vacuous.
	_, selected = egress.Applies([]egress.Compiled{compiled}, labels.Set(stored.Labels), labels.Set{"team": "finance"})
	g.Expect(selected).To(BeTrue())
}
