package packettrace

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/nodenetwork"
	"github.com/winnet-io/winnet/internal/pipeline"
)

// TestClusterObservation: a ClusterNetworkPolicy trace point names the rule (no namespace), its
// tier and action; a Deny is a drop by that rule, a Pass says which tier decides next.
func TestClusterObservation(t *testing.T) {
	g := NewWithT(t)
	index := nodenetwork.NewPolicyIndex()
	name := func(policy string, egress bool, i int, action, tier string) nodenetwork.PolicyRuleName {
		return nodenetwork.PolicyRuleName{Kind: nodenetwork.KindClusterNetworkPolicy, Policy: types.NamespacedName{Name: policy}, Egress: egress, Index: i, Action: action, Tier: tier}
	}
	index.ClusterRules[pipeline.ClusterRuleObject(pipeline.AdminTier, pipeline.PolicyEgress, 60000)] = name("deny-metadata", true, 1, "Deny", "Admin")
	index.ClusterRules[pipeline.ClusterRuleObject(pipeline.BaselineTier, pipeline.PolicyIngress, 59999)] = name("tenants", false, 0, "Accept", "Baseline")
	index.ClusterRules[pipeline.ClusterRuleObject(pipeline.AdminTier, pipeline.PolicyIngress, 60000)] = name("delegate", false, 2, "Pass", "Admin")

	o := clusterObservation(index, pipeline.TraceClusterDeny, pipeline.TraceClusterArg(pipeline.AdminTier, pipeline.PolicyEgress, 60000), true)
	g.Expect(o).To(Equal(networkv1alpha1.PacketTraceObservation{Component: "ClusterNetworkPolicy", Action: "Dropped",
		Detail: "dropped by ClusterNetworkPolicy deny-metadata rule egress[1] (Admin tier, Deny)",
		Policy: &networkv1alpha1.PolicyRuleReference{Kind: "ClusterNetworkPolicy", Name: "deny-metadata", Rule: "egress[1]"}}))
	o = clusterObservation(index, pipeline.TraceClusterAccept, pipeline.TraceClusterArg(pipeline.BaselineTier, pipeline.PolicyIngress, 59999), true)
	g.Expect(o.Action).To(Equal("Admitted"))
	g.Expect(o.Detail).To(Equal("admitted by ClusterNetworkPolicy tenants rule ingress[0] (Baseline tier, Accept)"))
	o = clusterObservation(index, pipeline.TraceClusterPass, pipeline.TraceClusterArg(pipeline.AdminTier, pipeline.PolicyIngress, 60000), true)
	g.Expect(o.Action).To(Equal("Passed"))
	g.Expect(o.Detail).To(Equal("passed by ClusterNetworkPolicy delegate rule ingress[2] (Admin tier, Pass): NetworkPolicy decides next"))
	o = clusterObservation(index, pipeline.TraceClusterDeny, pipeline.TraceClusterArg(pipeline.BaselineTier, pipeline.PolicyEgress, 1000), true)
	g.Expect(o).To(Equal(networkv1alpha1.PacketTraceObservation{Component: "ClusterNetworkPolicy", Action: "Dropped",
		Detail: "dropped by a Baseline tier egress rule (priority 1000) the agent no longer knows"}), "still a drop, named as far as the flow knows")

	// A rule that fails closed (controllers/networkpolicy ComputeCluster) says so.
	closed := name("beyond", true, 3, "Deny", "Admin")
	closed.FailClosed = true
	index.ClusterRules[pipeline.ClusterRuleObject(pipeline.AdminTier, pipeline.PolicyEgress, pipeline.ClusterPriorityBeyondBand)] = closed
	o = clusterObservation(index, pipeline.TraceClusterDeny, pipeline.TraceClusterArg(pipeline.AdminTier, pipeline.PolicyEgress, pipeline.ClusterPriorityBeyondBand), true)
	g.Expect(o.Detail).To(Equal("dropped by ClusterNetworkPolicy beyond rule egress[3] (Admin tier, Deny): the rule cannot be realised as written and drops instead (fail closed; see the policy's Realised condition)"))

	// A trace of Namespace disclosure names no ClusterNetworkPolicy: the tier and action only.
	o = clusterObservation(index, pipeline.TraceClusterDeny, pipeline.TraceClusterArg(pipeline.AdminTier, pipeline.PolicyEgress, 60000), false)
	g.Expect(o).To(Equal(networkv1alpha1.PacketTraceObservation{Component: "ClusterNetworkPolicy", Action: "Dropped",
		Detail: "dropped by a ClusterNetworkPolicy egress rule (Admin tier, Deny)",
		Policy: &networkv1alpha1.PolicyRuleReference{Kind: "ClusterNetworkPolicy"}}))
	o = clusterObservation(index, pipeline.TraceClusterPass, pipeline.TraceClusterArg(pipeline.AdminTier, pipeline.PolicyIngress, 60000), false)
	g.Expect(o.Detail).To(Equal("passed by a ClusterNetworkPolicy ingress rule (Admin tier, Pass): NetworkPolicy decides next"))
	g.Expect(o.Detail).NotTo(ContainSubstring("delegate"))
}
