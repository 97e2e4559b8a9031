package networkpolicy

import (
	"testing"

	. "github.com/onsi/gomega"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/types"
	cnpv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/winnet-io/winnet/controllers/nodenetwork"
	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/internal/pipeline"
)

// TestPolicyIndexNamesBothKinds: the index names a NetworkPolicy rule by its conjunction id and a
// ClusterNetworkPolicy rule by the cookie of every flow it has (conj_id, clause and subject-only
// flows alike) and by its parts' conjunction ids, with kind, action and tier.
func TestPolicyIndexNamesBothKinds(t *testing.T) {
	g := NewWithT(t)
	np := policy("web", map[string]string{"app": "web"}, networkingv1.NetworkPolicySpec{Egress: []networkingv1.NetworkPolicyEgressRule{
		{Ports: []networkingv1.NetworkPolicyPort{tcp(53)}},
		{Ports: []networkingv1.NetworkPolicyPort{tcp(80)}},
	}, PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}})
	in := testInputs(np)
	var ids conjIDs
	d := Compute(in, &ids)
	g.Expect(d.Policy.Rules).To(HaveLen(2))
	for i, r := range d.Policy.Rules {
		name, ok := d.Index.RuleOfConjID(r.ID)
		g.Expect(ok).To(BeTrue())
		g.Expect(name).To(Equal(nodenetwork.PolicyRuleName{Kind: nodenetwork.KindNetworkPolicy, Policy: types.NamespacedName{Namespace: "x", Name: "web"},
			Egress: true, Index: i, Action: nodenetwork.ActionAllow}))
		g.Expect(name.Rule()).To(Equal([]string{"egress[0]", "egress[1]"}[i]))
		g.Expect(name.Direction()).To(Equal("egress"))
	}

	teamA := cnpv1beta1.ClusterNetworkPolicySubject{Namespaces: sel(map[string]string{"team": "a"})}
	teamB := cnpv1beta1.ClusterNetworkPolicySubject{Namespaces: sel(map[string]string{"team": "b"})}
	everyone := []cnpv1beta1.ClusterNetworkPolicyIngressPeer{{Namespaces: sel(nil)}}
	cd := ComputeCluster([]cnpv1beta1.ClusterNetworkPolicy{
		cnp("admin", cnpv1beta1.AdminTier, 1, teamA, cnpv1beta1.ClusterNetworkPolicySpec{
			// A subject-only rule (every peer, every port): one flow per subject, no conjunction.
			Egress: []cnpv1beta1.ClusterNetworkPolicyEgressRule{{Action: cnpv1beta1.ClusterNetworkPolicyRuleActionPass}},
			Ingress: []cnpv1beta1.ClusterNetworkPolicyIngressRule{
				{Action: cnpv1beta1.ClusterNetworkPolicyRuleActionAccept, From: everyone,
					Protocols: []cnpv1beta1.ClusterNetworkPolicyProtocol{{TCP: &cnpv1beta1.ClusterNetworkPolicyProtocolTCP{DestinationPort: &cnpv1beta1.Port{Number: 80}}}}},
				{Action: cnpv1beta1.ClusterNetworkPolicyRuleActionDeny, From: everyone},
			},
		}),
		cnp("base", cnpv1beta1.BaselineTier, 0, teamA, cnpv1beta1.ClusterNetworkPolicySpec{
			Ingress: []cnpv1beta1.ClusterNetworkPolicyIngressRule{{Action: cnpv1beta1.ClusterNetworkPolicyRuleActionDeny, From: everyone}},
		}),
		// No local subject: named all the same.
		cnp("remote", cnpv1beta1.AdminTier, 0, teamB, cnpv1beta1.ClusterNetworkPolicySpec{
			Ingress: []cnpv1beta1.ClusterNetworkPolicyIngressRule{{Action: cnpv1beta1.ClusterNetworkPolicyRuleActionDeny, From: everyone}},
		}),
	}, in)
	d.Index.ClusterRules = cd.Index
	top := pipeline.ClusterPriorityHighest
	cluster := func(name, tier, action string, egress bool, index int) nodenetwork.PolicyRuleName {
		return nodenetwork.PolicyRuleName{Kind: nodenetwork.KindClusterNetworkPolicy, Policy: types.NamespacedName{Name: name},
			Egress: egress, Index: index, Action: action, Tier: tier}
	}
	g.Expect(d.Index.ClusterRules).To(Equal(map[uint64]nodenetwork.PolicyRuleName{
		pipeline.ClusterRuleObject(pipeline.AdminTier, pipeline.PolicyIngress, top):    cluster("remote", "Admin", "Deny", false, 0),
		pipeline.ClusterRuleObject(pipeline.AdminTier, pipeline.PolicyIngress, top-1):  cluster("admin", "Admin", "Accept", false, 0),
		pipeline.ClusterRuleObject(pipeline.AdminTier, pipeline.PolicyIngress, top-2):  cluster("admin", "Admin", "Deny", false, 1),
		pipeline.ClusterRuleObject(pipeline.AdminTier, pipeline.PolicyEgress, top):     cluster("admin", "Admin", "Pass", true, 0),
		pipeline.ClusterRuleObject(pipeline.BaselineTier, pipeline.PolicyIngress, top): cluster("base", "Baseline", "Deny", false, 0),
	}))
	// Every flow of the local rules is named by its cookie, as the switch reports it (round and
	// category set), and every conj_id by RuleOfConjID.
	flows := pipeline.Node{}.ClusterPolicyFlows(cd.Policy)
	g.Expect(flows).NotTo(BeEmpty())
	for _, f := range flows {
		if _, _, id, ok := pipeline.ParsePolicyCounterObject(f.Cookie); ok {
			// An Accept rule's counter flows carry its id (pipeline.ClusterRuleID) instead.
			_, ok := d.Index.RuleOfConjID(id)
			g.Expect(ok).To(BeTrue(), f.String())
			continue
		}
		name, ok := d.Index.RuleOfCookie(openflow.MakeCookie(7, pipeline.CategoryPolicy, f.Cookie))
		g.Expect(ok).To(BeTrue(), f.String())
		g.Expect(name.Policy.Name).NotTo(Equal("remote"))
	}
	for _, r := range cd.Policy.Rules {
		name, ok := d.Index.RuleOfConjID(pipeline.ClusterConjID(r.Tier, r.Direction, r.Priority, r.Sub))
		g.Expect(ok).To(BeTrue())
		g.Expect(name).To(Equal(d.Index.ClusterRules[pipeline.ClusterRuleObject(r.Tier, r.Direction, r.Priority)]))
	}
	// An audited NetworkPolicy rule's decision flows name it by their cookie too.
	name, ok := d.Index.RuleOfCookie(openflow.MakeCookie(7, pipeline.CategoryPolicy, pipeline.AuditRuleObject(d.Policy.Rules[1].ID)))
	g.Expect(ok).To(BeTrue())
	g.Expect(name.Rule()).To(Equal("egress[1]"))
	// A NetworkPolicy id is never read as a ClusterNetworkPolicy's, nor the other way round.
	_, ok = d.Index.RuleOfConjID(pipeline.ClusterConjID(pipeline.BaselineTier, pipeline.PolicyEgress, top, 0))
	g.Expect(ok).To(BeFalse())
	_, ok = d.Index.RuleOfCookie(openflow.MakeCookie(7, pipeline.CategoryPolicy, 0))
	g.Expect(ok).To(BeFalse())
}
