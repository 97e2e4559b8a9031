//go:build !windows

// envtest does not compile for windows in controller-runtime v0.25 (see LIBS.md).

package servedcrd_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	cnpv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"
	"sigs.k8s.io/yaml"

	winnetscheme "github.com/winnet-io/winnet/internal/scheme"
	"github.com/winnet-io/winnet/internal/servedcrd"
	"github.com/winnet-io/winnet/test/framework"
)

// crdRules are the rules of the generated agent ClusterRole (config/rbac/agent) that name the
// ClusterNetworkPolicy CRD or the policies: what the Kind may read in a cluster.
func crdRules(t *testing.T) []rbacv1.PolicyRule {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(framework.RepoRoot(), "config", "rbac", "agent", "role.yaml"))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	role := &rbacv1.ClusterRole{}
	NewWithT(t).Expect(yaml.Unmarshal(b, role)).To(Succeed())
	var out []rbacv1.PolicyRule
	for _, r := range role.Rules {
		for _, res := range r.Resources {
			if res == "customresourcedefinitions" || res == "clusternetworkpolicies" {
				out = append(out, r)
				break
			}
		}
	}
	NewWithT(t).Expect(out).To(HaveLen(2))
	return out
}

// served records what the Kind tells a controller.
type served struct {
	mu     sync.Mutex
	events []bool
}

func (s *served) add(b bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, b)
}

func (s *served) get() []bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]bool(nil), s.events...)
}

// TestKindFollowsTheCRD: with the agent's generated RBAC rules only, a Kind started before the
// ClusterNetworkPolicy CRD exists decides it is not served; the CRD installed, it caches the
// policies and the controller gets their events; the CRD's version unserved, then served again, it
// stops then starts again; the CRD deleted, it stops. The server is the test's own.
func TestKindFollowsTheCRD(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := framework.StartAPIServerWith(framework.APIServerOptions{OmitCRDFiles: []string{framework.ClusterNetworkPolicyCRDFile}})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stopping the API server: %v", err)
		}
	})
	scheme, err := winnetscheme.New()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(apiextensionsv1.AddToScheme(scheme)).To(Succeed())
	admin, err := client.New(s.Config, client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())

	// A user with the agent's rules for the CRD and the policies, and nothing else.
	user, err := s.Env.ControlPlane.AddUser(envtest.User{Name: "crd-follower"}, s.Config)
	g.Expect(err).NotTo(HaveOccurred())
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "crd-follower"}, Rules: crdRules(t)}
	g.Expect(admin.Create(ctx, role)).To(Succeed())
	g.Expect(admin.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "crd-follower"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "crd-follower"}},
	})).To(Succeed())
	restricted, err := client.New(user.Config(), client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() bool {
		return apierrors.IsForbidden(restricted.List(ctx, &apiextensionsv1.CustomResourceDefinitionList{}))
	}).WithTimeout(10*time.Second).Should(BeTrue(), "the rules do not let it list every CRD")

	// A user the rule does not name (an agent whose ClusterRole predates the rule) cannot decide,
	// and the Kind says why.
	stranger, err := s.Env.ControlPlane.AddUser(envtest.User{Name: "crd-stranger"}, s.Config)
	g.Expect(err).NotTo(HaveOccurred())
	sctx, scancel := context.WithCancel(ctx)
	undecided, err := servedcrd.New(servedcrd.Options{
		Config: stranger.Config(), Scheme: scheme, Plural: "clusternetworkpolicies", Object: &cnpv1beta1.ClusterNetworkPolicy{},
		GroupVersionKind: schema.GroupVersionKind{Group: cnpv1beta1.GroupName, Version: "v1beta1", Kind: "ClusterNetworkPolicy"},
	})
	g.Expect(err).NotTo(HaveOccurred())
	sdone := make(chan error, 1)
	go func() { sdone <- undecided.Start(sctx) }()
	g.Eventually(undecided.WatchError).WithTimeout(10*time.Second).Should(Satisfy(apierrors.IsForbidden), "the watch's refusal is kept for the controller to report")
	g.Expect(undecided.Decided()).To(BeFalse())
	scancel()
	g.Expect(<-sdone).To(Succeed())

	k, err := servedcrd.New(servedcrd.Options{
		Config: user.Config(), Scheme: scheme, Plural: "clusternetworkpolicies", Object: &cnpv1beta1.ClusterNetworkPolicy{},
		GroupVersionKind: schema.GroupVersionKind{Group: cnpv1beta1.GroupName, Version: "v1beta1", Kind: "ClusterNetworkPolicy"},
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(k.CRDName()).To(Equal(servedcrd.ClusterNetworkPolicyCRD))
	done := make(chan error, 1)
	go func() { done <- k.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		g.Expect(<-done).To(Succeed())
	})
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	var told served
	g.Expect(k.Source(servedcrd.Watch{
		Handler: &handler.EnqueueRequestForObject{},
		Served:  func(_ workqueue.TypedRateLimitingInterface[reconcile.Request], b bool) { told.add(b) },
	}).Start(ctx, q)).To(Succeed())

	g.Eventually(k.Decided).WithTimeout(10 * time.Second).Should(BeTrue())
	g.Expect(k.Reader()).To(BeNil(), "not served without the CRD")

	// Installed: served, and the policies' events reach the controller.
	_, err = envtest.InstallCRDs(s.Config, envtest.CRDInstallOptions{
		Paths: []string{filepath.Join(framework.CRDBasesDir(), framework.ClusterNetworkPolicyCRDFile)}, ErrorIfPathMissing: true,
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(k.Reader).WithTimeout(10 * time.Second).ShouldNot(BeNil())
	g.Eventually(told.get).WithTimeout(10 * time.Second).Should(Equal([]bool{true}))
	p := &cnpv1beta1.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: cnpv1beta1.ClusterNetworkPolicySpec{
		Tier: cnpv1beta1.AdminTier, Priority: 1, Subject: cnpv1beta1.ClusterNetworkPolicySubject{Namespaces: &metav1.LabelSelector{}},
	}}
	g.Expect(admin.Create(ctx, p)).To(Succeed())
	got := make(chan reconcile.Request, 1)
	go func() {
		r, _ := q.Get()
		got <- r
	}()
	g.Eventually(got).WithTimeout(10 * time.Second).Should(Receive(Equal(reconcile.Request{NamespacedName: client.ObjectKey{Name: "p"}})))
	g.Eventually(func(g Gomega) {
		list := &cnpv1beta1.ClusterNetworkPolicyList{}
		g.Expect(k.Reader().List(ctx, list)).To(Succeed())
		g.Expect(list.Items).To(HaveLen(1))
	}).WithTimeout(10 * time.Second).Should(Succeed())

	// The version unserved, then served again.
	setServed := func(on bool) {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		g.Expect(admin.Get(ctx, client.ObjectKey{Name: servedcrd.ClusterNetworkPolicyCRD}, crd)).To(Succeed())
		for i := range crd.Spec.Versions {
			crd.Spec.Versions[i].Served = on
		}
		g.Expect(admin.Update(ctx, crd)).To(Succeed())
	}
	setServed(false)
	g.Eventually(k.Reader).WithTimeout(10 * time.Second).Should(BeNil())
	g.Eventually(told.get).WithTimeout(10 * time.Second).Should(Equal([]bool{true, false}))
	setServed(true)
	g.Eventually(k.Reader).WithTimeout(10 * time.Second).ShouldNot(BeNil())
	g.Eventually(told.get).WithTimeout(10 * time.Second).Should(Equal([]bool{true, false, true}))

	// Deleted: not served.
	crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: servedcrd.ClusterNetworkPolicyCRD}}
	g.Expect(admin.Delete(ctx, crd)).To(Succeed())
	g.Eventually(k.Reader).WithTimeout(10 * time.Second).Should(BeNil())
	g.Eventually(told.get).WithTimeout(10 * time.Second).Should(Equal([]bool{true, false, true, false}))
	g.Expect(k.Decided()).To(BeTrue())
}
