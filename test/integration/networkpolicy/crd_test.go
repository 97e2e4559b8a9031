//go:build linux

package networkpolicy_test

import (
	"context"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	cnpv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/servedcrd"
	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/simnode"
)

// TestClusterNetworkPolicyCRDInstalledLater: an agent and winnet-controller's status reconciler
// started while the cluster has no ClusterNetworkPolicy CRD realise NetworkPolicies alone; the CRD
// installed (the file the chart ships), a ClusterNetworkPolicy is realised with real packets and
// its condition written, without a restart; the CRD deleted, its flows go and the NetworkPolicy
// stays. The API server is the test's own: no other test sees the CRD come and go.
func TestClusterNetworkPolicyCRDInstalledLater(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	s, err := framework.StartAPIServerWith(framework.APIServerOptions{OmitCRDFiles: []string{framework.ClusterNetworkPolicyCRDFile}})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stopping the test's API server: %v", err)
		}
	})
	crdScheme := runtime.NewScheme()
	g.Expect(apiextensionsv1.AddToScheme(crdScheme)).To(Succeed())
	crds, err := client.New(s.Config, client.Options{Scheme: crdScheme})
	g.Expect(err).NotTo(HaveOccurred())
	crd := &apiextensionsv1.CustomResourceDefinition{}
	err = crds.Get(ctx, client.ObjectKey{Name: servedcrd.ClusterNetworkPolicyCRD}, crd)
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the server starts without the CRD: %v", err)

	u := simnode.NewUnderlay(t, netip.MustParsePrefix("192.168.87.0/24"))
	a := framework.StartPodNode(t, s, u, "cnpcrd-a", "192.168.87.11/24", "10.244.87.0/24", converge)
	a.OVS.ExactMatchDatapath(t)
	startStatusReconciler(t, s)

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cnpcrd-x", Labels: map[string]string{"team": "x"}}}
	g.Expect(s.Client.Create(ctx, ns)).To(Succeed())
	web := a.AddPod(t, "web", framework.TestPodOptions{Namespace: ns.Name, Labels: map[string]string{"app": "web"}, Ports: httpPorts})
	clientPod := a.AddPod(t, "client", framework.TestPodOptions{Namespace: ns.Name, Labels: map[string]string{"app": "client"}})
	framework.Serve(t, web.NS, "web", httpPort)
	framework.Serve(t, web.NS, "web", otherPort)
	webHTTP, webOther := netip.AddrPortFrom(web.IP, httpPort), netip.AddrPortFrom(web.IP, otherPort)

	// Without the CRD, NetworkPolicies are realised: web admits HTTP only.
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "web-http"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{
				Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(httpPort)),
			}}}},
		},
	}
	g.Expect(s.Client.Create(ctx, np)).To(Succeed())
	expectRefused(t, clientPod.NS, "tcp4", webOther)
	expectAllowed(t, clientPod.NS, "tcp4", webHTTP, "web")

	// The CRD installed after the agent started: an Admin Deny of HTTP to team x is realised.
	installed := time.Now()
	_, err = envtest.InstallCRDs(s.Config, envtest.CRDInstallOptions{
		Paths: []string{filepath.Join(framework.CRDBasesDir(), framework.ClusterNetworkPolicyCRDFile)}, ErrorIfPathMissing: true,
	})
	g.Expect(err).NotTo(HaveOccurred())
	deny := &cnpv1beta1.ClusterNetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "deny-http"},
		Spec: cnpv1beta1.ClusterNetworkPolicySpec{
			Tier: cnpv1beta1.AdminTier, Priority: 10,
			Subject: cnpv1beta1.ClusterNetworkPolicySubject{Namespaces: teamNamespaces("x")},
			Ingress: []cnpv1beta1.ClusterNetworkPolicyIngressRule{{
				Action:    cnpv1beta1.ClusterNetworkPolicyRuleActionDeny,
				From:      []cnpv1beta1.ClusterNetworkPolicyIngressPeer{{Namespaces: teamNamespaces("")}},
				Protocols: tcpPort(httpPort),
			}},
		},
	}
	g.Expect(s.Client.Create(ctx, deny)).To(Succeed())
	expectRefused(t, clientPod.NS, "tcp4", webHTTP)
	t.Logf("ClusterNetworkPolicy refusing traffic %v after its CRD was installed", time.Since(installed))
	g.Eventually(func(g Gomega) *metav1.Condition {
		p := &cnpv1beta1.ClusterNetworkPolicy{}
		g.Expect(s.Client.Get(ctx, client.ObjectKeyFromObject(deny), p)).To(Succeed())
		return meta.FindStatusCondition(p.Status.Conditions, networkv1alpha1.RealisedCondition)
	}).WithTimeout(converge).Should(And(Not(BeNil()), HaveField("Status", metav1.ConditionTrue), HaveField("Reason", networkv1alpha1.RealisedReason)),
		"winnet-controller writes the policy's condition")
	expectRefused(t, clientPod.NS, "tcp4", webOther)

	// The CRD deleted (and its objects with it): the Admin Deny's flows go, the NetworkPolicy stays.
	deleted := time.Now()
	g.Expect(crds.Get(ctx, client.ObjectKey{Name: servedcrd.ClusterNetworkPolicyCRD}, crd)).To(Succeed())
	g.Expect(crds.Delete(ctx, crd)).To(Succeed())
	expectAllowed(t, clientPod.NS, "tcp4", webHTTP, "web")
	t.Logf("Traffic admitted again %v after the CRD's deletion", time.Since(deleted))
	expectRefused(t, clientPod.NS, "tcp4", webOther)
	g.Eventually(func() bool {
		return apierrors.IsNotFound(crds.Get(ctx, client.ObjectKey{Name: servedcrd.ClusterNetworkPolicyCRD}, crd))
	}).WithTimeout(converge).Should(BeTrue(), "the CRD is gone")
	g.Eventually(func(g Gomega) {
		wnn := &networkv1alpha1.WindowsNodeNetwork{}
		g.Expect(s.Client.Get(ctx, client.ObjectKey{Name: a.Name}, wnn)).To(Succeed())
		g.Expect(wnn.Status.NetworkPolicies.ClusterNetworkPolicies).To(BeEmpty())
		g.Expect(wnn.Status.NetworkPolicies.ClusterNetworkPolicyReport).To(BeNil())
	}).WithTimeout(converge).Should(Succeed(), "the node reports no ClusterNetworkPolicy")

	// Installed again: realised again, as the first time.
	_, err = envtest.InstallCRDs(s.Config, envtest.CRDInstallOptions{
		Paths: []string{filepath.Join(framework.CRDBasesDir(), framework.ClusterNetworkPolicyCRDFile)}, ErrorIfPathMissing: true,
	})
	g.Expect(err).NotTo(HaveOccurred())
	deny.ResourceVersion, deny.UID = "", ""
	g.Expect(s.Client.Create(ctx, deny)).To(Succeed())
	expectRefused(t, clientPod.NS, "tcp4", webHTTP)
}
