//go:build linux

package e2e

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/scheme"
	"github.com/winnet-io/winnet/test/e2e/cluster"
	"github.com/winnet-io/winnet/test/framework"
)

// TestAgentCredentials runs as node-a's agent runs: with the kubeconfig the harness gives it (the Helm chart's
// winnet-agent ServiceAccount, RBAC and admission policy, a token bound to Node node-a). The real API server
// knows it as winnet-agent of node-a, refuses it node-b's WindowsNodeNetwork and PodEndpoints and any change
// to its own WindowsNodeNetwork's spec, while the agent keeps doing its job with the same credentials: a Pod
// added on node-a gets its network and its PodEndpoint, which only the agent writes.
func TestAgentCredentials(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	a := node("node-a")
	cfg, err := clientcmd.BuildConfigFromFlags("", a.AgentKubeconfig())
	g.Expect(err).NotTo(HaveOccurred())
	s, err := scheme.New()
	g.Expect(err).NotTo(HaveOccurred())
	agentA, err := client.New(cfg, client.Options{Scheme: s})
	g.Expect(err).NotTo(HaveOccurred())

	review, err := kubernetes.NewForConfigOrDie(cfg).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(review.Status.UserInfo.Username).To(Equal("system:serviceaccount:" + cluster.AgentNamespace + ":" + cluster.AgentServiceAccount))
	g.Expect(review.Status.UserInfo.Extra).To(HaveKeyWithValue("authentication.kubernetes.io/node-name", authenticationv1.ExtraValue{"node-a"}))

	refused := func(err error, message string) {
		t.Helper()
		g.Expect(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)).To(BeTrue(), "refused, got %v", err)
		g.Expect(err.Error()).To(ContainSubstring(message))
	}

	// node-b's WindowsNodeNetwork: neither its status nor its finalizers.
	wb := &networkv1alpha1.WindowsNodeNetwork{}
	g.Expect(agentA.Get(ctx, client.ObjectKey{Name: "node-b"}, wb)).To(Succeed(), "the agent may read other nodes' networks")
	before := wb.DeepCopy()
	meta.SetStatusCondition(&wb.Status.Conditions, metav1.Condition{Type: networkv1alpha1.ReadyCondition, Status: metav1.ConditionFalse,
		Reason: "Forged", Message: "written by node-a's agent"})
	refused(agentA.Status().Patch(ctx, wb, client.MergeFrom(before)), "winnet-agent of node node-a may write only WindowsNodeNetwork node-a, not node-b")
	wb = before.DeepCopy()
	wb.Finalizers = nil
	refused(agentA.Patch(ctx, wb, client.MergeFrom(before)), "winnet-agent of node node-a may write only WindowsNodeNetwork node-a, not node-b")

	// Its own WindowsNodeNetwork: the status yes (the agent writes it), the spec no.
	wa := &networkv1alpha1.WindowsNodeNetwork{}
	g.Expect(agentA.Get(ctx, client.ObjectKey{Name: "node-a"}, wa)).To(Succeed())
	beforeA := wa.DeepCopy()
	wa.Spec.SNAT.ExcludeCIDRs = append(wa.Spec.SNAT.ExcludeCIDRs, "203.0.113.0/24")
	refused(agentA.Patch(ctx, wa, client.MergeFrom(beforeA)), "winnet-agent of node node-a may change only the status and the finalizers of")

	// node-b's PodEndpoints: not its Pod's, not a new one.
	pb, err := framework.PodEndpointOf(ctx, agentA, cluster.PodNamespace, "pod-b1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pb.Name).To(Equal("node-b."+pb.Spec.PodUID), "named <node>.<Pod UID>")
	beforeB := pb.DeepCopy()
	pb.Status.Conditions = nil
	notB := "may write only PodEndpoints whose spec.nodeName is node-a, not PodEndpoint default/" + pb.Name
	refused(agentA.Status().Patch(ctx, pb, client.MergeFrom(beforeB)), notB)
	refused(agentA.Delete(ctx, beforeB.DeepCopy()), notB)
	forged := &networkv1alpha1.PodEndpoint{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.PodNamespace, Name: "node-b.forged"}, Spec: *beforeB.Spec.DeepCopy()}
	forged.Spec.PodUID = "forged"
	refused(agentA.Create(ctx, forged), "may write only PodEndpoints whose spec.nodeName is node-a, not PodEndpoint default/node-b.forged")
	// Nor can it take a name first: neither node-b's name for a Pod (the Pod's name, as agents before
	// <node>.<Pod UID> named them), nor one under node-b's prefix, even recorded for node-a.
	for _, name := range []string{"pod-b2", beforeB.Name} {
		squat := &networkv1alpha1.PodEndpoint{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.PodNamespace, Name: name}, Spec: *beforeB.Spec.DeepCopy()}
		squat.Spec.NodeName, squat.Spec.PodName = "node-a", name
		refused(agentA.Create(ctx, squat), "may create only PodEndpoints named node-a.<spec.podUID>, not default/"+name)
	}
	pb, err = framework.PodEndpointOf(ctx, c.Client, cluster.PodNamespace, "pod-b1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(meta.IsStatusConditionTrue(pb.Status.Conditions, networkv1alpha1.ReadyCondition)).To(BeTrue(), "node-b's PodEndpoint is untouched")

	// Meanwhile node-a's agent does its job with these credentials: a new Pod gets its network and its
	// PodEndpoint (AddPod waits for it Ready), and the node's network stays Ready.
	p, err := c.AddPod(ctx, a, "creds-a", readyTimeout)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = c.DeletePod(context.Background(), p) })
	g.Expect(c.WaitReady(ctx, converge)).To(Succeed())
}
