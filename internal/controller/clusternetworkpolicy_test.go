//go:build !windows

package controller_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	cnpv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/controller"
	"github.com/winnet-io/winnet/internal/servedcrd"
	"github.com/winnet-io/winnet/test/framework"
)

// TestClusterNetworkPolicyCRDInstalledAfterStart: winnet-controller started while the cluster has
// no ClusterNetworkPolicy CRD writes a policy's Realised condition once the CRD is installed, and
// again once it is deleted and installed again, without a restart. The API server is the test's own.
func TestClusterNetworkPolicyCRDInstalledAfterStart(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := framework.StartAPIServerWith(framework.APIServerOptions{OmitCRDFiles: []string{framework.ClusterNetworkPolicyCRDFile}})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stopping the test's API server: %v", err)
		}
	})
	mgr, err := controller.NewManager(s.Config, controller.Options{MetricsBindAddress: "0", HealthProbeBindAddress: "0", Namespace: "default", SeveralPerProcess: true})
	g.Expect(err).NotTo(HaveOccurred())
	mctx, mcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() {
		mcancel()
		if err := <-done; err != nil {
			t.Errorf("winnet-controller: %v", err)
		}
	})
	crdScheme := runtime.NewScheme()
	g.Expect(apiextensionsv1.AddToScheme(crdScheme)).To(Succeed())
	crds, err := client.New(s.Config, client.Options{Scheme: crdScheme})
	g.Expect(err).NotTo(HaveOccurred())

	for round := range 2 {
		_, err = envtest.InstallCRDs(s.Config, envtest.CRDInstallOptions{
			Paths: []string{filepath.Join(framework.CRDBasesDir(), framework.ClusterNetworkPolicyCRDFile)}, ErrorIfPathMissing: true,
		})
		g.Expect(err).NotTo(HaveOccurred())
		p := &cnpv1beta1.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: cnpv1beta1.ClusterNetworkPolicySpec{
			Tier: cnpv1beta1.AdminTier, Priority: 1, Subject: cnpv1beta1.ClusterNetworkPolicySubject{Namespaces: &metav1.LabelSelector{}},
		}}
		g.Expect(s.Client.Create(ctx, p)).To(Succeed())
		// No node reports it (no agent runs): Unknown, Progressing, at its generation.
		g.Eventually(func(g Gomega) *metav1.Condition {
			g.Expect(s.Client.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
			return meta.FindStatusCondition(p.Status.Conditions, networkv1alpha1.RealisedCondition)
		}).WithTimeout(30*time.Second).Should(And(Not(BeNil()), HaveField("Status", metav1.ConditionUnknown),
			HaveField("Reason", networkv1alpha1.ProgressingReason), HaveField("ObservedGeneration", p.Generation)), "round %d", round)

		crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: servedcrd.ClusterNetworkPolicyCRD}}
		g.Expect(crds.Delete(ctx, crd)).To(Succeed())
		g.Eventually(func() bool {
			return apierrors.IsNotFound(crds.Get(ctx, client.ObjectKeyFromObject(crd), crd))
		}).WithTimeout(30*time.Second).Should(BeTrue(), "the CRD is gone")
	}
}
