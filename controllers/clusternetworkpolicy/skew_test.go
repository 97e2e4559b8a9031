package clusternetworkpolicy

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cnpv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/networkpolicy"
)

// release010SetRealisedCondition is winnet-controller 0.1.0's setRealisedCondition (commit
// bd13c3f, controllers/clusternetworkpolicy/clusternetworkpolicy_status.go), verbatim but for its
// name: what a 0.1.0 controller concludes from the agents' statuses (helm rollback keeps the new
// CRD, so 0.1.0's controller meets 0.2.0's agents).
func release010SetRealisedCondition(p *cnpv1beta1.ClusterNetworkPolicy, nodes []networkv1alpha1.WindowsNodeNetwork) {
	var behind, partly []string
	reporting := 0
	for i := range nodes {
		list := nodes[i].Status.NetworkPolicies.ClusterNetworkPolicies
		if len(list) == 0 {
			continue
		}
		reporting++
		j := slices.IndexFunc(list, func(c networkv1alpha1.ClusterNetworkPolicyRealisation) bool { return c.Name == p.Name })
		switch {
		case j < 0 || list[j].Generation != p.Generation:
			behind = append(behind, nodes[i].Name)
		case list[j].NotRealised != "":
			partly = append(partly, nodes[i].Name+": "+list[j].NotRealised)
		}
	}
	slices.Sort(behind)
	slices.Sort(partly)
	c := metav1.Condition{Type: networkv1alpha1.RealisedCondition, ObservedGeneration: p.Generation}
	switch {
	case len(partly) > 0:
		c.Status, c.Reason = metav1.ConditionFalse, networkv1alpha1.PartlyRealisedReason
		c.Message = "Not realised whole on " + named(partly)
	case reporting == 0 || len(behind) > 0:
		c.Status, c.Reason = metav1.ConditionUnknown, networkv1alpha1.ProgressingReason
		c.Message = "No winnet node has reported it yet"
		if len(behind) > 0 {
			c.Message = fmt.Sprintf("Waiting for %d of %d winnet nodes: %s", len(behind), reporting, named(behind))
		}
	default:
		c.Status, c.Reason = metav1.ConditionTrue, networkv1alpha1.RealisedReason
		c.Message = fmt.Sprintf("Realised whole on the %d winnet nodes", reporting)
	}
	if len(c.Message) > 32768 {
		c.Message = c.Message[:32760] + " ..."
	}
	meta.SetStatusCondition(&p.Status.Conditions, c)
}

// agentStatus is the status a 0.2.0 agent writes for what it compiled (networkpolicy.ClusterDesired.Report).
func agentStatus(name string, d networkpolicy.ClusterDesired) networkv1alpha1.WindowsNodeNetwork {
	w := networkv1alpha1.WindowsNodeNetwork{ObjectMeta: metav1.ObjectMeta{Name: name}}
	w.Status.NetworkPolicies.ClusterNetworkPolicies, w.Status.NetworkPolicies.ClusterNetworkPolicyReport = d.Report()
	return w
}

// TestSkewReading holds both controllers to the same conclusions from 0.2.0 agents' statuses:
// winnet-controller 0.1.0 (release010SetRealisedCondition, which reads the list) and this one
// (which reads the report). p applies on node a and is realised whole; q applies on node b, which
// does not realise a part of it; r applies on no node (its unsupported peer matters nowhere). Beyond
// cnpstatus.MaxLegacyEntries policies the agents write no list: 0.1.0 then counts no node and says
// Unknown ("No winnet node has reported it yet") for every policy, never True or False wrongly.
func TestSkewReading(t *testing.T) {
	for _, extra := range []int{0, 300} {
		t.Run(fmt.Sprintf("%d more policies", extra), func(t *testing.T) {
			g := NewWithT(t)
			policies := map[string]int64{"p": 2, "q": 1, "r": 3}
			for i := range extra {
				policies[fmt.Sprintf("x%03d", i)] = 1
			}
			unsupported := map[string][]string{"q": {"egress rule 0: peer 0: domainNames peers are not realised: it matches nothing (fail closed)"},
				"r": {"egress rule 0: peer 0: domainNames peers are not realised: it matches nothing (fail closed)"}}
			a := agentStatus("a", networkpolicy.ClusterDesired{Generations: policies, Applied: map[string]bool{"p": true}, Unsupported: unsupported})
			b := agentStatus("b", networkpolicy.ClusterDesired{Generations: policies, Applied: map[string]bool{"q": true}, Unsupported: unsupported})
			nodes := []networkv1alpha1.WindowsNodeNetwork{a, b, node("linux")}
			want := map[string]string{
				"p": "True Realised: Realised whole on the 2 winnet nodes",
				"q": "False PartlyRealised: Not realised whole on b: " + unsupported["q"][0],
				"r": "True Realised: Realised whole on the 2 winnet nodes",
			}
			for name, gen := range policies {
				if _, ok := want[name]; !ok {
					continue
				}
				p := &cnpv1beta1.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name, Generation: gen}}
				setRealisedCondition(p, nodes, compiledAgainst(&digests{}, policies, name))
				old := &cnpv1beta1.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name, Generation: gen}}
				release010SetRealisedCondition(old, nodes)
				text := func(p *cnpv1beta1.ClusterNetworkPolicy) string {
					c := meta.FindStatusCondition(p.Status.Conditions, networkv1alpha1.RealisedCondition)
					return fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
				}
				g.Expect(text(p)).To(Equal(want[name]), "winnet-controller 0.2.0 on %s", name)
				if extra == 0 {
					g.Expect(text(old)).To(Equal(want[name]), "winnet-controller 0.1.0 on %s", name)
				} else {
					g.Expect(text(old)).To(Equal("Unknown Progressing: No winnet node has reported it yet"), "winnet-controller 0.1.0 on %s", name)
				}
			}
			// The 0.1.0 controller reads no message longer than the list's cut.
			for _, c := range a.Status.NetworkPolicies.ClusterNetworkPolicies {
				g.Expect(len(c.NotRealised)).To(BeNumerically("<=", 256))
				g.Expect(strings.HasPrefix(c.Name, "x") || want[c.Name] != "").To(BeTrue())
			}
		})
	}
}
