package networkpolicy

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/types"
	cnpv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/nodenetwork"
	"github.com/winnet-io/winnet/internal/auditlog"
	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/internal/pipeline"
)

func TestAuditValue(t *testing.T) {
	g := NewWithT(t)
	for v, want := range map[string][2]bool{"true": {true, true}, "false": {false, true}, "True": {false, false}, "yes": {false, false}, "": {false, false}} {
		on, valid := auditValue(map[string]string{networkv1alpha1.AuditLogAnnotation: v})
		g.Expect([2]bool{on, valid}).To(Equal(want), "%q", v)
	}
	on, valid := auditValue(nil)
	g.Expect([2]bool{on, valid}).To(Equal([2]bool{false, true}))
}

// TestComputeAudit: the policies of an audited namespace have audited rules and default drops, and
// their rules are never merged (two policies admitting the same peers on the same ports stay two
// conjunctions, each naming its policy); without the agent's audit log, or in another namespace,
// nothing is audited and the rules merge as before.
func TestComputeAudit(t *testing.T) {
	same := networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{
		From: []networkingv1.NetworkPolicyPeer{{PodSelector: sel(map[string]string{"app": "client"})}}, Ports: []networkingv1.NetworkPolicyPort{tcp(80)}}}}
	for _, tc := range []struct {
		name        string
		audit       bool
		namespaces  map[string]bool
		wantRules   int
		wantAudited bool
	}{
		{"audited", true, map[string]bool{"x": true}, 2, true},
		{"annotation without the agent's log", false, map[string]bool{"x": true}, 1, false},
		{"another namespace audited", true, map[string]bool{"y": true}, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			in := testInputs(policy("a", map[string]string{"app": "web"}, same), policy("b", map[string]string{"app": "web"}, same))
			in.Audit, in.AuditNamespaces = tc.audit, tc.namespaces
			var ids conjIDs
			d := Compute(in, &ids)
			g.Expect(d.Policy.Rules).To(HaveLen(tc.wantRules))
			var names []string
			for _, r := range d.Policy.Rules {
				g.Expect(r.Audit).To(Equal(tc.wantAudited))
				names = append(names, d.Index.Rules[r.ID].Policy.Name)
			}
			if tc.wantAudited {
				g.Expect(names).To(ConsistOf("a", "b"))
				g.Expect(d.Policy.AuditIngressDrops).To(Equal(map[uint32]bool{10: true}))
			} else {
				g.Expect(d.Policy.AuditIngressDrops).To(BeEmpty())
			}
		})
	}
}

// TestComputeClusterAudit: an annotated ClusterNetworkPolicy's rules are audited; a junk value is
// not, and is reported when the policy has local subjects.
func TestComputeClusterAudit(t *testing.T) {
	g := NewWithT(t)
	in := testInputs()
	in.Audit = true
	teamA := cnpv1beta1.ClusterNetworkPolicySubject{Namespaces: sel(map[string]string{"team": "a"})}
	deny := cnpv1beta1.ClusterNetworkPolicySpec{Ingress: []cnpv1beta1.ClusterNetworkPolicyIngressRule{{Action: cnpv1beta1.ClusterNetworkPolicyRuleActionDeny,
		From: []cnpv1beta1.ClusterNetworkPolicyIngressPeer{{Namespaces: sel(nil)}}}}}
	on := cnp("on", cnpv1beta1.AdminTier, 1, teamA, deny)
	on.Annotations = map[string]string{networkv1alpha1.AuditLogAnnotation: "true"}
	junk := cnp("junk", cnpv1beta1.AdminTier, 2, teamA, deny)
	junk.Annotations = map[string]string{networkv1alpha1.AuditLogAnnotation: "yes"}
	off := cnp("off", cnpv1beta1.AdminTier, 3, teamA, deny)
	d := ComputeCluster([]cnpv1beta1.ClusterNetworkPolicy{on, junk, off}, in)
	g.Expect(d.Policy.Rules).To(HaveLen(3))
	g.Expect([]bool{d.Policy.Rules[0].Audit, d.Policy.Rules[1].Audit, d.Policy.Rules[2].Audit}).To(Equal([]bool{true, false, false}))
	g.Expect(d.AuditInvalid).To(Equal([]string{"junk"}))
	in.Audit = false
	d = ComputeCluster([]cnpv1beta1.ClusterNetworkPolicy{on, junk}, in)
	g.Expect(d.Policy.Rules[0].Audit).To(BeFalse())
	g.Expect(d.AuditInvalid).To(BeEmpty())
}

// TestAuditRecord: a packet-in's cookie names its rule through the index, for a NetworkPolicy
// rule, a default drop (the Pod from in_port or reg1) and a ClusterNetworkPolicy rule; the
// 5-tuple comes from the headers; a cookie the index does not know names nothing.
func TestAuditRecord(t *testing.T) {
	g := NewWithT(t)
	state := nodenetwork.NewState()
	index := nodenetwork.NewPolicyIndex()
	index.Rules[7] = nodenetwork.PolicyRuleName{Kind: nodenetwork.KindNetworkPolicy, Policy: types.NamespacedName{Namespace: "x", Name: "web"}, Index: 1, Action: nodenetwork.ActionAllow}
	index.EgressIsolation[10] = []types.NamespacedName{{Namespace: "x", Name: "b"}, {Namespace: "x", Name: "a"}}
	index.IngressIsolation[11] = []types.NamespacedName{{Namespace: "x", Name: "db"}}
	cluster := pipeline.ClusterRuleObject(pipeline.AdminTier, pipeline.PolicyEgress, 59990)
	index.ClusterRules[cluster] = nodenetwork.PolicyRuleName{Kind: nodenetwork.KindClusterNetworkPolicy, Policy: types.NamespacedName{Name: "deny-dns"},
		Egress: true, Index: 0, Action: nodenetwork.ActionDeny, Tier: nodenetwork.TierAdmin}
	state.SetPolicyIndex(index)
	r := &Reconciler{State: state}
	r.auditIsolations.Store(newAuditIsolations(index))
	// TCP SYN 10.244.1.5:40000 -> 10.244.2.6:8080.
	tcpFrame, _ := hex.DecodeString("aabbccddeeff0a580a000005" + "0800" + "4500002800004000400600000af401050af40206" + "9c401f90000000000000000050020000" + "00000000")
	udpFrame, _ := hex.DecodeString("aabbccddeeff0a580a000005" + "0800" + "4500002000004000401100000af401050af402060d2c0035000c0000" + "6869217e")
	now := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	cookie := func(obj uint64) uint64 { return openflow.MakeCookie(9, pipeline.CategoryPolicy, obj) }

	rec, err := r.auditRecord(openflow.PacketIn{Cookie: cookie(pipeline.AuditRuleObject(7)), Frame: tcpFrame}, now)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rec).To(Equal(auditlog.Record{Time: now, PolicyKind: "NetworkPolicy", Namespace: "x", Name: "web", Rule: "ingress[1]", Direction: "ingress", Action: "Allow",
		SrcIP: "10.244.1.5", DstIP: "10.244.2.6", Protocol: "TCP", SrcPort: 40000, DstPort: 8080}))

	rec, err = r.auditRecord(openflow.PacketIn{Cookie: cookie(pipeline.AuditDropObject(pipeline.PolicyEgress)), InPort: 10, Frame: udpFrame}, now)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rec).To(Equal(auditlog.Record{Time: now, PolicyKind: "NetworkPolicy", Namespace: "x", Name: "", Rule: "default-deny", Direction: "egress", Action: "Drop",
		IsolatedBy: []string{"a", "b"}, SrcIP: "10.244.1.5", DstIP: "10.244.2.6", Protocol: "UDP", SrcPort: 3372, DstPort: 53}))

	var regs [8]uint32
	regs[pipeline.TargetOFPortField.Reg] = 11
	rec, err = r.auditRecord(openflow.PacketIn{Cookie: cookie(pipeline.AuditDropObject(pipeline.PolicyIngress)), InPort: 3, Regs: regs, Frame: udpFrame}, now)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rec.IsolatedBy).To(Equal([]string{"db"}))
	g.Expect(rec.Direction).To(Equal("ingress"))

	rec, err = r.auditRecord(openflow.PacketIn{Cookie: cookie(cluster), Frame: udpFrame}, now)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rec).To(Equal(auditlog.Record{Time: now, PolicyKind: "ClusterNetworkPolicy", Name: "deny-dns", Tier: "Admin", Rule: "egress[0]", Direction: "egress", Action: "Deny",
		SrcIP: "10.244.1.5", DstIP: "10.244.2.6", Protocol: "UDP", SrcPort: 3372, DstPort: 53}))

	for _, p := range []openflow.PacketIn{
		{Cookie: cookie(pipeline.AuditRuleObject(8)), Frame: tcpFrame},
		{Cookie: cookie(pipeline.AuditDropObject(pipeline.PolicyEgress)), InPort: 12, Frame: tcpFrame},
		{Cookie: cookie(0), Frame: tcpFrame},
		{Cookie: cookie(pipeline.AuditRuleObject(7)), Frame: tcpFrame[:20]},
	} {
		_, err := r.auditRecord(p, now)
		g.Expect(err).To(HaveOccurred())
	}
}

// TestComputeAuditSuspended: with namespace x and one ClusterNetworkPolicy suspended, their
// rules and x's default drops lose their packet-ins; namespace y's and the other
// ClusterNetworkPolicy's keep them, and every flow passes the Windows datapath profile.
func TestComputeAuditSuspended(t *testing.T) {
	g := NewWithT(t)
	allowClient := networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{
		From: []networkingv1.NetworkPolicyPeer{{PodSelector: sel(map[string]string{"app": "client"})}}, Ports: []networkingv1.NetworkPolicyPort{tcp(80)}}}}
	inY := policy("y-api", map[string]string{"app": "api"}, allowClient)
	inY.Namespace, inY.UID = "y", "y-api"
	in := testInputs(policy("x-web", map[string]string{"app": "web"}, allowClient), inY)
	api := netip.MustParseAddr("10.244.1.7")
	in.Pods = append(in.Pods, PodInfo{Namespace: "y", Name: "api", Labels: map[string]string{"app": "api"}, IPs: []netip.Addr{api}})
	in.Local = append(in.Local, LocalPod{Key: types.NamespacedName{Namespace: "y", Name: "api"}, Pod: pipeline.Pod{OFPort: 12, IP: api}})
	teamA := cnpv1beta1.ClusterNetworkPolicySubject{Namespaces: sel(map[string]string{"team": "a"})}
	deny := cnpv1beta1.ClusterNetworkPolicySpec{Ingress: []cnpv1beta1.ClusterNetworkPolicyIngressRule{{Action: cnpv1beta1.ClusterNetworkPolicyRuleActionDeny,
		From: []cnpv1beta1.ClusterNetworkPolicyIngressPeer{{Namespaces: sel(nil)}}}}}
	flooded, quiet := cnp("flooded", cnpv1beta1.AdminTier, 1, teamA, deny), cnp("quiet", cnpv1beta1.AdminTier, 2, teamA, deny)
	for _, p := range []*cnpv1beta1.ClusterNetworkPolicy{&flooded, &quiet} {
		p.Annotations = map[string]string{networkv1alpha1.AuditLogAnnotation: "true"}
	}
	in.Audit, in.AuditNamespaces = true, map[string]bool{"x": true, "y": true}
	node := pipeline.Node{NodeIP: netip.MustParseAddr("192.168.10.11"), GatewayIP: netip.MustParseAddr("10.244.1.1")}
	// toController are the flows that send packet-ins, by what they decide: a NetworkPolicy
	// rule's policy, a default drop's Pod port, a ClusterNetworkPolicy.
	toController := func(in Inputs) ([]string, []openflow.Flow) {
		d := Compute(in, &conjIDs{})
		cd := ComputeCluster([]cnpv1beta1.ClusterNetworkPolicy{flooded, quiet}, in)
		flows := append(node.PolicyFlows(d.Policy), node.ClusterPolicyFlows(cd.Policy)...)
		var audited []string
		for _, f := range flows {
			if !strings.Contains(f.String(), "CONTROLLER:") {
				continue
			}
			id, dir, rule, drop := pipeline.AuditObject(f.Cookie)
			switch {
			case rule:
				audited = append(audited, "rule of "+d.Index.Rules[id].Policy.String())
			case drop && dir == pipeline.PolicyIngress:
				audited = append(audited, "ingress drop "+regexp.MustCompile(`reg1=0x[0-9a-f]+`).FindString(f.String()))
			default:
				audited = append(audited, "cluster rule of "+cd.Index[f.Cookie&openflow.ObjectMask].Policy.Name)
			}
		}
		return audited, flows
	}
	all, _ := toController(in)
	g.Expect(all).To(ConsistOf("rule of x/x-web", "rule of y/y-api", "ingress drop reg1=0xa", "ingress drop reg1=0xc",
		"cluster rule of flooded", "cluster rule of quiet"))

	in.AuditSuspended = map[auditlog.Owner]bool{auditlog.NamespaceOwner("x"): true, auditlog.ClusterPolicyOwner("flooded"): true}
	some, flows := toController(in)
	g.Expect(some).To(ConsistOf("rule of y/y-api", "ingress drop reg1=0xc", "cluster rule of quiet"))
	g.Expect(pipeline.CheckWindows(pipeline.Datapath{Flows: flows})).To(BeEmpty())
}

// TestAuditIsolatedByCap: a default drop's line names the first auditlog.MaxIsolatedBy isolating
// policies by name and counts the others; the names are computed with the pass, not per
// packet-in (two lines share them).
func TestAuditIsolatedByCap(t *testing.T) {
	g := NewWithT(t)
	state := nodenetwork.NewState()
	index := nodenetwork.NewPolicyIndex()
	for i := range 40 {
		index.IngressIsolation[11] = append(index.IngressIsolation[11], types.NamespacedName{Namespace: "x", Name: fmt.Sprintf("p%02d", 39-i)})
	}
	index.IngressIsolation[12] = []types.NamespacedName{{Namespace: "y", Name: "only"}}
	state.SetPolicyIndex(index)
	r := &Reconciler{State: state}
	r.auditIsolations.Store(newAuditIsolations(index))
	udpFrame, _ := hex.DecodeString("aabbccddeeff0a580a000005" + "0800" + "4500002000004000401100000af401050af402060d2c0035000c0000" + "6869217e")
	var regs [8]uint32
	regs[pipeline.TargetOFPortField.Reg] = 11
	p := openflow.PacketIn{Cookie: openflow.MakeCookie(9, pipeline.CategoryPolicy, pipeline.AuditDropObject(pipeline.PolicyIngress)), Regs: regs, Frame: udpFrame}
	now := time.Now()
	rec, err := r.auditRecord(p, now)
	g.Expect(err).NotTo(HaveOccurred())
	var want []string
	for i := range auditlog.MaxIsolatedBy {
		want = append(want, fmt.Sprintf("p%02d", i))
	}
	g.Expect(rec.IsolatedBy).To(Equal(want))
	g.Expect(rec.IsolatedByMore).To(Equal(40 - auditlog.MaxIsolatedBy))
	b, err := json.Marshal(rec)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(b)).To(ContainSubstring(`"isolatedBy":["p00","p01",`))
	g.Expect(string(b)).To(ContainSubstring(`"p15"],"isolatedByMore":24,`))
	again, err := r.auditRecord(p, now)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(&again.IsolatedBy[0]).To(BeIdenticalTo(&rec.IsolatedBy[0]), "computed once, not per packet-in")

	regs[pipeline.TargetOFPortField.Reg] = 12
	p.Regs = regs
	rec, err = r.auditRecord(p, now)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect([]any{rec.Namespace, rec.IsolatedBy, rec.IsolatedByMore}).To(Equal([]any{"y", []string{"only"}, 0}))
	b, _ = json.Marshal(rec)
	g.Expect(string(b)).NotTo(ContainSubstring("isolatedByMore"))
}

// BenchmarkAuditPacketIn is what winnet's own handler costs the OpenFlow reader per packet-in:
// reading the headers, naming the rule, queueing the record.
func BenchmarkAuditPacketIn(b *testing.B) {
	state := nodenetwork.NewState()
	index := nodenetwork.NewPolicyIndex()
	index.Rules[7] = nodenetwork.PolicyRuleName{Kind: nodenetwork.KindNetworkPolicy, Policy: types.NamespacedName{Namespace: "x", Name: "web"}, Index: 1, Action: nodenetwork.ActionAllow}
	state.SetPolicyIndex(index)
	l, err := auditlog.Open(auditlog.Options{Dir: b.TempDir(), Node: "n", Queue: 1 << 20})
	if err != nil {
		b.Fatal(err)
	}
	r := &Reconciler{State: state, Audit: l}
	frame, _ := hex.DecodeString("aabbccddeeff0a580a000005" + "0800" + "4500002800004000400600000af401050af40206" + "9c401f90000000000000000050020000" + "00000000")
	p := openflow.PacketIn{Cookie: openflow.MakeCookie(9, pipeline.CategoryPolicy, pipeline.AuditRuleObject(7)), Frame: frame}
	b.ResetTimer()
	for range b.N {
		r.auditPacketIn(p)
	}
}
