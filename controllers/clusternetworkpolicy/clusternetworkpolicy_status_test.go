package clusternetworkpolicy

import (
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cnpv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/cnpstatus"
)

// node is a node whose agent is of a release before 0.2.0: the list, no report.
func node(name string, reports ...networkv1alpha1.ClusterNetworkPolicyRealisation) networkv1alpha1.WindowsNodeNetwork {
	w := networkv1alpha1.WindowsNodeNetwork{ObjectMeta: metav1.ObjectMeta{Name: name}}
	w.Status.NetworkPolicies.ClusterNetworkPolicies = reports
	return w
}

// reporting is a node whose agent writes the report: it compiled generations, and does not
// realise notRealised whole (omitted more).
func reporting(name string, generations map[string]int64, omitted int32, notRealised ...networkv1alpha1.ClusterNetworkPolicyRealisation) networkv1alpha1.WindowsNodeNetwork {
	w := networkv1alpha1.WindowsNodeNetwork{ObjectMeta: metav1.ObjectMeta{Name: name}}
	w.Status.NetworkPolicies.ClusterNetworkPolicyReport = &networkv1alpha1.ClusterNetworkPolicyReport{
		Compiled: int32(len(generations)), Digests: cnpstatus.Digests(generations), NotRealised: notRealised, NotRealisedOmitted: omitted,
		LegacyDigest: cnpstatus.LegacyDigest(nil),
	}
	return w
}

// current is what the reconciler reads of the cluster's policies in these tests: p at generation
// 2, q at 1.
var current = map[string]int64{"p": 2, "q": 1}

// compiledAgainst is Reconciler.compiled with the cluster's policies as generations.
func compiledAgainst(d *digests, generations map[string]int64, name string) func(string) bool {
	bucket := cnpstatus.Bucket(name)
	in := map[string]int64{}
	for n, g := range generations {
		if cnpstatus.Bucket(n) == bucket {
			in[n] = g
		}
	}
	now := d.observe(bucket, in)
	return func(digest string) bool {
		if digest == now {
			return true
		}
		g, ok := d.generation(bucket, digest, name)
		return ok && g == generations[name]
	}
}

func realised(g Gomega, nodes []networkv1alpha1.WindowsNodeNetwork, compiled func(string) bool) *metav1.Condition {
	p := &cnpv1beta1.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", Generation: 2}}
	setRealisedCondition(p, nodes, compiled)
	c := meta.FindStatusCondition(p.Status.Conditions, networkv1alpha1.RealisedCondition)
	g.Expect(c).NotTo(BeNil())
	g.Expect(c.ObservedGeneration).To(Equal(int64(2)))
	return c
}

// TestSetRealisedCondition: True when every reporting node realised the current generation whole,
// False naming the nodes that did not realise a part, Unknown while a node lags or none reported,
// from the reports of 0.2.0's agents and from the lists of 0.1.0's (a cluster being upgraded has
// both).
func TestSetRealisedCondition(t *testing.T) {
	current010 := networkv1alpha1.ClusterNetworkPolicyRealisation{Name: "p", Generation: 2}
	old010 := networkv1alpha1.ClusterNetworkPolicyRealisation{Name: "p", Generation: 1}
	partly010 := networkv1alpha1.ClusterNetworkPolicyRealisation{Name: "p", Generation: 2, NotRealised: "egress rule 0: peer 0: domainNames peers are not realised"}
	other010 := networkv1alpha1.ClusterNetworkPolicyRealisation{Name: "q", Generation: 1}
	behindGens := map[string]int64{"p": 1, "q": 1}
	partly := networkv1alpha1.ClusterNetworkPolicyRealisation{Name: "p", Generation: 2, NotRealised: "ingress rule 0: protocol 0: no field winnet knows: every port of its peers is dropped instead (fail closed)"}
	for _, tc := range []struct {
		name   string
		nodes  []networkv1alpha1.WindowsNodeNetwork
		status metav1.ConditionStatus
		reason string
		msg    string
	}{
		{"0.1.0: every node realised it", []networkv1alpha1.WindowsNodeNetwork{node("a", current010), node("b", current010, other010), node("linux")},
			metav1.ConditionTrue, networkv1alpha1.RealisedReason, "Realised whole on the 2 winnet nodes"},
		{"0.1.0: a node lags", []networkv1alpha1.WindowsNodeNetwork{node("a", current010), node("b", old010)},
			metav1.ConditionUnknown, networkv1alpha1.ProgressingReason, "Waiting for 1 of 2 winnet nodes: b"},
		{"0.1.0: a node has not listed it yet", []networkv1alpha1.WindowsNodeNetwork{node("a", current010), node("b", other010)},
			metav1.ConditionUnknown, networkv1alpha1.ProgressingReason, "Waiting for 1 of 2 winnet nodes: b"},
		{"no node reported", nil, metav1.ConditionUnknown, networkv1alpha1.ProgressingReason, "No winnet node has reported it yet"},
		{"0.1.0: a part is not realised", []networkv1alpha1.WindowsNodeNetwork{node("a", current010), node("b", partly010)},
			metav1.ConditionFalse, networkv1alpha1.PartlyRealisedReason, "Not realised whole on b: egress rule 0: peer 0: domainNames peers are not realised"},

		{"every node realised it", []networkv1alpha1.WindowsNodeNetwork{reporting("a", current, 0), reporting("b", current, 0), node("linux")},
			metav1.ConditionTrue, networkv1alpha1.RealisedReason, "Realised whole on the 2 winnet nodes"},
		{"a node lags", []networkv1alpha1.WindowsNodeNetwork{reporting("a", current, 0), reporting("b", behindGens, 0)},
			metav1.ConditionUnknown, networkv1alpha1.ProgressingReason, "Waiting for 1 of 2 winnet nodes: b"},
		{"a node compiled no policy yet", []networkv1alpha1.WindowsNodeNetwork{reporting("a", current, 0), reporting("b", nil, 0)},
			metav1.ConditionUnknown, networkv1alpha1.ProgressingReason, "Waiting for 1 of 2 winnet nodes: b"},
		{"a part is not realised", []networkv1alpha1.WindowsNodeNetwork{reporting("a", current, 0), reporting("b", current, 0, partly)},
			metav1.ConditionFalse, networkv1alpha1.PartlyRealisedReason, "Not realised whole on b: " + partly.NotRealised},
		{"a node's report omits policies after the last it lists", []networkv1alpha1.WindowsNodeNetwork{reporting("a", current, 0),
			reporting("b", current, 3, networkv1alpha1.ClusterNetworkPolicyRealisation{Name: "a-policy", Generation: 1, NotRealised: "x"})},
			metav1.ConditionUnknown, networkv1alpha1.NotReportedReason,
			"Not known on 1 of 2 winnet nodes, which do not realise whole more policies than they list: b (3 more not listed)"},
		{"a node's report omits policies after one it lists", []networkv1alpha1.WindowsNodeNetwork{reporting("a", current, 0),
			reporting("b", current, 3, networkv1alpha1.ClusterNetworkPolicyRealisation{Name: "z-policy", Generation: 1, NotRealised: "x"})},
			metav1.ConditionTrue, networkv1alpha1.RealisedReason, "Realised whole on the 2 winnet nodes"},
		{"a 0.2.0 node and a 0.1.0 node", []networkv1alpha1.WindowsNodeNetwork{reporting("a", current, 0), node("b", current010, other010)},
			metav1.ConditionTrue, networkv1alpha1.RealisedReason, "Realised whole on the 2 winnet nodes"},
		{"a 0.2.0 node and a 0.1.0 node that lags", []networkv1alpha1.WindowsNodeNetwork{reporting("a", current, 0), node("b", old010, other010)},
			metav1.ConditionUnknown, networkv1alpha1.ProgressingReason, "Waiting for 1 of 2 winnet nodes: b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			c := realised(g, tc.nodes, compiledAgainst(&digests{}, current, "p"))
			g.Expect(c.Status).To(Equal(tc.status))
			g.Expect(c.Reason).To(Equal(tc.reason))
			g.Expect(c.Message).To(Equal(tc.msg))
		})
	}
}

// TestSetRealisedConditionStaleReport: a report whose legacyDigest no longer matches the list was
// left by a 0.2.0 agent and the list rewritten since by a 0.1.0 agent (a rollback: 0.1.0 patches
// the list and leaves the field it does not know): the list is read, not the stale report.
func TestSetRealisedConditionStaleReport(t *testing.T) {
	g := NewWithT(t)
	stale := reporting("a", current, 0)
	stale.Status.NetworkPolicies.ClusterNetworkPolicies = []networkv1alpha1.ClusterNetworkPolicyRealisation{
		{Name: "p", Generation: 2, NotRealised: "egress rule 0: peer 0: domainNames peers are not realised"}}
	c := realised(g, []networkv1alpha1.WindowsNodeNetwork{stale}, compiledAgainst(&digests{}, current, "p"))
	g.Expect(c.Status).To(Equal(metav1.ConditionFalse), "the 0.1.0 agent's list says the policy is not realised whole: %s", c.Message)
	g.Expect(c.Message).To(ContainSubstring("domainNames"))

	// The report as the 0.2.0 agent wrote it with its list is read.
	written := reporting("a", current, 0)
	written.Status.NetworkPolicies.ClusterNetworkPolicies = []networkv1alpha1.ClusterNetworkPolicyRealisation{{Name: "p", Generation: 2}, {Name: "q", Generation: 1}}
	written.Status.NetworkPolicies.ClusterNetworkPolicyReport.LegacyDigest = cnpstatus.LegacyDigest(written.Status.NetworkPolicies.ClusterNetworkPolicies)
	g.Expect(realised(g, []networkv1alpha1.WindowsNodeNetwork{written}, compiledAgainst(&digests{}, current, "p")).Status).To(Equal(metav1.ConditionTrue))
}

// TestSetRealisedConditionBucketSiblings: a node that has not yet compiled the change of another
// policy of p's bucket is not behind on p: its digest is a state of the bucket the reconciler read
// before, in which p had its current generation.
func TestSetRealisedConditionBucketSiblings(t *testing.T) {
	g := NewWithT(t)
	sibling := ""
	for i := 0; sibling == ""; i++ {
		if name := fmt.Sprintf("s%d", i); cnpstatus.Bucket(name) == cnpstatus.Bucket("p") {
			sibling = name
		}
	}
	d := &digests{}
	before := map[string]int64{"p": 2, sibling: 1}
	compiledAgainst(d, before, "p") // reconciled while the sibling was at 1
	after := map[string]int64{"p": 2, sibling: 2}
	c := realised(g, []networkv1alpha1.WindowsNodeNetwork{reporting("a", after, 0), reporting("b", before, 0)}, compiledAgainst(d, after, "p"))
	g.Expect(c.Status).To(Equal(metav1.ConditionTrue), c.Message)

	// Without that state remembered, the node is behind.
	c = realised(g, []networkv1alpha1.WindowsNodeNetwork{reporting("a", after, 0), reporting("b", before, 0)}, compiledAgainst(&digests{}, after, "p"))
	g.Expect(c.Status).To(Equal(metav1.ConditionUnknown))
	// And a state in which p had another generation says the node is behind on p.
	d = &digests{}
	older := map[string]int64{"p": 1, sibling: 1}
	compiledAgainst(d, older, "p")
	c = realised(g, []networkv1alpha1.WindowsNodeNetwork{reporting("a", after, 0), reporting("b", older, 0)}, compiledAgainst(d, after, "p"))
	g.Expect(c.Status).To(Equal(metav1.ConditionUnknown))
	g.Expect(c.Message).To(Equal("Waiting for 1 of 2 winnet nodes: b"))
}
