package networkpolicy

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	cnpv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/winnet-io/winnet/controllers/nodenetwork"
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

// TestComputeClusterBand: the rules beyond a tier's band cannot have a priority of their own: a
// Deny or Pass rule fails closed, a drop of every peer and port of its subjects below the band (and
// above the next tier); an Accept rule is not realised. Each is said, the others kept.
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
	beyond := len(policies)*25 - clusterRulesPerBand
	tcp22 := []cnpv1beta1.ClusterNetworkPolicyProtocol{{TCP: &cnpv1beta1.ClusterNetworkPolicyProtocolTCP{DestinationPort: &cnpv1beta1.Port{Number: 22}}}}
	network := cnpv1beta1.ClusterNetworkPolicyEgressPeer{Networks: []cnpv1beta1.CIDR{"8.8.4.0/24"}}
	policies = append(policies, cnp("last", cnpv1beta1.AdminTier, 1, subject, cnpv1beta1.ClusterNetworkPolicySpec{Egress: []cnpv1beta1.ClusterNetworkPolicyEgressRule{
		{Action: cnpv1beta1.ClusterNetworkPolicyRuleActionAccept, To: []cnpv1beta1.ClusterNetworkPolicyEgressPeer{network}, Protocols: tcp22},
		{Action: cnpv1beta1.ClusterNetworkPolicyRuleActionPass, To: []cnpv1beta1.ClusterNetworkPolicyEgressPeer{network}, Protocols: tcp22},
		{Action: cnpv1beta1.ClusterNetworkPolicyRuleActionDeny, To: []cnpv1beta1.ClusterNetworkPolicyEgressPeer{network}, Protocols: tcp22},
	}}))
	d := ComputeCluster(policies, testInputs())
	var inBand, below []pipeline.ClusterRule
	for _, r := range d.Policy.Rules {
		if r.Priority >= pipeline.ClusterPriorityLowest {
			inBand = append(inBand, r)
		} else {
			below = append(below, r)
		}
	}
	g.Expect(inBand).To(HaveLen(clusterRulesPerBand))
	g.Expect(inBand[len(inBand)-1].Priority).To(Equal(pipeline.ClusterPriorityLowest))
	g.Expect(below).To(HaveLen(beyond+2), "the Deny rules beyond the band and the last policy's Pass and Deny; its Accept is not realised")
	for _, r := range below {
		g.Expect(r).To(Equal(pipeline.ClusterRule{Tier: pipeline.AdminTier, Direction: pipeline.PolicyEgress, Action: pipeline.ClusterDeny,
			Priority: pipeline.ClusterPriorityBeyondBand, Pods: []pipeline.Pod{testInputs().Local[0].Pod, testInputs().Local[1].Pod}, AnyPeer: true}))
	}
	g.Expect(d.Refused["last"]).To(Equal([]string{
		"egress rule 0: beyond the 59001 rules of the Admin tier's egress priority band: not realised",
		"egress rule 1: beyond the 59001 rules of the Admin tier's egress priority band: its subjects' traffic to and from every peer, on every port, is dropped instead, below the band (fail closed)",
		"egress rule 2: beyond the 59001 rules of the Admin tier's egress priority band: its subjects' traffic to and from every peer, on every port, is dropped instead, below the band (fail closed)",
	}))
	first := d.Index[pipeline.ClusterRuleObject(pipeline.AdminTier, pipeline.PolicyEgress, pipeline.ClusterPriorityBeyondBand)]
	g.Expect(first.FailClosed).To(BeTrue())
	g.Expect(first.Action).To(Equal(nodenetwork.ActionDeny))
	g.Expect(first.Policy.Name).To(Equal(fmtNum(clusterRulesPerBand/25)), "the first rule beyond the band names the priority they share")
	g.Expect(pipeline.CheckWindows(pipeline.Datapath{Flows: pipeline.Node{}.ClusterPolicyFlows(pipeline.ClusterPolicy{Rules: below})})).To(BeEmpty())
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
// Node watches, or before its watch listed, it fails closed in a Deny rule (every peer) and says so.
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
	g.Expect(d.Unsupported["to-workers"]).To(ConsistOf(And(ContainSubstring("nodes peers are not realised by this agent"),
		ContainSubstring("every peer is dropped instead (fail closed)"))))
	g.Expect(renderClusterRules(t, d.Policy.Rules)).To(ConsistOf(
		ContainSubstring("tier=0 dir=1 action=1 prio=60000 pods=[10 11] any=true peers=[]"),
		ContainSubstring("tier=1 dir=1 action=1 prio=60000 pods=[10 11] any=true peers=[]")), "a Deny rule's nodes peer not realised fails closed: every peer")

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

// TestComputeClusterFailClosed: a Deny or Pass rule (or one of an unknown action) that cannot be
// realised as written drops a superset of what it matches, never wider than its subjects: every
// port of its peers for a protocol entry winnet does not know, every peer for a peer it cannot
// resolve; a tier winnet does not know drops ahead of the Admin tier. An Accept rule in the same
// case accepts a subset or nothing. Each says why, on the policy and in the rule's name.
func TestComputeClusterFailClosed(t *testing.T) {
	teamA := cnpv1beta1.ClusterNetworkPolicySubject{Namespaces: sel(map[string]string{"team": "a"})}
	clients := cnpv1beta1.ClusterNetworkPolicyEgressPeer{Pods: &cnpv1beta1.NamespacedPod{PodSelector: *sel(map[string]string{"app": "client"})}}
	tcp80 := cnpv1beta1.ClusterNetworkPolicyProtocol{TCP: &cnpv1beta1.ClusterNetworkPolicyProtocolTCP{DestinationPort: &cnpv1beta1.Port{Number: 80}}}
	// newer is a protocol entry or a peer of a newer API than winnet's: its field is not in
	// winnet's Go types, which decode it empty.
	newerProtocol, newerPeer := cnpv1beta1.ClusterNetworkPolicyProtocol{}, cnpv1beta1.ClusterNetworkPolicyEgressPeer{}
	domains := cnpv1beta1.ClusterNetworkPolicyEgressPeer{DomainNames: []cnpv1beta1.DomainName{"example.com"}}
	const (
		accept = cnpv1beta1.ClusterNetworkPolicyRuleActionAccept
		deny   = cnpv1beta1.ClusterNetworkPolicyRuleActionDeny
		pass   = cnpv1beta1.ClusterNetworkPolicyRuleActionPass
	)
	for _, tc := range []struct {
		name      string
		tier      cnpv1beta1.Tier
		action    cnpv1beta1.ClusterNetworkPolicyRuleAction
		peers     []cnpv1beta1.ClusterNetworkPolicyEgressPeer
		protocols []cnpv1beta1.ClusterNetworkPolicyProtocol
		// want is the rule as realised (none: no flow), first whether it is ahead of the Admin
		// policy "admin".
		want       []string
		ahead      bool
		failClosed bool
		note       string
	}{
		{name: "Deny, an unknown protocol field: every port of its peers", tier: cnpv1beta1.AdminTier, action: deny,
			peers: []cnpv1beta1.ClusterNetworkPolicyEgressPeer{clients}, protocols: []cnpv1beta1.ClusterNetworkPolicyProtocol{tcp80, newerProtocol},
			want: []string{"action=1 pods=[10 11] any=false peers=[10.244.2.5/32 10.244.2.6/32] ports=[]"}, failClosed: true,
			note: "egress rule 0: protocol 1: no field winnet knows: every port of its peers is dropped instead (fail closed)"},
		{name: "Pass, an unknown protocol field: a drop of every port of its peers", tier: cnpv1beta1.AdminTier, action: pass,
			peers: []cnpv1beta1.ClusterNetworkPolicyEgressPeer{clients}, protocols: []cnpv1beta1.ClusterNetworkPolicyProtocol{newerProtocol},
			want: []string{"action=1 pods=[10 11] any=false peers=[10.244.2.5/32 10.244.2.6/32] ports=[]"}, failClosed: true,
			note: "egress rule 0: protocol 0: no field winnet knows: every port of its peers is dropped instead (fail closed)"},
		{name: "Accept, an unknown protocol field alone: not realised", tier: cnpv1beta1.AdminTier, action: accept,
			peers: []cnpv1beta1.ClusterNetworkPolicyEgressPeer{clients}, protocols: []cnpv1beta1.ClusterNetworkPolicyProtocol{newerProtocol},
			note: "egress rule 0: protocol 0: no field winnet knows: it matches nothing (fail closed)"},
		{name: "Accept, an unknown protocol field beside TCP 80: TCP 80 only", tier: cnpv1beta1.AdminTier, action: accept,
			peers: []cnpv1beta1.ClusterNetworkPolicyEgressPeer{clients}, protocols: []cnpv1beta1.ClusterNetworkPolicyProtocol{tcp80, newerProtocol},
			want: []string{"action=0 pods=[10 11] any=false peers=[10.244.2.5/32 10.244.2.6/32] ports=[{6 80 0}]"},
			note: "egress rule 0: protocol 1: no field winnet knows: it matches nothing (fail closed)"},
		{name: "an unknown action: a drop of its peers and ports", tier: cnpv1beta1.AdminTier, action: "Quarantine",
			peers: []cnpv1beta1.ClusterNetworkPolicyEgressPeer{clients}, protocols: []cnpv1beta1.ClusterNetworkPolicyProtocol{tcp80},
			want: []string{"action=1 pods=[10 11] any=false peers=[10.244.2.5/32 10.244.2.6/32] ports=[{6 80 0}]"}, failClosed: true,
			note: `egress rule 0: action "Quarantine" is unknown: it drops instead (fail closed)`},
		{name: "Deny, a peer of an unknown field: every peer", tier: cnpv1beta1.BaselineTier, action: deny,
			peers: []cnpv1beta1.ClusterNetworkPolicyEgressPeer{clients, newerPeer}, protocols: []cnpv1beta1.ClusterNetworkPolicyProtocol{tcp80},
			want: []string{"action=1 pods=[10 11] any=true peers=[10.244.2.5/32 10.244.2.6/32] ports=[{6 80 0}]"}, failClosed: true,
			note: "egress rule 0: peer 1: no field winnet knows: every peer is dropped instead (fail closed)"},
		{name: "Pass, a domainNames peer: a drop of every peer", tier: cnpv1beta1.AdminTier, action: pass,
			peers: []cnpv1beta1.ClusterNetworkPolicyEgressPeer{domains}, protocols: []cnpv1beta1.ClusterNetworkPolicyProtocol{tcp80},
			want: []string{"action=1 pods=[10 11] any=true peers=[] ports=[{6 80 0}]"}, failClosed: true,
			note: "egress rule 0: peer 0: domainNames peers are not realised (winnet resolves no DNS in the datapath): every peer is dropped instead (fail closed)"},
		{name: "Accept, a peer of an unknown field: not realised", tier: cnpv1beta1.AdminTier, action: accept,
			peers: []cnpv1beta1.ClusterNetworkPolicyEgressPeer{newerPeer},
			note:  "egress rule 0: peer 0: no field winnet knows: it matches nothing (fail closed)"},
		{name: "a tier winnet does not know: its Deny drops ahead of the Admin tier", tier: "Emergency", action: deny,
			peers: []cnpv1beta1.ClusterNetworkPolicyEgressPeer{clients}, protocols: []cnpv1beta1.ClusterNetworkPolicyProtocol{tcp80},
			want: []string{"action=1 pods=[10 11] any=false peers=[10.244.2.5/32 10.244.2.6/32] ports=[{6 80 0}]"}, ahead: true, failClosed: true,
			note: `tier "Emergency" is unknown: its Deny and Pass rules drop instead, ahead of every Admin rule (fail closed); its Accept rules are not realised`},
		{name: "a tier winnet does not know: its Pass drops ahead of the Admin tier", tier: "Emergency", action: pass,
			peers: []cnpv1beta1.ClusterNetworkPolicyEgressPeer{clients},
			want:  []string{"action=1 pods=[10 11] any=false peers=[10.244.2.5/32 10.244.2.6/32] ports=[]"}, ahead: true, failClosed: true,
			note: `tier "Emergency" is unknown`},
		{name: "a tier winnet does not know: its Accept is not realised", tier: "Emergency", action: accept,
			peers: []cnpv1beta1.ClusterNetworkPolicyEgressPeer{clients}, note: `tier "Emergency" is unknown`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			// The policy under test has a higher priority number than "admin" (it comes after it
			// in the Admin tier), which accepts TCP 80 to the clients.
			policies := []cnpv1beta1.ClusterNetworkPolicy{
				cnp("admin", cnpv1beta1.AdminTier, 1, teamA, cnpv1beta1.ClusterNetworkPolicySpec{Egress: []cnpv1beta1.ClusterNetworkPolicyEgressRule{
					{Action: accept, To: []cnpv1beta1.ClusterNetworkPolicyEgressPeer{clients}, Protocols: []cnpv1beta1.ClusterNetworkPolicyProtocol{tcp80}}}}),
				cnp("p", tc.tier, 50, teamA, cnpv1beta1.ClusterNetworkPolicySpec{Egress: []cnpv1beta1.ClusterNetworkPolicyEgressRule{
					{Action: tc.action, To: tc.peers, Protocols: tc.protocols}}}),
			}
			policies[1].Generation = 4
			d := ComputeCluster(policies, testInputs())
			var mine []pipeline.ClusterRule
			var adminPriority uint16
			for _, r := range d.Policy.Rules {
				name := d.Index[pipeline.ClusterRuleObject(r.Tier, r.Direction, r.Priority)]
				if name.Policy.Name == "admin" {
					adminPriority = r.Priority
					continue
				}
				mine = append(mine, r)
				g.Expect(name.FailClosed).To(Equal(tc.failClosed), "the rule's name says whether it fails closed")
				if tc.failClosed {
					g.Expect(name.Action).To(Equal(nodenetwork.ActionDeny))
				}
				if tc.ahead {
					g.Expect(r.Tier).To(Equal(pipeline.AdminTier))
					g.Expect(r.Priority).To(BeNumerically(">", adminPriority), "ahead of the Admin tier's rules")
				}
			}
			var got []string
			for _, r := range renderClusterRules(t, mine) {
				got = append(got, r[strings.Index(r, "action="):strings.Index(r, " prio=")]+r[strings.Index(r, " pods="):])
			}
			if tc.want == nil {
				g.Expect(got).To(BeEmpty(), "not realised: no flow")
			} else {
				g.Expect(got).To(Equal(tc.want))
			}
			g.Expect(strings.Join(append(d.Refused["p"], d.Unsupported["p"]...), "; ")).To(ContainSubstring(tc.note))
			g.Expect(d.Applied).To(HaveKey("p"))
			legacy, report := d.Report()
			g.Expect(report.NotRealised).To(ConsistOf(HaveField("NotRealised", ContainSubstring(tc.note))), "the condition says why")
			g.Expect(legacy).To(ContainElement(HaveField("NotRealised", Not(BeEmpty()))))
			g.Expect(pipeline.CheckWindows(pipeline.Datapath{Flows: pipeline.Node{}.ClusterPolicyFlows(d.Policy)})).To(BeEmpty())
		})
	}
}

// TestComputeClusterPartLimit: a rule whose named ports resolve to more sets of ports than
// pipeline.MaxClusterSubRules cannot be realised part by part: a Deny or Pass rule drops every
// port of its peers instead (one part), an Accept rule is not realised.
func TestComputeClusterPartLimit(t *testing.T) {
	in := testInputs()
	many := pipeline.MaxClusterSubRules + 1
	for i := range many {
		in.Pods = append(in.Pods, PodInfo{Namespace: "y", Name: fmt.Sprintf("many-%d", i), Labels: map[string]string{"app": "many"},
			IPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 245, byte(i >> 8), byte(i)})}, Ports: []NamedPort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: uint16(1000 + i)}}})
	}
	teamA := cnpv1beta1.ClusterNetworkPolicySubject{Namespaces: sel(map[string]string{"team": "a"})}
	peers := []cnpv1beta1.ClusterNetworkPolicyEgressPeer{{Pods: &cnpv1beta1.NamespacedPod{PodSelector: *sel(map[string]string{"app": "many"})}}}
	http := []cnpv1beta1.ClusterNetworkPolicyProtocol{{DestinationNamedPort: "http"}}
	for _, action := range []cnpv1beta1.ClusterNetworkPolicyRuleAction{cnpv1beta1.ClusterNetworkPolicyRuleActionDeny,
		cnpv1beta1.ClusterNetworkPolicyRuleActionPass, cnpv1beta1.ClusterNetworkPolicyRuleActionAccept} {
		t.Run(string(action), func(t *testing.T) {
			g := NewWithT(t)
			d := ComputeCluster([]cnpv1beta1.ClusterNetworkPolicy{cnp("named", cnpv1beta1.AdminTier, 1, teamA, cnpv1beta1.ClusterNetworkPolicySpec{
				Egress: []cnpv1beta1.ClusterNetworkPolicyEgressRule{{Action: action, To: peers, Protocols: http}}})}, in)
			name := d.Index[pipeline.ClusterRuleObject(pipeline.AdminTier, pipeline.PolicyEgress, pipeline.ClusterPriorityHighest)]
			if action == cnpv1beta1.ClusterNetworkPolicyRuleActionAccept {
				g.Expect(d.Policy.Rules).To(BeEmpty(), "not realised: no flow")
				g.Expect(d.Refused["named"]).To(Equal([]string{fmt.Sprintf("egress rule 0: its named ports resolve to %d sets of ports, above %d: not realised", many, pipeline.MaxClusterSubRules)}))
				g.Expect(name.FailClosed).To(BeFalse())
				return
			}
			g.Expect(d.Policy.Rules).To(HaveLen(1))
			r := d.Policy.Rules[0]
			g.Expect(r.Action).To(Equal(pipeline.ClusterDeny))
			g.Expect(r.Ports).To(BeEmpty(), "every port")
			g.Expect(r.Peers).To(HaveLen(many), "every peer Pod's address, and no other")
			g.Expect(r.AnyPeer).To(BeFalse())
			g.Expect(r.Pods).To(HaveLen(2))
			g.Expect(d.Refused["named"]).To(Equal([]string{fmt.Sprintf("egress rule 0: its named ports resolve to %d sets of ports, above %d: every port of its peers is dropped instead (fail closed)", many, pipeline.MaxClusterSubRules)}))
			g.Expect(name.FailClosed).To(BeTrue())
			g.Expect(pipeline.CheckWindows(pipeline.Datapath{Flows: pipeline.Node{}.ClusterPolicyFlows(d.Policy)})).To(BeEmpty())
		})
	}
}

// TestWarnClusterEvents: a policy that applies to the node and is not realised whole gets a
// Warning Event saying why, once per generation, its note cut to what the events API takes; a
// policy that applies elsewhere gets none from this node.
func TestWarnClusterEvents(t *testing.T) {
	g := NewWithT(t)
	rec := events.NewFakeRecorder(10)
	r := &Reconciler{Recorder: rec, NodeName: "win-1"}
	policies := []cnpv1beta1.ClusterNetworkPolicy{
		{ObjectMeta: metav1.ObjectMeta{Name: "here", UID: "u-here", Generation: 3}},
		{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere", UID: "u-elsewhere", Generation: 1}},
	}
	long := strings.Repeat("egress rule 0: protocol 0: no field winnet knows: every port of its peers is dropped instead (fail closed); ", 20)
	d := ClusterDesired{Applied: map[string]bool{"here": true},
		Unsupported: map[string][]string{"here": {long}, "elsewhere": {"egress rule 0: x"}}, Refused: map[string][]string{}}
	r.warnCluster(context.Background(), policies, d)
	r.warnCluster(context.Background(), policies, d)
	g.Expect(rec.Events).To(HaveLen(1))
	e := <-rec.Events
	g.Expect(e).To(HavePrefix("Warning " + ClusterUnsupportedReason + " On node win-1: egress rule 0: protocol 0: no field winnet knows: every port of its peers is dropped instead (fail closed)"))
	g.Expect(len(strings.TrimPrefix(e, "Warning "+ClusterUnsupportedReason+" "))).To(BeNumerically("<=", maxEventNote))
}

// TestComputeClusterIPv6Networks: in a dual-stack cluster, a ClusterNetworkPolicy rule whose only peers are
// IPv6 networks matches no IPv4 traffic, whatever its action (a Deny or Pass rule drops nothing, an Accept
// rule admits nothing), without a note; IPv6 networks beside IPv4 ones neither widen nor narrow them.
func TestComputeClusterIPv6Networks(t *testing.T) {
	teamA := cnpv1beta1.ClusterNetworkPolicySubject{Namespaces: sel(map[string]string{"team": "a"})}
	v6 := cnpv1beta1.ClusterNetworkPolicyEgressPeer{Networks: []cnpv1beta1.CIDR{"fd00::/8", "::/0"}}
	mixed := cnpv1beta1.ClusterNetworkPolicyEgressPeer{Networks: []cnpv1beta1.CIDR{"::/0", "8.8.8.0/24", "fd00:10:244::/48"}}
	for _, action := range []cnpv1beta1.ClusterNetworkPolicyRuleAction{
		cnpv1beta1.ClusterNetworkPolicyRuleActionDeny, cnpv1beta1.ClusterNetworkPolicyRuleActionPass, cnpv1beta1.ClusterNetworkPolicyRuleActionAccept,
	} {
		t.Run(string(action), func(t *testing.T) {
			g := NewWithT(t)
			d := ComputeCluster([]cnpv1beta1.ClusterNetworkPolicy{
				cnp("only-v6", cnpv1beta1.AdminTier, 5, teamA, cnpv1beta1.ClusterNetworkPolicySpec{Egress: []cnpv1beta1.ClusterNetworkPolicyEgressRule{egressTo(action, v6)}}),
				cnp("mixed", cnpv1beta1.AdminTier, 6, teamA, cnpv1beta1.ClusterNetworkPolicySpec{Egress: []cnpv1beta1.ClusterNetworkPolicyEgressRule{egressTo(action, mixed)}}),
			}, testInputs())
			for _, r := range d.Policy.Rules {
				g.Expect(r.AnyPeer).To(BeFalse(), "no rule matches every peer")
				g.Expect(r.Peers).NotTo(BeEmpty(), "a rule with no IPv4 peer is not realised as one matching anything")
				g.Expect(r.Peers).To(ConsistOf(netip.MustParsePrefix("8.8.8.0/24")), "the mixed rule's IPv4 network, no more, no less")
			}
			g.Expect(d.Policy.Rules).NotTo(BeEmpty(), "the mixed rule is realised")
			g.Expect(d.Unsupported).To(BeEmpty())
			g.Expect(d.Refused).To(BeEmpty())
		})
	}
}
