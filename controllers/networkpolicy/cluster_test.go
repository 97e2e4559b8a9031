package networkpolicy

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cnpv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/winnet-io/winnet/internal/pipeline"
)

func cnp(name string, tier cnpv1beta1.Tier, priority int32, subject cnpv1beta1.ClusterNetworkPolicySubject, spec cnpv1beta1.ClusterNetworkPolicySpec) cnpv1beta1.ClusterNetworkPolicy {
	spec.Tier, spec.Priority, spec.Subject = tier, priority, subject
	return cnpv1beta1.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
}

func egressTo(action cnpv1beta1.ClusterNetworkPolicyRuleAction, peers ...cnpv1beta1.ClusterNetworkPolicyEgressPeer) cnpv1beta1.ClusterNetworkPolicyEgressRule {
	return cnpv1beta1.ClusterNetworkPolicyEgressRule{Action: action, To: peers}
}

// TestComputeCluster: priorities follow (spec.priority, name, rule order) in each tier and
// direction, whether or not a rule has local subjects; subjects are local Pods; peers resolve to
// Pods' addresses and IPv4 networks; what is not realised is said.
func TestComputeCluster(t *testing.T) {
	g := NewWithT(t)
	in := testInputs()
	teamA := cnpv1beta1.ClusterNetworkPolicySubject{Namespaces: sel(map[string]string{"team": "a"})}
	teamB := cnpv1beta1.ClusterNetworkPolicySubject{Namespaces: sel(map[string]string{"team": "b"})}
	webOnly := cnpv1beta1.ClusterNetworkPolicySubject{Pods: &cnpv1beta1.NamespacedPod{PodSelector: *sel(map[string]string{"app": "web"})}}
	clientsOfB := cnpv1beta1.ClusterNetworkPolicyEgressPeer{Pods: &cnpv1beta1.NamespacedPod{
		NamespaceSelector: *sel(map[string]string{"team": "b"}), PodSelector: *sel(map[string]string{"app": "client"})}}
	policies := []cnpv1beta1.ClusterNetworkPolicy{
		// Listed out of order: "b" and "a" share priority 7, "a" goes first.
		cnp("b", cnpv1beta1.AdminTier, 7, teamA, cnpv1beta1.ClusterNetworkPolicySpec{Egress: []cnpv1beta1.ClusterNetworkPolicyEgressRule{
			egressTo(cnpv1beta1.ClusterNetworkPolicyRuleActionDeny, clientsOfB),
		}}),
		cnp("a", cnpv1beta1.AdminTier, 7, webOnly, cnpv1beta1.ClusterNetworkPolicySpec{Egress: []cnpv1beta1.ClusterNetworkPolicyEgressRule{
			egressTo(cnpv1beta1.ClusterNetworkPolicyRuleActionPass, cnpv1beta1.ClusterNetworkPolicyEgressPeer{Networks: []cnpv1beta1.CIDR{"8.8.8.0/24", "fd00::/8"}}),
			{Action: cnpv1beta1.ClusterNetworkPolicyRuleActionAccept, To: []cnpv1beta1.ClusterNetworkPolicyEgressPeer{{DomainNames: []cnpv1beta1.DomainName{"example.com"}}}},
		}}),
		// No local subject: it takes a priority all the same.
		cnp("remote", cnpv1beta1.AdminTier, 1, teamB, cnpv1beta1.ClusterNetworkPolicySpec{Egress: []cnpv1beta1.ClusterNetworkPolicyEgressRule{
			egressTo(cnpv1beta1.ClusterNetworkPolicyRuleActionDeny, cnpv1beta1.ClusterNetworkPolicyEgressPeer{Networks: []cnpv1beta1.CIDR{"0.0.0.0/0"}}),
		}}),
		cnp("base", cnpv1beta1.BaselineTier, 0, teamA, cnpv1beta1.ClusterNetworkPolicySpec{Ingress: []cnpv1beta1.ClusterNetworkPolicyIngressRule{{
			Action: cnpv1beta1.ClusterNetworkPolicyRuleActionDeny, From: []cnpv1beta1.ClusterNetworkPolicyIngressPeer{{Namespaces: &metav1.LabelSelector{}}},
			Protocols: []cnpv1beta1.ClusterNetworkPolicyProtocol{
				{TCP: &cnpv1beta1.ClusterNetworkPolicyProtocolTCP{DestinationPort: &cnpv1beta1.Port{Range: &cnpv1beta1.PortRange{Start: 80, End: 81}}}},
				{SCTP: &cnpv1beta1.ClusterNetworkPolicyProtocolSCTP{DestinationPort: &cnpv1beta1.Port{Number: 80}}},
			},
		}}}),
	}
	d := ComputeCluster(policies, in)
	top := pipeline.ClusterPriorityHighest
	g.Expect(renderClusterRules(t, d.Policy.Rules)).To(Equal([]string{
		fmt.Sprintf("tier=1 dir=0 action=1 prio=%d pods=[10 11] any=false peers=[10.244.1.5/32 10.244.1.6/32 10.244.2.5/32 10.244.2.6/32] ports=[{6 80 81}]", top),
		fmt.Sprintf("tier=0 dir=1 action=2 prio=%d pods=[10] any=false peers=[8.8.8.0/24] ports=[]", top-1),
		fmt.Sprintf("tier=0 dir=1 action=1 prio=%d pods=[10 11] any=false peers=[10.244.2.6/32] ports=[]", top-3),
	}))
	g.Expect(d.Policies).To(Equal(3))
	g.Expect(d.Unsupported).To(HaveKeyWithValue("a", ContainElement(ContainSubstring("domainNames"))))
	g.Expect(d.Unsupported).To(HaveKeyWithValue("base", ContainElement(ContainSubstring("SCTP"))))
	g.Expect(d.Refused).To(BeEmpty())
}

// TestComputeClusterBand: the rules beyond a tier's band are refused and said, the others kept.
func TestComputeClusterBand(t *testing.T) {
	g := NewWithT(t)
	subject := cnpv1beta1.ClusterNetworkPolicySubject{Namespaces: &metav1.LabelSelector{}}
	rules := make([]cnpv1beta1.ClusterNetworkPolicyEgressRule, 25)
	for i := range rules {
		rules[i] = egressTo(cnpv1beta1.ClusterNetworkPolicyRuleActionDeny, cnpv1beta1.ClusterNetworkPolicyEgressPeer{Networks: []cnpv1beta1.CIDR{"8.8.8.8/32"}})
	}
	var policies []cnpv1beta1.ClusterNetworkPolicy
	for i := 0; i*25 < clusterRulesPerBand+25; i++ {
		policies = append(policies, cnp(fmtNum(i), cnpv1beta1.AdminTier, 0, subject, cnpv1beta1.ClusterNetworkPolicySpec{Egress: rules}))
	}
	d := ComputeCluster(policies, testInputs())
	g.Expect(d.Policy.Rules).To(HaveLen(clusterRulesPerBand))
	g.Expect(d.Policy.Rules[len(d.Policy.Rules)-1].Priority).To(Equal(pipeline.ClusterPriorityLowest))
	g.Expect(d.Refused).NotTo(BeEmpty())
}

func fmtNum(i int) string {
	return string(rune('a'+i/1000%26)) + string(rune('a'+i/100%10)) + string(rune('a'+i/10%10)) + string(rune('a'+i%10))
}

func renderClusterRules(t *testing.T, rules []pipeline.ClusterRule) []string {
	var out []string
	for _, r := range rules {
		var ports []uint32
		for _, p := range r.Pods {
			ports = append(ports, p.OFPort)
		}
		sub := ""
		if strings.Contains(t.Name(), "Named") {
			sub = fmt.Sprintf(" sub=%d", r.Sub)
		}
		out = append(out, fmt.Sprintf("tier=%d dir=%d action=%d prio=%d%s pods=%v any=%t peers=%v ports=%v", r.Tier, r.Direction, r.Action, r.Priority, sub, ports, r.AnyPeer, r.Peers, r.Ports))
	}
	return out
}

// TestComputeClusterNamedPorts: a named port resolves on the subjects for ingress (one part per
// set of ports, at the rule's priority) and on the peer Pods for egress; a Pod without the name
// gets no part.
func TestComputeClusterNamedPorts(t *testing.T) {
	g := NewWithT(t)
	httpPort := []cnpv1beta1.ClusterNetworkPolicyProtocol{{DestinationNamedPort: "http"}}
	teamA := cnpv1beta1.ClusterNetworkPolicySubject{Namespaces: sel(map[string]string{"team": "a"})}
	clients := cnpv1beta1.NamespacedPod{PodSelector: *sel(map[string]string{"app": "client"})}
	d := ComputeCluster([]cnpv1beta1.ClusterNetworkPolicy{
		cnp("named", cnpv1beta1.AdminTier, 3, teamA, cnpv1beta1.ClusterNetworkPolicySpec{
			Ingress: []cnpv1beta1.ClusterNetworkPolicyIngressRule{{Action: cnpv1beta1.ClusterNetworkPolicyRuleActionDeny,
				From: []cnpv1beta1.ClusterNetworkPolicyIngressPeer{{Pods: &clients}}, Protocols: httpPort}},
			Egress: []cnpv1beta1.ClusterNetworkPolicyEgressRule{{Action: cnpv1beta1.ClusterNetworkPolicyRuleActionAccept,
				To: []cnpv1beta1.ClusterNetworkPolicyEgressPeer{{Pods: &clients}}, Protocols: httpPort}},
		}),
	}, testInputs())
	top := pipeline.ClusterPriorityHighest
	g.Expect(renderClusterRules(t, d.Policy.Rules)).To(Equal([]string{
		fmt.Sprintf("tier=0 dir=0 action=1 prio=%d sub=0 pods=[10] any=false peers=[10.244.2.5/32 10.244.2.6/32] ports=[{6 8080 0}]", top),
		fmt.Sprintf("tier=0 dir=0 action=1 prio=%d sub=1 pods=[11] any=false peers=[10.244.2.5/32 10.244.2.6/32] ports=[{6 9090 0}]", top),
		fmt.Sprintf("tier=0 dir=1 action=0 prio=%d sub=0 pods=[10 11] any=false peers=[10.244.2.6/32] ports=[{6 7070 0}]", top),
	}))
	g.Expect(d.Rules).To(Equal(2))
}

// TestComputeClusterNodesPeers: a nodes peer is the addresses of the Nodes its selector selects,
// looked up by the selector as the API server parses it (an empty selector: every Node); without
// Node watches, or before its watch listed, it matches nothing and says so.
func TestComputeClusterNodesPeers(t *testing.T) {
	g := NewWithT(t)
	teamA := cnpv1beta1.ClusterNetworkPolicySubject{Namespaces: sel(map[string]string{"team": "a"})}
	workers := cnpv1beta1.ClusterNetworkPolicyEgressPeer{Nodes: sel(map[string]string{"role": "worker", "zone": "z1"})}
	every := cnpv1beta1.ClusterNetworkPolicyEgressPeer{Nodes: &metav1.LabelSelector{}}
	policies := []cnpv1beta1.ClusterNetworkPolicy{
		cnp("to-workers", cnpv1beta1.AdminTier, 1, teamA, cnpv1beta1.ClusterNetworkPolicySpec{Egress: []cnpv1beta1.ClusterNetworkPolicyEgressRule{
			egressTo(cnpv1beta1.ClusterNetworkPolicyRuleActionDeny, workers),
		}}),
		cnp("to-every-node", cnpv1beta1.BaselineTier, 1, teamA, cnpv1beta1.ClusterNetworkPolicySpec{Egress: []cnpv1beta1.ClusterNetworkPolicyEgressRule{
			egressTo(cnpv1beta1.ClusterNetworkPolicyRuleActionDeny, every),
		}}),
	}
	selectors, invalid := NodePeerSelectors(policies)
	g.Expect(invalid).To(BeEmpty())
	g.Expect(selectors).To(Equal(map[string]bool{"role=worker,zone=z1": true, "": true}))

	in := testInputs()
	in.NodePeers = map[string][]netip.Addr{
		"role=worker,zone=z1": {netip.MustParseAddr("192.168.0.11"), netip.MustParseAddr("192.168.0.12")},
		"":                    {netip.MustParseAddr("192.168.0.10"), netip.MustParseAddr("192.168.0.11"), netip.MustParseAddr("192.168.0.12")},
	}
	d := ComputeCluster(policies, in)
	rules := renderClusterRules(t, d.Policy.Rules)
	g.Expect(rules).To(ConsistOf(
		ContainSubstring("tier=0 dir=1 action=1 prio=60000 pods=[10 11] any=false peers=[192.168.0.11/32 192.168.0.12/32]"),
		ContainSubstring("tier=1 dir=1 action=1 prio=60000 pods=[10 11] any=false peers=[192.168.0.10/32 192.168.0.11/32 192.168.0.12/32]")))
	g.Expect(d.Unsupported).To(BeEmpty())

	delete(in.NodePeers, "")
	d = ComputeCluster(policies, in)
	g.Expect(d.Unsupported["to-every-node"]).To(ConsistOf(ContainSubstring("not listed yet")))
	in.NodePeers = nil
	d = ComputeCluster(policies, in)
	g.Expect(d.Unsupported["to-workers"]).To(ConsistOf(ContainSubstring("nodes peers are not realised by this agent")))
	g.Expect(d.Policy.Rules).To(BeEmpty(), "a nodes peer not realised matches nothing")

	bad := cnp("bad", cnpv1beta1.AdminTier, 2, teamA, cnpv1beta1.ClusterNetworkPolicySpec{Egress: []cnpv1beta1.ClusterNetworkPolicyEgressRule{
		egressTo(cnpv1beta1.ClusterNetworkPolicyRuleActionDeny, cnpv1beta1.ClusterNetworkPolicyEgressPeer{Nodes: &metav1.LabelSelector{
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "role", Operator: "Sometimes"}}}}),
	}})
	_, invalid = NodePeerSelectors([]cnpv1beta1.ClusterNetworkPolicy{bad})
	g.Expect(invalid).To(HaveKey("bad"))
}

// TestTrimNode keeps a Node's name, labels and addresses and drops the rest (conditions, images).
func TestTrimNode(t *testing.T) {
	g := NewWithT(t)
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", ResourceVersion: "7", Labels: map[string]string{"role": "worker"}, Annotations: map[string]string{"a": "b"}},
		Status: corev1.NodeStatus{
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.0.11"}},
			Images:    []corev1.ContainerImage{{Names: []string{"big"}, SizeBytes: 1 << 30}},
		},
	}
	out, err := TrimNode(n)
	g.Expect(err).NotTo(HaveOccurred())
	trimmed := out.(*corev1.Node)
	g.Expect(trimmed.Name).To(Equal("n1"))
	g.Expect(trimmed.Labels).To(Equal(n.Labels))
	g.Expect(trimmed.Status.Addresses).To(Equal(n.Status.Addresses))
	g.Expect(trimmed.Annotations).To(BeNil())
	g.Expect(trimmed.Status.Images).To(BeNil())
}
