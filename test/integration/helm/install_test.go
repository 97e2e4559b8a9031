//go:build !windows

// envtest does not compile for windows in controller-runtime v0.25 (see LIBS.md).

package helm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/cluster"
	winnetscheme "github.com/winnet-io/winnet/internal/scheme"
	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/hostcmd"
)

const (
	ns          = "winnet-system"
	nodeNameKey = "authentication.kubernetes.io/node-name"
)

// TestInstallAndLeastPrivilege installs the chart into a real kube-apiserver, checks that every object
// it renders exists, runs winnet-controller as the chart's controller ServiceAccount, and proves that
// an agent token bound to a Pod on node A may write node A's objects and is denied node B's.
func TestInstallAndLeastPrivilege(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 240*time.Second)
	defer cancel()

	// Without the framework's CRDs: the chart's crds/ are what gets installed.
	server, admin := bareAPIServer(g)
	defer func() { g.Expect(server.Stop()).To(Succeed()) }()
	crds := &apiextensionsv1.CustomResourceDefinitionList{}
	g.Expect(admin.List(ctx, crds)).To(Succeed())
	g.Expect(crds.Items).To(BeEmpty())

	out, stderr, err := runHelm(t, "install", "winnet", chartDir(), "--namespace", ns, "--create-namespace",
		"--kubeconfig", server.KubeconfigPath, "--timeout", "60s")
	g.Expect(err).NotTo(HaveOccurred(), "helm install:\n%s%s", out, stderr)
	g.Expect(out).To(ContainSubstring("STATUS: deployed"))
	g.Expect(out).To(ContainSubstring("kubectl get winnet -A"), "NOTES.txt tells how to check the install")

	t.Run("every object of the chart exists", func(t *testing.T) {
		g := NewWithT(t)
		manifest, stderr, err := runHelm(t, "get", "manifest", "winnet", "--namespace", ns, "--kubeconfig", server.KubeconfigPath)
		g.Expect(err).NotTo(HaveOccurred(), stderr)
		var got []string
		for _, o := range splitManifest(t, manifest) {
			got = append(got, o.Kind+"/"+o.Name)
			u := &unstructured.Unstructured{}
			g.Expect(yaml.Unmarshal(o.YAML, &u.Object)).To(Succeed())
			live := &unstructured.Unstructured{}
			live.SetGroupVersionKind(u.GroupVersionKind())
			key := client.ObjectKey{Name: o.Name}
			if o.Namespace != "" {
				key.Namespace = o.Namespace
			}
			g.Expect(admin.Get(ctx, key, live)).To(Succeed(), "%s %s", o.Kind, o.Name)
			g.Expect(live.GetLabels()).To(HaveKeyWithValue("app.kubernetes.io/managed-by", "Helm"))
		}
		g.Expect(got).To(ConsistOf(
			"ServiceAccount/winnet-controller", "ServiceAccount/winnet-agent", "ConfigMap/winnet-agent-config",
			"ClusterRole/winnet-agent", "ClusterRole/winnet-controller", "ClusterRole/winnet-metrics-reader",
			"ClusterRoleBinding/winnet-agent", "ClusterRoleBinding/winnet-controller",
			"Role/winnet-controller", "RoleBinding/winnet-controller", "Role/winnet-agent", "RoleBinding/winnet-agent",
			"DaemonSet/winnet-agent", "Deployment/winnet-controller",
			"ValidatingAdmissionPolicy/winnet-agent-own-node", "ValidatingAdmissionPolicyBinding/winnet-agent-own-node",
			"ValidatingAdmissionPolicy/winnet-agent-events", "ValidatingAdmissionPolicyBinding/winnet-agent-events",
			"ValidatingAdmissionPolicy/winnet-agent-egress-lease", "ValidatingAdmissionPolicyBinding/winnet-agent-egress-lease",
			"ValidatingAdmissionPolicy/winnet-node-flannel-record", "ValidatingAdmissionPolicyBinding/winnet-node-flannel-record",
			"ValidatingAdmissionPolicy/winnet-packettrace-tenancy", "ValidatingAdmissionPolicyBinding/winnet-packettrace-tenancy"))
		// The network-policy-api's CRD, absent from this cluster, is installed from the chart's crds/.
		cnp := &apiextensionsv1.CustomResourceDefinition{}
		g.Expect(admin.Get(ctx, client.ObjectKey{Name: "clusternetworkpolicies.policy.networking.k8s.io"}, cnp)).To(Succeed())
		g.Expect(cnp.Annotations).To(HaveKeyWithValue("policy.networking.k8s.io/bundle-version", "v0.3.0"))
		for _, crd := range []string{"windowsnodenetworks", "remotesubnetroutes", "podendpoints"} {
			c := &apiextensionsv1.CustomResourceDefinition{}
			g.Expect(admin.Get(ctx, client.ObjectKey{Name: crd + ".network.winnet.io"}, c)).To(Succeed(), "the chart installs CRD %s", crd)
			g.Expect(c.Status.Conditions).To(ContainElement(And(
				HaveField("Type", apiextensionsv1.Established), HaveField("Status", apiextensionsv1.ConditionTrue))))
		}
	})

	// Two Windows nodes, and the agent's Pod on each.
	for i, name := range []string{"win-a", "win-b"} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelOSStable: "windows"}},
			Spec: corev1.NodeSpec{PodCIDR: fmt.Sprintf("10.244.%d.0/24", i+1), PodCIDRs: []string{fmt.Sprintf("10.244.%d.0/24", i+1)}}}
		g.Expect(admin.Create(ctx, node)).To(Succeed())
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("192.168.10.%d", 11+i)}}
		g.Expect(admin.Status().Update(ctx, node)).To(Succeed())
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "winnet-agent-" + name, Namespace: ns},
			Spec: corev1.PodSpec{NodeName: name, ServiceAccountName: "winnet-agent",
				Containers: []corev1.Container{{Name: "winnet-agent", Image: "ghcr.io/winnet-io/winnet-windows:test"}}}}
		g.Expect(admin.Create(ctx, pod)).To(Succeed())
	}
	agentA := agentClient(ctx, t, server, "win-a")
	agentB := agentClient(ctx, t, server, "win-b")
	controllerToken := requestToken(ctx, t, server, "winnet-controller", nil)

	// It runs until the test ends: the flannel record subtest below needs it too.
	runController(ctx, t, server, controllerToken)
	t.Run("winnet-controller as its ServiceAccount derives both nodes' objects", func(t *testing.T) {
		g := NewWithT(t)
		for _, name := range []string{"win-a", "win-b"} {
			g.Eventually(func() error {
				return admin.Get(ctx, client.ObjectKey{Name: name}, &networkv1alpha1.WindowsNodeNetwork{})
			}, 30*time.Second, 200*time.Millisecond).Should(Succeed(), "WindowsNodeNetwork %s", name)
			g.Eventually(func() error {
				return admin.Get(ctx, client.ObjectKey{Name: name}, &networkv1alpha1.RemoteSubnetRoute{})
			}, 10*time.Second, 200*time.Millisecond).Should(Succeed(), "RemoteSubnetRoute %s", name)
		}
		lease := &coordinationv1.LeaseList{}
		g.Expect(admin.List(ctx, lease, client.InNamespace(ns))).To(Succeed())
		g.Expect(lease.Items).NotTo(BeEmpty(), "the leader election Lease lives in the release namespace")
	})

	t.Run("the controller's ServiceAccount has what it needs and no more", func(t *testing.T) {
		g := NewWithT(t)
		c := tokenClient(t, server, controllerToken)
		cs := kubernetes.NewForConfigOrDie(restConfigFor(server, controllerToken))
		w, err := cs.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{})
		g.Expect(err).NotTo(HaveOccurred(), "watch Nodes")
		g.Eventually(w.ResultChan()).Should(Receive())
		w.Stop()
		g.Expect(c.Create(ctx, &networkv1alpha1.WindowsNodeNetwork{ObjectMeta: metav1.ObjectMeta{Name: "win-manual"},
			Spec: networkv1alpha1.WindowsNodeNetworkSpec{PodCIDRs: []networkv1alpha1.CIDR{"10.244.9.0/24"}}})).To(Succeed())
		rsr := &networkv1alpha1.RemoteSubnetRoute{ObjectMeta: metav1.ObjectMeta{Name: "datacenter"},
			Spec: networkv1alpha1.RemoteSubnetRouteSpec{PodCIDRs: []networkv1alpha1.CIDR{"172.20.0.0/16"}, NodeIP: "192.168.10.99"}}
		g.Expect(c.Create(ctx, rsr)).To(Succeed())
		g.Expect(c.Status().Patch(ctx, rsr, client.RawPatch(types.MergePatchType, []byte(`{"status":{"observedGeneration":1}}`)))).To(Succeed())
		err = c.Create(ctx, podEndpoint("default", "stolen", "win-a"))
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "the controller writes no PodEndpoints: %v", err)
	})

	// A Node that is neither winnet's nor flannel's, for the writes the chart's identities are refused.
	target := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "linux-target", Labels: map[string]string{corev1.LabelOSStable: "linux"},
		Annotations: map[string]string{"example.com/owner": "someone else"}},
		Spec: corev1.NodeSpec{PodCIDR: "10.244.50.0/24", PodCIDRs: []string{"10.244.50.0/24"}}}
	g.Expect(admin.Create(ctx, target)).To(Succeed())
	target.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.10.50"}}
	g.Expect(admin.Status().Update(ctx, target)).To(Succeed())

	t.Run("winnet-controller as its ServiceAccount publishes and withdraws the flannel records through nodes/status", func(t *testing.T) {
		g := NewWithT(t)
		interop := &networkv1alpha1.FlannelInterop{ObjectMeta: metav1.ObjectMeta{Name: "default"},
			Spec: networkv1alpha1.FlannelInteropSpec{VNI: 4096, AnnotationPrefix: networkv1alpha1.DefaultFlannelAnnotationPrefix}}
		g.Expect(admin.Create(ctx, interop)).To(Succeed())
		for i, name := range []string{"win-a", "win-b"} {
			g.Eventually(func(g Gomega) {
				k := &corev1.Node{}
				g.Expect(admin.Get(ctx, client.ObjectKey{Name: name}, k)).To(Succeed())
				g.Expect(k.Annotations).To(HaveKeyWithValue("flannel.alpha.coreos.com/public-ip", fmt.Sprintf("192.168.10.%d", 11+i)))
				g.Expect(k.Annotations).To(HaveKeyWithValue(cluster.FlannelRecordAnnotation, "flannel.alpha.coreos.com"))
			}, 30*time.Second, 200*time.Millisecond).Should(Succeed(), "winnet-controller publishes the flannel record of %s", name)
		}
		g.Expect(admin.Delete(ctx, interop)).To(Succeed())
		for _, name := range []string{"win-a", "win-b"} {
			g.Eventually(func(g Gomega) {
				k := &corev1.Node{}
				g.Expect(admin.Get(ctx, client.ObjectKey{Name: name}, k)).To(Succeed())
				g.Expect(k.Annotations).NotTo(HaveKey(HavePrefix("flannel.alpha.coreos.com/")))
				g.Expect(k.Annotations).NotTo(HaveKey(cluster.FlannelRecordAnnotation))
			}, 30*time.Second, 200*time.Millisecond).Should(Succeed(), "winnet-controller withdraws the flannel record of %s", name)
		}
	})

	t.Run("winnet-controller changes nothing on a Node but the flannel record, and no Lease outside its namespace", func(t *testing.T) {
		testNodeAndLeaseRefusals(ctx, t, admin, tokenClient(t, server, controllerToken), "system:serviceaccount:winnet-system:winnet-controller", target.Name)
	})

	uninstallToken := installUninstallIdentity(ctx, t, server)
	t.Run("the uninstall hook's ServiceAccount writes and removes a flannel record through nodes/status", func(t *testing.T) {
		testFlannelRecordWrites(ctx, t, admin, tokenClient(t, server, uninstallToken), target.Name)
	})
	t.Run("the uninstall hook's ServiceAccount changes nothing on a Node but the flannel record, and no Lease outside its namespace", func(t *testing.T) {
		testNodeAndLeaseRefusals(ctx, t, admin, tokenClient(t, server, uninstallToken), "system:serviceaccount:winnet-system:winnet-uninstall", target.Name)
	})

	t.Run("agent tokens carry their node", func(t *testing.T) {
		g := NewWithT(t)
		for node, cfg := range map[string]*rest.Config{"win-a": agentA.cfg, "win-b": agentB.cfg} {
			review, err := kubernetes.NewForConfigOrDie(cfg).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(review.Status.UserInfo.Username).To(Equal("system:serviceaccount:winnet-system:winnet-agent"))
			g.Expect(review.Status.UserInfo.Extra).To(HaveKeyWithValue(nodeNameKey, ConsistOf(node)))
		}
	})

	t.Run("agent A reads what it needs", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(agentA.c.List(ctx, &networkv1alpha1.RemoteSubnetRouteList{})).To(Succeed())
		g.Expect(agentA.c.List(ctx, &corev1.PodList{}, client.MatchingFields{"spec.nodeName": "win-a"})).To(Succeed())
		g.Expect(agentA.c.Get(ctx, client.ObjectKey{Name: "win-a"}, &corev1.Node{})).To(Succeed())
		g.Expect(agentA.c.List(ctx, &networkv1alpha1.WindowsNodeNetworkList{}, client.MatchingFields{"metadata.name": "win-a"})).To(Succeed())
		// An Event on its Node, as the agent writes one (internal/agent nodeEvent).
		g.Expect(agentA.c.Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "win-a.", Namespace: "default"},
			InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "win-a", APIVersion: "v1"},
			Source:         corev1.EventSource{Component: "winnet-agent", Host: "win-a"},
			Reason:         "Test", Message: "event from the agent", Type: corev1.EventTypeNormal})).To(Succeed())
	})

	t.Run("agent A writes node A's WindowsNodeNetwork status and finalizer", func(t *testing.T) {
		g := NewWithT(t)
		wnn := &networkv1alpha1.WindowsNodeNetwork{}
		g.Expect(agentA.c.Get(ctx, client.ObjectKey{Name: "win-a"}, wnn)).To(Succeed())
		// The admission policy may take a moment to become active after the install.
		g.Eventually(func() error {
			return agentA.c.Status().Patch(ctx, wnn, client.RawPatch(types.MergePatchType, []byte(`{"status":{"observedGeneration":1,"hnsNetworkID":"a"}}`)))
		}, 10*time.Second, 200*time.Millisecond).Should(Succeed())
		g.Expect(agentA.c.Get(ctx, client.ObjectKey{Name: "win-a"}, wnn)).To(Succeed())
		wnn.Finalizers = append(wnn.Finalizers, "network.winnet.io/node-network")
		g.Expect(agentA.c.Update(ctx, wnn)).To(Succeed())
		wnn.Finalizers = nil
		g.Expect(agentA.c.Update(ctx, wnn)).To(Succeed())
	})

	t.Run("agent A is denied node B's WindowsNodeNetwork", func(t *testing.T) {
		g := NewWithT(t)
		want := "winnet-agent of node win-a may write only WindowsNodeNetwork win-a, not win-b"
		wnn := &networkv1alpha1.WindowsNodeNetwork{}
		g.Expect(agentA.c.Get(ctx, client.ObjectKey{Name: "win-b"}, wnn)).To(Succeed())
		g.Eventually(func() error {
			return agentA.c.Status().Patch(ctx, wnn, client.RawPatch(types.MergePatchType, []byte(`{"status":{"hnsNetworkID":"evil"}}`)))
		}, 10*time.Second, 200*time.Millisecond).Should(beDenied(want))
		wnn.Finalizers = append(wnn.Finalizers, "evil")
		g.Expect(agentA.c.Update(ctx, wnn)).To(beDenied(want))
		// ...and so is B's agent for A's, symmetrically.
		other := &networkv1alpha1.WindowsNodeNetwork{}
		g.Expect(agentB.c.Get(ctx, client.ObjectKey{Name: "win-a"}, other)).To(Succeed())
		g.Expect(agentB.c.Status().Patch(ctx, other, client.RawPatch(types.MergePatchType, []byte(`{"status":{"hnsNetworkID":"evil"}}`)))).
			To(beDenied("winnet-agent of node win-b may write only WindowsNodeNetwork win-b, not win-a"))
	})

	t.Run("agent A cannot change the spec of its own WindowsNodeNetwork", func(t *testing.T) {
		g := NewWithT(t)
		wnn := &networkv1alpha1.WindowsNodeNetwork{}
		g.Expect(agentA.c.Get(ctx, client.ObjectKey{Name: "win-a"}, wnn)).To(Succeed())
		wnn.Spec.SNAT.ExcludeCIDRs = []networkv1alpha1.CIDR{"172.16.0.0/12"}
		g.Expect(agentA.c.Update(ctx, wnn)).To(beDenied("winnet-agent of node win-a may change only the status and the finalizers of WindowsNodeNetwork win-a"))
	})

	t.Run("agent A writes PodEndpoints of node A only", func(t *testing.T) {
		g := NewWithT(t)
		own := podEndpoint("default", "web-a", "win-a")
		g.Expect(agentA.c.Create(ctx, own)).To(Succeed())
		g.Expect(agentA.c.Status().Patch(ctx, own, client.RawPatch(types.MergePatchType, []byte(`{"status":{"hnsEndpointID":"ep-a"}}`)))).To(Succeed())

		theirs := podEndpoint("default", "web-b", "win-b")
		want := "winnet-agent of node win-a may write only PodEndpoints whose spec.nodeName is win-a, not PodEndpoint default/" + theirs.Name
		g.Expect(agentA.c.Create(ctx, theirs.DeepCopy())).To(beDenied(want))

		// B's agent creates its own; A may neither change, take over nor delete it.
		g.Expect(agentB.c.Create(ctx, theirs)).To(Succeed())
		g.Expect(agentA.c.Status().Patch(ctx, theirs, client.RawPatch(types.MergePatchType, []byte(`{"status":{"hnsEndpointID":"evil"}}`)))).To(beDenied(want))
		// Taking it over fails too (the CRD already makes spec.nodeName immutable, which is checked
		// before admission; the policy's oldObject check is the second line).
		g.Expect(agentA.c.Patch(ctx, theirs, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"nodeName":"win-a"}}`)))).To(HaveOccurred())
		g.Expect(agentA.c.Delete(ctx, theirs)).To(beDenied(want))
		g.Expect(agentA.c.Delete(ctx, own)).To(Succeed())
	})

	t.Run("agent A cannot take the name of node B's PodEndpoints first", func(t *testing.T) {
		g := NewWithT(t)
		// Recorded for node A (so the spec.nodeName rule passes) but named as node B's agent names
		// its Pods' records, or as agents named them before "<node>.<Pod UID>" (the Pod's name).
		for _, name := range []string{"win-b." + podUID, "web-b"} {
			squat := podEndpoint("default", "web-b", "win-a")
			squat.Name, squat.Spec.PodName = name, name
			g.Expect(agentA.c.Create(ctx, squat)).To(beDenied("winnet-agent of node win-a may create only PodEndpoints named win-a.<spec.podUID>, not default/" + name))
		}
		theirs := podEndpoint("default", "web-b2", "win-b")
		theirs.Spec.PodUID = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
		theirs.Name = networkv1alpha1.PodEndpointName("win-b", types.UID(theirs.Spec.PodUID))
		g.Expect(agentB.c.Create(ctx, theirs)).To(Succeed(), "node B records its Pod under its own name")
		g.Expect(agentB.c.Delete(ctx, theirs)).To(Succeed())
	})

	t.Run("the agent's Events: its own node's, about the kinds it reports on, with a bounded note", func(t *testing.T) {
		testAgentEvents(ctx, t, server, admin, agentA, agentB)
	})

	t.Run("the agents' Egress Leases: each writes its own node's only", func(t *testing.T) {
		testAgentEgressLeases(ctx, t, admin, agentA, agentB)
	})

	t.Run("Egresses: a tenant neither writes nor reads them, nor gets its Pods selected from another namespace", func(t *testing.T) {
		testEgressTenancy(ctx, t, server, admin)
	})

	t.Run("with metrics off, neither the agent nor the controller may create TokenReviews or SubjectAccessReviews", func(t *testing.T) {
		g := NewWithT(t)
		for who, cfg := range map[string]*rest.Config{"agent": agentA.cfg, "controller": restConfigFor(server, controllerToken)} {
			cs := kubernetes.NewForConfigOrDie(cfg)
			_, err := cs.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
				Spec: authenticationv1.TokenReviewSpec{Token: controllerToken}}, metav1.CreateOptions{})
			g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%s: TokenReview: %v", who, err)
			_, err = cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
				Spec: authorizationv1.SubjectAccessReviewSpec{User: "someone", NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"}}},
				metav1.CreateOptions{})
			g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%s: SubjectAccessReview: %v", who, err)
		}
	})

	t.Run("PodEndpoint names: the agent of node win cannot take node win.corp's", func(t *testing.T) {
		testPodEndpointNames(ctx, t, server, admin)
	})

	t.Run("PacketTraces: a tenant traces only as its namespace's Pods and names only what it may read", func(t *testing.T) {
		testPacketTraceTenancy(ctx, t, server, admin, agentA.c, agentB.c)
	})

	t.Run("agent tokens without a node are denied", func(t *testing.T) {
		g := NewWithT(t)
		unbound := tokenClient(t, server, requestToken(ctx, t, server, "winnet-agent", nil))
		g.Expect(unbound.Create(ctx, podEndpoint("default", "web-x", "win-a"))).
			To(beDenied("winnet-agent must authenticate with a ServiceAccount token bound to its Pod on a Node"))
		wnn := &networkv1alpha1.WindowsNodeNetwork{}
		g.Expect(unbound.Get(ctx, client.ObjectKey{Name: "win-a"}, wnn)).To(Succeed())
		g.Expect(unbound.Status().Patch(ctx, wnn, client.RawPatch(types.MergePatchType, []byte(`{"status":{"hnsNetworkID":"x"}}`)))).
			To(beDenied("no authentication.kubernetes.io/node-name claim"))
	})
}

// beDenied matches an error of the chart's admission policy winnet-agent-own-node carrying message.
func beDenied(message string) OmegaMatcher {
	return beDeniedBy("winnet-agent-own-node", message)
}

// beDeniedBy matches an error of the chart's admission policy named policy carrying message.
func beDeniedBy(policy, message string) OmegaMatcher {
	return WithTransform(func(err error) string {
		if err == nil {
			return "<allowed>"
		}
		return fmt.Sprintf("%s: %v", apierrors.ReasonForError(err), err)
	}, And(
		HavePrefix(string(metav1.StatusReasonForbidden)+": "),
		ContainSubstring("ValidatingAdmissionPolicy '"+policy+"'"),
		ContainSubstring(message)))
}

const podUID = "6f2c1a9e-3b4d-4e5f-8a7b-9c0d1e2f3a4b"

// podEndpoint returns the PodEndpoint that node's agent writes for the Pod pod.
func podEndpoint(namespace, pod, node string) *networkv1alpha1.PodEndpoint {
	return &networkv1alpha1.PodEndpoint{ObjectMeta: metav1.ObjectMeta{Name: networkv1alpha1.PodEndpointName(node, podUID), Namespace: namespace},
		Spec: networkv1alpha1.PodEndpointSpec{PodName: pod, PodUID: podUID, NodeName: node,
			SandboxID: "4b9d2f0c7e1a3b5d", InterfaceName: "eth0", IPs: []networkv1alpha1.InterfaceAddress{"10.244.1.5/24"},
			MAC: "02:42:0a:f4:01:05"}}
}

type tokenClientSet struct {
	c   client.Client
	cfg *rest.Config
}

// agentClient returns a client authenticated as winnet-agent with a token bound to the agent's Pod on node.
func agentClient(ctx context.Context, t *testing.T, server *framework.APIServer, node string) tokenClientSet {
	t.Helper()
	pod := &corev1.Pod{}
	if err := server.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "winnet-agent-" + node}, pod); err != nil {
		t.Fatal(err)
	}
	token := requestToken(ctx, t, server, "winnet-agent", &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID})
	return tokenClientSet{c: tokenClient(t, server, token), cfg: restConfigFor(server, token)}
}

// requestToken issues a TokenRequest for the ServiceAccount, bound to ref when ref is not nil.
func requestToken(ctx context.Context, t *testing.T, server *framework.APIServer, sa string, ref *authenticationv1.BoundObjectReference) string {
	t.Helper()
	cs := kubernetes.NewForConfigOrDie(server.Config)
	expiry := int64(3600)
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: ref, ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest for ServiceAccount %s/%s: %v", ns, sa, err)
	}
	return tr.Status.Token
}

func restConfigFor(server *framework.APIServer, token string) *rest.Config {
	return &rest.Config{Host: server.Config.Host, BearerToken: token,
		TLSClientConfig: rest.TLSClientConfig{CAData: server.Config.CAData}}
}

func tokenClient(t *testing.T, server *framework.APIServer, token string) client.Client {
	t.Helper()
	scheme, err := winnetscheme.New()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(restConfigFor(server, token), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// runController builds winnet-controller and runs it with a kubeconfig holding token, as the chart's
// Deployment would (same flags); it is stopped when the test ends.
func runController(ctx context.Context, t *testing.T, server *framework.APIServer, token string) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "winnet-controller")
	build := hostcmd.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/winnet-controller")
	build.Dir = framework.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/winnet-controller: %v\n%s", err, out)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: server.Config.Host, CertificateAuthorityData: server.Config.CAData}
	kc.AuthInfos["winnet-controller"] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "winnet-controller"}
	kc.CurrentContext = "test"
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		t.Fatal(err)
	}
	// The arguments of the chart's Deployment (default values), pointed at this API server.
	var dep struct {
		Spec struct {
			Template struct {
				Spec corev1.PodSpec `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	manifest, err := renderChart(t)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range splitManifest(t, manifest) {
		if o.Kind == "Deployment" {
			if err := yaml.Unmarshal(o.YAML, &dep); err != nil {
				t.Fatal(err)
			}
		}
	}
	args := append(dep.Spec.Template.Spec.Containers[0].Args, "--kubeconfig="+kubeconfig, "--health-probe-bind-address=0")
	log, err := os.Create(filepath.Join(dir, "controller.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := hostcmd.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting winnet-controller: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			t.Logf("winnet-controller log:\n%s", b)
		}
	})
}

// bareAPIServer starts a real API server without the framework's CRDs (the chart's crds/ are what
// gets installed) and returns it with an admin client that knows winnet's kinds and CRDs.
func bareAPIServer(g Gomega) (*framework.APIServer, client.Client) {
	server, err := framework.StartAPIServerWithoutCRDs()
	g.Expect(err).NotTo(HaveOccurred())
	scheme, err := winnetscheme.New()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(apiextensionsv1.AddToScheme(scheme)).To(Succeed())
	admin, err := client.New(server.Config, client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())
	return server, admin
}
