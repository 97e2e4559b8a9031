//go:build linux

package networkpolicy_test

import (
	"context"
	"net/netip"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	cnpv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/clusternetworkpolicy"
	"github.com/winnet-io/winnet/controllers/networkpolicy"
	"github.com/winnet-io/winnet/internal/pipeline"
	winnetscheme "github.com/winnet-io/winnet/internal/scheme"
	"github.com/winnet-io/winnet/internal/servedcrd"
	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/simnode"
)

func createCNP(t *testing.T, p *cnpv1beta1.ClusterNetworkPolicy) {
	t.Helper()
	NewWithT(t).Expect(server.Client.Create(context.Background(), p)).To(Succeed())
	t.Cleanup(func() { _ = server.Client.Delete(context.Background(), p) })
}

func deleteObject(t *testing.T, obj client.Object) {
	t.Helper()
	NewWithT(t).Expect(server.Client.Delete(context.Background(), obj)).To(Succeed())
}

func tcpPort(port int32) []cnpv1beta1.ClusterNetworkPolicyProtocol {
	return []cnpv1beta1.ClusterNetworkPolicyProtocol{{TCP: &cnpv1beta1.ClusterNetworkPolicyProtocolTCP{DestinationPort: &cnpv1beta1.Port{Number: port}}}}
}

func teamNamespaces(team string) *metav1.LabelSelector {
	if team == "" {
		return &metav1.LabelSelector{}
	}
	return &metav1.LabelSelector{MatchLabels: map[string]string{"team": team}}
}

// TestClusterNetworkPolicy plays the tiers with real packets between two nodes: web (namespace
// team x, node a), client-a (team x, node a) and client-b (team y, node b). Each step says what it
// proves.
func TestClusterNetworkPolicy(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	u := simnode.NewUnderlay(t, netip.MustParsePrefix("192.168.73.0/24"))
	a := framework.StartPodNode(t, server, u, "cnp-a", "192.168.73.11/24", "10.244.73.0/24", converge)
	b := framework.StartPodNode(t, server, u, "cnp-b", "192.168.73.12/24", "10.244.74.0/24", converge)
	a.OVS.ExactMatchDatapath(t)
	b.OVS.ExactMatchDatapath(t)
	a.Route(t)
	b.Route(t)

	nsX := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cnp-x", Labels: map[string]string{"team": "x"}}}
	nsY := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cnp-y", Labels: map[string]string{"team": "y"}}}
	for _, ns := range []*corev1.Namespace{nsX, nsY} {
		g.Expect(server.Client.Create(ctx, ns)).To(Succeed())
		t.Cleanup(func() { _ = server.Client.Delete(context.Background(), ns) })
	}
	web := a.AddPod(t, "web", framework.TestPodOptions{Namespace: "cnp-x", Labels: map[string]string{"app": "web"}, Ports: httpPorts})
	clientA := a.AddPod(t, "client-a", framework.TestPodOptions{Namespace: "cnp-x", Labels: map[string]string{"app": "client"}})
	clientB := b.AddPod(t, "client-b", framework.TestPodOptions{Namespace: "cnp-y", Labels: map[string]string{"app": "client"}})
	framework.Serve(t, web.NS, "web", httpPort)
	framework.Serve(t, web.NS, "web", otherPort)
	webHTTP, webOther := netip.AddrPortFrom(web.IP, httpPort), netip.AddrPortFrom(web.IP, otherPort)

	expectAllowed(t, clientB.NS, "tcp4", webHTTP, "web")
	expectAllowed(t, clientA.NS, "tcp4", webHTTP, "web")

	// A Baseline Deny refuses what no NetworkPolicy decides: every Pod to team x's Pods.
	baselineDeny := &cnpv1beta1.ClusterNetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "baseline-deny"},
		Spec: cnpv1beta1.ClusterNetworkPolicySpec{
			Tier: cnpv1beta1.BaselineTier, Priority: 10,
			Subject: cnpv1beta1.ClusterNetworkPolicySubject{Namespaces: teamNamespaces("x")},
			Ingress: []cnpv1beta1.ClusterNetworkPolicyIngressRule{{
				Action: cnpv1beta1.ClusterNetworkPolicyRuleActionDeny,
				From:   []cnpv1beta1.ClusterNetworkPolicyIngressPeer{{Namespaces: teamNamespaces("")}},
			}},
		},
	}
	createCNP(t, baselineDeny)
	expectRefused(t, clientB.NS, "tcp4", webHTTP)
	expectRefused(t, clientA.NS, "tcp4", webHTTP)

	// A NetworkPolicy opens the Baseline Deny for team y; web is isolated now, so client-a (whom
	// it does not admit) stays refused, by NetworkPolicy.
	allowY := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "cnp-x", Name: "allow-y"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: teamNamespaces("y")}}}},
		},
	}
	createPolicy(t, allowY)
	expectAllowed(t, clientB.NS, "tcp4", webHTTP, "web")
	expectAllowed(t, clientB.NS, "tcp4", webOther, "web")
	expectRefused(t, clientA.NS, "tcp4", webHTTP)

	// An Admin Deny of TCP 8080 from team y: the NetworkPolicy cannot open it; 9090 stays open.
	adminDeny := &cnpv1beta1.ClusterNetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "admin-deny"},
		Spec: cnpv1beta1.ClusterNetworkPolicySpec{
			Tier: cnpv1beta1.AdminTier, Priority: 20,
			Subject: cnpv1beta1.ClusterNetworkPolicySubject{Namespaces: teamNamespaces("x")},
			Ingress: []cnpv1beta1.ClusterNetworkPolicyIngressRule{{
				Action:    cnpv1beta1.ClusterNetworkPolicyRuleActionDeny,
				From:      []cnpv1beta1.ClusterNetworkPolicyIngressPeer{{Namespaces: teamNamespaces("y")}},
				Protocols: tcpPort(httpPort),
			}},
		},
	}
	createCNP(t, adminDeny)
	expectRefused(t, clientB.NS, "tcp4", webHTTP)
	expectAllowed(t, clientB.NS, "tcp4", webOther, "web")

	// An Admin Accept of TCP 8080 from every Pod at a higher precedence (priority 5): it wins over
	// the Deny at 20, and it skips NetworkPolicy (client-a, whom allow-y does not admit, gets in).
	adminFirst := &cnpv1beta1.ClusterNetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "admin-first"},
		Spec: cnpv1beta1.ClusterNetworkPolicySpec{
			Tier: cnpv1beta1.AdminTier, Priority: 5,
			Subject: cnpv1beta1.ClusterNetworkPolicySubject{Pods: &cnpv1beta1.NamespacedPod{
				NamespaceSelector: *teamNamespaces("x"), PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}},
			Ingress: []cnpv1beta1.ClusterNetworkPolicyIngressRule{{
				Action: cnpv1beta1.ClusterNetworkPolicyRuleActionAccept,
				From: []cnpv1beta1.ClusterNetworkPolicyIngressPeer{{Pods: &cnpv1beta1.NamespacedPod{
					PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}}}}},
				Protocols: tcpPort(httpPort),
			}},
		},
	}
	createCNP(t, adminFirst)
	expectAllowed(t, clientB.NS, "tcp4", webHTTP, "web")
	expectAllowed(t, clientA.NS, "tcp4", webHTTP, "web")

	// The same rule as Pass: the Admin Deny at 20 is skipped and NetworkPolicy decides: team y is
	// admitted, client-a is not.
	g.Expect(server.Client.Get(ctx, client.ObjectKeyFromObject(adminFirst), adminFirst)).To(Succeed())
	adminFirst.Spec.Ingress[0].Action = cnpv1beta1.ClusterNetworkPolicyRuleActionPass
	g.Expect(server.Client.Update(ctx, adminFirst)).To(Succeed())
	expectRefused(t, clientA.NS, "tcp4", webHTTP)
	expectAllowed(t, clientB.NS, "tcp4", webHTTP, "web")

	// Without the NetworkPolicy, what Pass hands on falls through NetworkPolicy (web is isolated
	// by none) to the Baseline Deny; without that, to the default, which allows.
	deleteObject(t, allowY)
	expectRefused(t, clientB.NS, "tcp4", webHTTP)
	deleteObject(t, baselineDeny)
	expectAllowed(t, clientB.NS, "tcp4", webHTTP, "web")
	expectAllowed(t, clientA.NS, "tcp4", webHTTP, "web")

	// Egress, networks: an Admin Deny from client-b to web's address (and ::/0, accepted and
	// matching nothing on this IPv4 pipeline) refuses every port; client-a is no subject.
	egressDeny := &cnpv1beta1.ClusterNetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "egress-deny"},
		Spec: cnpv1beta1.ClusterNetworkPolicySpec{
			Tier: cnpv1beta1.AdminTier, Priority: 1,
			Subject: cnpv1beta1.ClusterNetworkPolicySubject{Namespaces: teamNamespaces("y")},
			Egress: []cnpv1beta1.ClusterNetworkPolicyEgressRule{{
				Action: cnpv1beta1.ClusterNetworkPolicyRuleActionDeny,
				To:     []cnpv1beta1.ClusterNetworkPolicyEgressPeer{{Networks: []cnpv1beta1.CIDR{cnpv1beta1.CIDR(web.IP.String() + "/32"), "::/0"}}},
			}},
		},
	}
	createCNP(t, egressDeny)
	expectRefused(t, clientB.NS, "tcp4", webOther)
	expectRefused(t, clientB.NS, "tcp4", webHTTP)
	expectAllowed(t, clientA.NS, "tcp4", webOther, "web")
	deleteObject(t, egressDeny)
	expectAllowed(t, clientB.NS, "tcp4", webOther, "web")

	deleteObject(t, adminDeny)
	deleteObject(t, adminFirst)
	expectAllowed(t, clientB.NS, "tcp4", webHTTP, "web")

	// Named ports: an Admin Deny of the port named "http" from team y's clients, resolved on web
	// (the subject): 8080 is refused, 9090 stays open.
	namedDeny := &cnpv1beta1.ClusterNetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "named-deny"},
		Spec: cnpv1beta1.ClusterNetworkPolicySpec{
			Tier: cnpv1beta1.AdminTier, Priority: 2,
			Subject: cnpv1beta1.ClusterNetworkPolicySubject{Namespaces: teamNamespaces("x")},
			Ingress: []cnpv1beta1.ClusterNetworkPolicyIngressRule{{
				Action: cnpv1beta1.ClusterNetworkPolicyRuleActionDeny,
				From: []cnpv1beta1.ClusterNetworkPolicyIngressPeer{{Pods: &cnpv1beta1.NamespacedPod{
					NamespaceSelector: *teamNamespaces("y"), PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}}}}},
				Protocols: []cnpv1beta1.ClusterNetworkPolicyProtocol{{DestinationNamedPort: "http"}},
			}},
		},
	}
	createCNP(t, namedDeny)
	expectRefused(t, clientB.NS, "tcp4", webHTTP)
	expectAllowed(t, clientB.NS, "tcp4", webOther, "web")

	// A peer's label change: client-b relabelled out of the pods peer is admitted; back in, refused.
	// Both take the incremental path (a pass of kind pods), not the full pass.
	clientBPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: clientB.Namespace, Name: clientB.Name}}
	// What packet traces report of the rules (PolicyIndex.ClusterTraceRules) follows those passes.
	traced := func() bool {
		idx := a.Agent.State.PolicyIndex()
		for _, r := range idx.ClusterTraceRules {
			if idx.ClusterRules[pipeline.ClusterRuleObject(r.Tier, r.Direction, r.Priority)].Policy.Name == "named-deny" {
				return true
			}
		}
		return false
	}
	g.Expect(traced()).To(BeTrue(), "packet traces report named-deny's rule")
	incremental := passCount(t, networkpolicy.PassPods)
	setLabels(t, clientBPod, map[string]string{"app": "other"})
	expectAllowed(t, clientB.NS, "tcp4", webHTTP, "web")
	g.Expect(passCount(t, networkpolicy.PassPods)).To(BeNumerically(">", incremental), "the peer's change took the incremental path")
	g.Eventually(traced).WithTimeout(converge).Should(BeFalse(), "packet traces no longer report named-deny's rule: it has no peer, hence no flows")
	incremental = passCount(t, networkpolicy.PassPods)
	setLabels(t, clientBPod, map[string]string{"app": "client"})
	expectRefused(t, clientB.NS, "tcp4", webHTTP)
	g.Expect(passCount(t, networkpolicy.PassPods)).To(BeNumerically(">", incremental), "the peer's change took the incremental path")
	g.Eventually(traced).WithTimeout(converge).Should(BeTrue(), "packet traces report named-deny's rule again: it has flows again")

	// The flows are replayed after ovs-vswitchd is killed and restarted.
	g.Expect(a.OVS.KillVswitchd()).To(Succeed())
	g.Expect(a.OVS.StartVswitchd()).To(Succeed())
	a.OVS.ExactMatchDatapath(t)
	expectAllowed(t, clientB.NS, "tcp4", webOther, "web")
	expectRefused(t, clientB.NS, "tcp4", webHTTP)

	// A nodes peer is the addresses of the Nodes its selector selects: the agent watches those
	// Nodes only once a policy names the selector, and follows their labels and addresses.
	framework.Serve(t, b.NS, "node-b", httpPort)
	nodeB := netip.AddrPortFrom(b.NodeIP.Addr(), httpPort)
	expectAllowed(t, clientA.NS, "tcp4", nodeB, "node-b")
	createCNP(t, &cnpv1beta1.ClusterNetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "deny-to-nodes"},
		Spec: cnpv1beta1.ClusterNetworkPolicySpec{
			Tier: cnpv1beta1.AdminTier, Priority: 25,
			Subject: cnpv1beta1.ClusterNetworkPolicySubject{Namespaces: teamNamespaces("x")},
			Egress: []cnpv1beta1.ClusterNetworkPolicyEgressRule{{
				Action: cnpv1beta1.ClusterNetworkPolicyRuleActionDeny,
				To:     []cnpv1beta1.ClusterNetworkPolicyEgressPeer{{Nodes: &metav1.LabelSelector{MatchLabels: map[string]string{"cnp-test": "denied"}}}},
			}},
		},
	})
	nodeBObj := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cnp-b"}}
	g.Expect(server.Client.Get(ctx, client.ObjectKeyFromObject(nodeBObj), nodeBObj)).To(Succeed())
	nodeBObj.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: b.NodeIP.Addr().String()}}
	g.Expect(server.Client.Status().Update(ctx, nodeBObj)).To(Succeed()) // as kubelet reports it
	labelNode := func(value string) {
		label := []byte(`{"metadata":{"labels":{"cnp-test":null}}}`)
		if value != "" {
			label = []byte(`{"metadata":{"labels":{"cnp-test":"` + value + `"}}}`)
		}
		g.Expect(server.Client.Patch(ctx, nodeBObj, client.RawPatch(types.MergePatchType, label))).To(Succeed())
	}
	labelNode("denied")
	expectRefused(t, clientA.NS, "tcp4", nodeB)
	expectAllowed(t, clientA.NS, "tcp4", webHTTP, "web") // only the Node's addresses are denied
	labelNode("")
	expectAllowed(t, clientA.NS, "tcp4", nodeB, "node-b")
	labelNode("denied")
	expectRefused(t, clientA.NS, "tcp4", nodeB)
	deleteObject(t, &cnpv1beta1.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "deny-to-nodes"}})
	expectAllowed(t, clientA.NS, "tcp4", nodeB, "node-b")

	// What winnet does not realise is said on the policy, by a Warning Event.
	createCNP(t, &cnpv1beta1.ClusterNetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "unsupported"},
		Spec: cnpv1beta1.ClusterNetworkPolicySpec{
			Tier: cnpv1beta1.AdminTier, Priority: 30,
			Subject: cnpv1beta1.ClusterNetworkPolicySubject{Namespaces: teamNamespaces("x")},
			Egress: []cnpv1beta1.ClusterNetworkPolicyEgressRule{{
				Action: cnpv1beta1.ClusterNetworkPolicyRuleActionAccept,
				To:     []cnpv1beta1.ClusterNetworkPolicyEgressPeer{{DomainNames: []cnpv1beta1.DomainName{"example.com"}}},
			}},
		},
	})
	g.Eventually(func(g Gomega) {
		g.Expect(server.WarningReasons(ctx, "", "unsupported")).To(ContainElement(networkpolicy.ClusterUnsupportedReason))
	}).WithTimeout(converge).Should(Succeed())

	// A Deny rule winnet cannot realise as written fails closed: its domainNames peer (which the
	// API admits in a Deny rule; winnet resolves no DNS) becomes every peer, on the rule's port
	// only, from its subjects only. client-a (team x) is refused web's 9090, which it reached
	// before; it still reaches 8080, and client-b (team y, no subject) still reaches 9090. A
	// Warning Event says why.
	expectAllowed(t, clientA.NS, "tcp4", webOther, "web")
	createCNP(t, &cnpv1beta1.ClusterNetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "fail-closed"},
		Spec: cnpv1beta1.ClusterNetworkPolicySpec{
			Tier: cnpv1beta1.AdminTier, Priority: 31,
			Subject: cnpv1beta1.ClusterNetworkPolicySubject{Namespaces: teamNamespaces("x")},
			Egress: []cnpv1beta1.ClusterNetworkPolicyEgressRule{{
				Action:    cnpv1beta1.ClusterNetworkPolicyRuleActionDeny,
				To:        []cnpv1beta1.ClusterNetworkPolicyEgressPeer{{DomainNames: []cnpv1beta1.DomainName{"example.com"}}},
				Protocols: tcpPort(otherPort),
			}},
		},
	})
	expectRefused(t, clientA.NS, "tcp4", webOther)
	expectAllowed(t, clientA.NS, "tcp4", webHTTP, "web")
	expectAllowed(t, clientB.NS, "tcp4", webOther, "web")
	g.Eventually(func(g Gomega) {
		list := &eventsv1.EventList{}
		g.Expect(server.Client.List(ctx, list)).To(Succeed())
		var notes []string
		for _, e := range list.Items {
			if e.Regarding.Name == "fail-closed" && e.Type == corev1.EventTypeWarning && e.Reason == networkpolicy.ClusterUnsupportedReason {
				notes = append(notes, e.Note)
			}
		}
		g.Expect(notes).To(ContainElement(ContainSubstring("domainNames peers are not realised (winnet resolves no DNS in the datapath): every peer is dropped instead (fail closed)")))
	}).WithTimeout(converge).Should(Succeed())

	// Status: each agent reports, in its WindowsNodeNetwork, what it does not realise of the
	// policies that apply to its node (subjects there), and winnet-controller's reconciler (run
	// here against the same API server) writes the policies' Realised condition from the reports:
	// False where a part is not realised, naming the nodes where it applies, True elsewhere.
	startStatusReconciler(t, server)
	g.Eventually(func(g Gomega) {
		w := &networkv1alpha1.WindowsNodeNetwork{}
		g.Expect(server.Client.Get(ctx, client.ObjectKey{Name: "cnp-a"}, w)).To(Succeed())
		g.Expect(w.Status.NetworkPolicies.ClusterNetworkPolicyReport).NotTo(BeNil())
		g.Expect(w.Status.NetworkPolicies.ClusterNetworkPolicyReport.NotRealised).To(ContainElement(And(
			HaveField("Name", "unsupported"), HaveField("NotRealised", ContainSubstring("domainNames")))))
		g.Expect(w.Status.NetworkPolicies.ClusterNetworkPolicies).To(ContainElement(And(
			HaveField("Name", "unsupported"), HaveField("NotRealised", ContainSubstring("domainNames")))), "the list winnet-controller 0.1.0 reads")
	}).WithTimeout(converge).Should(Succeed())
	realised := func(name string) func(g Gomega) *metav1.Condition {
		return func(g Gomega) *metav1.Condition {
			p := &cnpv1beta1.ClusterNetworkPolicy{}
			g.Expect(server.Client.Get(ctx, client.ObjectKey{Name: name}, p)).To(Succeed())
			return meta.FindStatusCondition(p.Status.Conditions, networkv1alpha1.RealisedCondition)
		}
	}
	g.Eventually(realised("unsupported")).WithTimeout(converge).Should(And(Not(BeNil()),
		HaveField("Status", metav1.ConditionFalse), HaveField("Reason", networkv1alpha1.PartlyRealisedReason),
		HaveField("Message", And(ContainSubstring("cnp-a: "), Not(ContainSubstring("cnp-b")), ContainSubstring("domainNames")))))
	g.Eventually(realised("fail-closed")).WithTimeout(converge).Should(And(Not(BeNil()),
		HaveField("Status", metav1.ConditionFalse), HaveField("Reason", networkv1alpha1.PartlyRealisedReason),
		HaveField("Message", And(ContainSubstring("cnp-a: "), Not(ContainSubstring("cnp-b")), ContainSubstring("every peer is dropped instead (fail closed)")))))
	g.Eventually(realised("named-deny")).WithTimeout(converge).Should(And(Not(BeNil()),
		HaveField("Status", metav1.ConditionTrue), HaveField("Reason", networkv1alpha1.RealisedReason)))
}

// startStatusReconciler runs winnet-controller's ClusterNetworkPolicy status reconciler against s
// for the rest of the test.
func startStatusReconciler(t *testing.T, s *framework.APIServer) {
	t.Helper()
	g := NewWithT(t)
	scheme, err := winnetscheme.New()
	g.Expect(err).NotTo(HaveOccurred())
	mgr, err := ctrl.NewManager(s.Config, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0", Controller: config.Controller{SkipNameValidation: ptr.To(true)}})
	g.Expect(err).NotTo(HaveOccurred())
	cnps, err := servedcrd.ClusterNetworkPolicies(mgr)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect((&clusternetworkpolicy.Reconciler{Client: mgr.GetClient(), Policies: cnps}).SetupWithManager(mgr)).To(Succeed())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the status reconciler's manager: %v", err)
		}
	})
}
