package networkpolicy

import (
	"net/netip"
	"slices"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/internal/pipeline"
)

// The cluster of these tests: namespaces x (team=a) and y (team=b); on this node x/web (port 10)
// and x/db (port 11); on another node x/client and y/client.
func testInputs(policies ...networkingv1.NetworkPolicy) Inputs {
	addr := netip.MustParseAddr
	return Inputs{
		Policies:   policies,
		Namespaces: map[string]map[string]string{"x": {"team": "a"}, "y": {"team": "b"}},
		Pods: []PodInfo{
			{Namespace: "x", Name: "web", Labels: map[string]string{"app": "web"}, IPs: []netip.Addr{addr("10.244.1.5")},
				Ports: []NamedPort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 8080}}},
			{Namespace: "x", Name: "db", Labels: map[string]string{"app": "db"}, IPs: []netip.Addr{addr("10.244.1.6")},
				Ports: []NamedPort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 9090}, {Name: "sql", Protocol: corev1.ProtocolTCP, Port: 5432}}},
			{Namespace: "x", Name: "client", Labels: map[string]string{"app": "client"}, IPs: []netip.Addr{addr("10.244.2.5")}},
			{Namespace: "y", Name: "client", Labels: map[string]string{"app": "client"}, IPs: []netip.Addr{addr("10.244.2.6")},
				Ports: []NamedPort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 7070}}},
		},
		Local: []LocalPod{
			{Key: types.NamespacedName{Namespace: "x", Name: "web"}, Pod: pipeline.Pod{OFPort: 10, IP: addr("10.244.1.5")}},
			{Key: types.NamespacedName{Namespace: "x", Name: "db"}, Pod: pipeline.Pod{OFPort: 11, IP: addr("10.244.1.6")}},
		},
	}
}

func policy(name string, selector map[string]string, spec networkingv1.NetworkPolicySpec) networkingv1.NetworkPolicy {
	spec.PodSelector = metav1.LabelSelector{MatchLabels: selector}
	return networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: name, UID: types.UID(name)}, Spec: spec}
}

func sel(l map[string]string) *metav1.LabelSelector { return &metav1.LabelSelector{MatchLabels: l} }

func tcp(p int) networkingv1.NetworkPolicyPort {
	return networkingv1.NetworkPolicyPort{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(int32(p)))}
}

func named(n string) networkingv1.NetworkPolicyPort {
	return networkingv1.NetworkPolicyPort{Port: ptr.To(intstr.FromString(n))}
}

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

// ruleView is a compiled rule without its id.
type ruleView struct {
	Dir     pipeline.PolicyDirection
	Pods    []uint32
	AnyPeer bool
	Peers   []netip.Prefix
	// Classes are the prefixes of the peer classes the rule admits.
	Classes []netip.Prefix
	Ports   []pipeline.PolicyPort
}

func view(p pipeline.Policy) []ruleView {
	var out []ruleView
	prefix := map[pipeline.PolicyDirection]map[uint32]netip.Prefix{pipeline.PolicyIngress: {}, pipeline.PolicyEgress: {}}
	for _, c := range p.IngressClasses {
		prefix[pipeline.PolicyIngress][c.ID] = c.Prefix
	}
	for _, c := range p.EgressClasses {
		prefix[pipeline.PolicyEgress][c.ID] = c.Prefix
	}
	for _, r := range p.Rules {
		v := ruleView{Dir: r.Direction, AnyPeer: r.AnyPeer, Peers: r.Peers, Ports: r.Ports}
		for _, id := range r.Classes {
			v.Classes = append(v.Classes, prefix[r.Direction][id])
		}
		for _, p := range r.Pods {
			v.Pods = append(v.Pods, p.OFPort)
		}
		out = append(out, v)
	}
	return out
}

func ofports(pods []pipeline.Pod) []uint32 {
	var out []uint32
	for _, p := range pods {
		out = append(out, p.OFPort)
	}
	return out
}

func TestCompute(t *testing.T) {
	in, eg := pipeline.PolicyIngress, pipeline.PolicyEgress
	tcpPort := func(p, end uint16) pipeline.PolicyPort {
		return pipeline.PolicyPort{Protocol: openflow.ProtoTCP, Port: p, EndPort: end}
	}
	cases := []struct {
		name                    string
		policy                  networkingv1.NetworkPolicy
		want                    []ruleView
		ingressPods, egressPods []uint32
		unsupported             []string
	}{
		{
			name:        "deny all ingress: isolation, no rule",
			policy:      policy("deny", nil, networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}),
			ingressPods: []uint32{10, 11},
		},
		{
			name: "podSelector peer in the policy's namespace, numbered port",
			policy: policy("web", map[string]string{"app": "web"}, networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{{PodSelector: sel(map[string]string{"app": "client"})}}, Ports: []networkingv1.NetworkPolicyPort{tcp(80)},
			}}}),
			want:        []ruleView{{Dir: in, Pods: []uint32{10}, Peers: prefixes("10.244.2.5/32"), Ports: []pipeline.PolicyPort{tcpPort(80, 0)}}},
			ingressPods: []uint32{10},
		},
		{
			name: "namespaceSelector alone: every Pod of the selected namespaces",
			policy: policy("ns", map[string]string{"app": "web"}, networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel(map[string]string{"team": "b"})}},
			}}}),
			want:        []ruleView{{Dir: in, Pods: []uint32{10}, Peers: prefixes("10.244.2.6/32")}},
			ingressPods: []uint32{10},
		},
		{
			name: "namespaceSelector and podSelector together: the selected Pods of the selected namespaces",
			policy: policy("both", map[string]string{"app": "web"}, networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel(nil), PodSelector: sel(map[string]string{"app": "client"})}},
			}}}),
			want:        []ruleView{{Dir: in, Pods: []uint32{10}, Peers: prefixes("10.244.2.5/32", "10.244.2.6/32")}},
			ingressPods: []uint32{10},
		},
		{
			name: "ipBlock with except, endPort range",
			policy: policy("cidr", map[string]string{"app": "db"}, networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/16", Except: []string{"10.0.1.0/24"}}}},
				Ports: []networkingv1.NetworkPolicyPort{{Port: ptr.To(intstr.FromInt32(80)), EndPort: ptr.To(int32(85))}},
			}}}),
			// The exception is a class of its own that the rule does not admit.
			want: []ruleView{{Dir: in, Pods: []uint32{11}, Classes: prefixes("10.0.0.0/16"),
				Ports: []pipeline.PolicyPort{tcpPort(80, 85)}}},
			ingressPods: []uint32{11},
		},
		{
			name: "a named ingress port resolves per target Pod: one rule per port number",
			policy: policy("named", nil, networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{
				Ports: []networkingv1.NetworkPolicyPort{named("http")},
			}}}),
			want: []ruleView{
				{Dir: in, Pods: []uint32{10}, AnyPeer: true, Ports: []pipeline.PolicyPort{tcpPort(8080, 0)}},
				{Dir: in, Pods: []uint32{11}, AnyPeer: true, Ports: []pipeline.PolicyPort{tcpPort(9090, 0)}},
			},
			ingressPods: []uint32{10, 11},
		},
		{
			name: "a named egress port resolves per destination Pod; a Pod without the name gets nothing",
			policy: policy("egress", map[string]string{"app": "web"}, networkingv1.NetworkPolicySpec{
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
				Egress: []networkingv1.NetworkPolicyEgressRule{{
					To:    []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel(nil), PodSelector: sel(map[string]string{"app": "client"})}, {PodSelector: sel(map[string]string{"app": "db"})}},
					Ports: []networkingv1.NetworkPolicyPort{named("http")},
				}},
			}),
			want: []ruleView{
				{Dir: eg, Pods: []uint32{10}, Peers: prefixes("10.244.2.6/32"), Ports: []pipeline.PolicyPort{tcpPort(7070, 0)}},
				{Dir: eg, Pods: []uint32{10}, Peers: prefixes("10.244.1.6/32"), Ports: []pipeline.PolicyPort{tcpPort(9090, 0)}},
			},
			egressPods: []uint32{10},
		},
		{
			name: "policyTypes left empty: Ingress, and Egress since the policy has egress rules",
			policy: policy("default-types", map[string]string{"app": "db"}, networkingv1.NetworkPolicySpec{
				Egress: []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "8.8.8.8/32"}}}}},
			}),
			want:        []ruleView{{Dir: eg, Pods: []uint32{11}, Peers: prefixes("8.8.8.8/32")}},
			ingressPods: []uint32{11}, egressPods: []uint32{11},
		},
		{
			name: "SCTP ports are reported and allow nothing; the TCP port of the same rule stays",
			policy: policy("sctp", map[string]string{"app": "db"}, networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolSCTP), Port: ptr.To(intstr.FromInt32(9))}, tcp(5432)},
			}}}),
			want:        []ruleView{{Dir: in, Pods: []uint32{11}, AnyPeer: true, Ports: []pipeline.PolicyPort{tcpPort(5432, 0)}}},
			ingressPods: []uint32{11},
			unsupported: []string{"ingress rule 1: SCTP port 9"},
		},
		{
			name: "peers that match no Pod: the rule allows nothing and has no flows",
			policy: policy("nobody", map[string]string{"app": "db"}, networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{{PodSelector: sel(map[string]string{"app": "nobody"})}},
			}}}),
			ingressPods: []uint32{11},
		},
		{
			name: "dual-stack: a rule whose only peer is an IPv6 ipBlock admits nothing (never every peer)",
			policy: policy("v6only", map[string]string{"app": "db"}, networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "::/0"}}},
			}}}),
			ingressPods: []uint32{11},
		},
		{
			name: "dual-stack: IPv6 blocks and exceptions beside IPv4 ones neither widen nor narrow them",
			policy: policy("mixed", map[string]string{"app": "db"}, networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{
					{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/16", Except: []string{"10.0.1.0/24", "fd00::/8"}}},
					{IPBlock: &networkingv1.IPBlock{CIDR: "fd00::/8", Except: []string{"fd00:1::/32"}}},
					{IPBlock: &networkingv1.IPBlock{CIDR: "192.0.2.0/24", Except: []string{"::/0"}}},
				},
			}}}),
			want:        []ruleView{{Dir: in, Pods: []uint32{11}, Peers: prefixes("192.0.2.0/24"), Classes: prefixes("10.0.0.0/16")}},
			ingressPods: []uint32{11},
		},
		{
			name:   "a policy selecting no local Pod isolates nothing here",
			policy: policy("elsewhere", map[string]string{"app": "client"}, networkingv1.NetworkPolicySpec{}),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			d := Compute(testInputs(tc.policy), &conjIDs{})
			g.Expect(view(d.Policy)).To(Equal(tc.want))
			g.Expect(ofports(d.Policy.IngressIsolated)).To(Equal(tc.ingressPods))
			g.Expect(ofports(d.Policy.EgressIsolated)).To(Equal(tc.egressPods))
			g.Expect(d.Unsupported[types.NamespacedName{Namespace: "x", Name: tc.policy.Name}]).To(Equal(tc.unsupported))
			g.Expect(d.Rules).To(Equal(len(tc.want)))
		})
	}
}

// TestComputeKeepsIDs: a change of one rule's peers keeps every rule's conjunction id, so that only
// the flows of the dimension that changed are rewritten.
func TestComputeKeepsIDs(t *testing.T) {
	g := NewWithT(t)
	np := policy("web", map[string]string{"app": "web"}, networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{
		{From: []networkingv1.NetworkPolicyPeer{{PodSelector: sel(map[string]string{"app": "client"})}}},
		{Ports: []networkingv1.NetworkPolicyPort{tcp(443)}},
	}})
	ids := &conjIDs{}
	in := testInputs(np)
	before := Compute(in, ids)
	ids.keepOnly(before.ids, before.Policy.IngressClasses, before.Policy.EgressClasses)
	in.Pods[2].Labels = map[string]string{"app": "other"}
	in.Pods[3].Namespace = "x"
	after := Compute(in, ids)
	g.Expect(after.Policy.Rules).To(HaveLen(2))
	g.Expect(after.Policy.Rules[0].ID).To(Equal(before.Policy.Rules[0].ID))
	g.Expect(after.Policy.Rules[0].Peers).To(Equal(prefixes("10.244.2.6/32")))
	g.Expect(after.Policy.Rules[1].ID).To(Equal(before.Policy.Rules[1].ID))
}

func TestTrimmedPodInfo(t *testing.T) {
	g := NewWithT(t)
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "a", Labels: map[string]string{"k": "v"}},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Ports: []corev1.ContainerPort{{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP}, {ContainerPort: 1}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: "10.244.1.9"}, {IP: "fd00::9"}}}}
	info, ok := podInfo(p)
	g.Expect(ok).To(BeTrue())
	g.Expect(info.IPs).To(Equal([]netip.Addr{netip.MustParseAddr("10.244.1.9")}))
	g.Expect(info.Ports).To(Equal([]NamedPort{{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53}}))
	p.Spec.HostNetwork = true
	_, ok = podInfo(p)
	g.Expect(ok).To(BeFalse(), "host-network Pods are not policy peers")
}

// TestPeerChangeRewritesOneDimension: a Pod that starts matching a rule's peers adds exactly one
// flow (its address in the rule's peer clause); nothing else of the node's policy flows changes.
func TestPeerChangeRewritesOneDimension(t *testing.T) {
	g := NewWithT(t)
	np := policy("web", map[string]string{"app": "web"}, networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{
		From:  []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel(nil), PodSelector: sel(map[string]string{"app": "client"})}},
		Ports: []networkingv1.NetworkPolicyPort{tcp(80), tcp(443)},
	}}})
	node := pipeline.Node{NodeIP: netip.MustParseAddr("192.168.10.11"), GatewayIP: netip.MustParseAddr("10.244.1.1")}
	ids := &conjIDs{}
	in := testInputs(np)
	in.Pods[3].Labels = map[string]string{"app": "other"}
	before := flowSet(node.PolicyFlows(Compute(in, ids).Policy))
	in.Pods[3].Labels = map[string]string{"app": "client"}
	after := flowSet(node.PolicyFlows(Compute(in, ids).Policy))
	var added, removed []string
	for f := range after {
		if !before[f] {
			added = append(added, f)
		}
	}
	for f := range before {
		if !after[f] {
			removed = append(removed, f)
		}
	}
	g.Expect(removed).To(BeEmpty())
	g.Expect(added).To(ConsistOf(MatchRegexp(`^cookie=0x[0-9a-f]+, table=90, priority=200,ip,nw_src=10\.244\.2\.6 actions=conjunction\(\d+,1/3\)$`)))
}

func flowSet(flows []openflow.Flow) map[string]bool {
	out := map[string]bool{}
	for _, f := range flows {
		out[f.String()] = true
	}
	return out
}

// TestPeersKey: lists of peers share a memo key exactly when they are equal.
func TestPeersKey(t *testing.T) {
	g := NewWithT(t)
	block := func(cidr string, except ...string) networkingv1.NetworkPolicyPeer {
		return networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: cidr, Except: except}}
	}
	pods := networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}
	lists := [][]networkingv1.NetworkPolicyPeer{
		nil,
		{block("10.0.0.0/8")},
		{block("10.0.0.0/8", "10.1.0.0/16")},
		{block("10.0.0.0/8"), block("10.1.0.0/16")},
		{block("10.0.0.0/8", "10.1.0.0/16", "10.2.0.0/16")},
		{block("10.0.0.0/8", "10.1.0.0/16"), block("10.2.0.0/16")},
		// Not valid CIDRs (the API server refuses them), but the key must not rely on that.
		{block("10.0.0.0/8", "10.1.0.0/1610.2.0.0/16")},
		{pods},
		{pods, block("10.0.0.0/8")},
		{block("10.0.0.0/8"), pods},
	}
	keys := map[string]int{}
	for i, l := range lists {
		for _, ns := range []string{"x", "y"} {
			k := peersKey(ns, l)
			g.Expect(keys).NotTo(HaveKey(k), "list %d in %s has the key of list %d", i, ns, keys[k])
			keys[k] = i
			g.Expect(peersKey(ns, slices.Clone(l))).To(Equal(k), "an equal list has another key")
		}
	}
}

// TestUniquePrefixes: sorted by address then length, each once.
func TestUniquePrefixes(t *testing.T) {
	g := NewWithT(t)
	p := netip.MustParsePrefix
	g.Expect(uniquePrefixes([]netip.Prefix{p("10.0.0.2/32"), p("10.0.0.0/24"), p("9.0.0.0/8"), p("10.0.0.0/16"), p("10.0.0.2/32"), p("10.0.0.0/24")})).
		To(Equal([]netip.Prefix{p("9.0.0.0/8"), p("10.0.0.0/16"), p("10.0.0.0/24"), p("10.0.0.2/32")}))
	g.Expect(uniquePrefixes(nil)).To(BeEmpty())
}

// TestMergedRulesCountEachPodUnderItsRule: two policies admitting the same peers on the same port
// to different Pods are one conjunction, whose counters name each Pod's own rule: the merged rule
// has the lowest id, and the Pod only the other rule selects is counted under that rule's id.
func TestMergedRulesCountEachPodUnderItsRule(t *testing.T) {
	g := NewWithT(t)
	admit := func(name, app string) networkingv1.NetworkPolicy {
		return policy(name, map[string]string{"app": app}, networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{
			From: []networkingv1.NetworkPolicyPeer{{PodSelector: sel(map[string]string{"app": "client"})}}, Ports: []networkingv1.NetworkPolicyPort{tcp(80)}}}})
	}
	var ids conjIDs
	d := Compute(testInputs(admit("a-web", "web"), admit("b-db", "db")), &ids)
	g.Expect(d.Policy.Rules).To(HaveLen(1), "one conjunction")
	r := d.Policy.Rules[0]
	webID, dbID := ids.ID(RuleKey{Policy: "a-web", Direction: pipeline.PolicyIngress, Ports: "6/80-0,"}), ids.ID(RuleKey{Policy: "b-db", Direction: pipeline.PolicyIngress, Ports: "6/80-0,"})
	g.Expect(webID).NotTo(Equal(dbID))
	g.Expect(r.ID).To(Equal(min(webID, dbID)))
	// web (port 10) is a-web's, db (port 11) b-db's; only the one not under the merged id has an entry.
	want := map[uint32]uint32{10: webID, 11: dbID}
	for port, id := range want {
		if id == r.ID {
			delete(want, port)
		}
	}
	g.Expect(r.CountAs).To(Equal(want))
	g.Expect(d.Index.Rules[webID].Policy.Name).To(Equal("a-web"))
	g.Expect(d.Index.Rules[dbID].Policy.Name).To(Equal("b-db"))
}
