package clusternetworkpolicy

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cnpv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
)

func node(name string, reports ...networkv1alpha1.ClusterNetworkPolicyRealisation) networkv1alpha1.WindowsNodeNetwork {
	w := networkv1alpha1.WindowsNodeNetwork{ObjectMeta: metav1.ObjectMeta{Name: name}}
	w.Status.NetworkPolicies.ClusterNetworkPolicies = reports
	return w
}

// TestSetRealisedCondition: True when every reporting node realised the current generation whole,
// False naming the nodes that did not realise a part, Unknown while a node lags or none reported.
func TestSetRealisedCondition(t *testing.T) {
	current := networkv1alpha1.ClusterNetworkPolicyRealisation{Name: "p", Generation: 2}
	old := networkv1alpha1.ClusterNetworkPolicyRealisation{Name: "p", Generation: 1}
	partly := networkv1alpha1.ClusterNetworkPolicyRealisation{Name: "p", Generation: 2, NotRealised: "egress rule 0: peer 0: domainNames peers are not realised"}
	other := networkv1alpha1.ClusterNetworkPolicyRealisation{Name: "q", Generation: 1}
	for _, tc := range []struct {
		name   string
		nodes  []networkv1alpha1.WindowsNodeNetwork
		status metav1.ConditionStatus
		reason string
		msg    string
	}{
		{"every node realised it", []networkv1alpha1.WindowsNodeNetwork{node("a", current), node("b", current, other), node("linux")},
			metav1.ConditionTrue, networkv1alpha1.RealisedReason, "Realised whole on the 2 winnet nodes"},
		{"a node lags", []networkv1alpha1.WindowsNodeNetwork{node("a", current), node("b", old)},
			metav1.ConditionUnknown, networkv1alpha1.ProgressingReason, "Waiting for 1 of 2 winnet nodes: b"},
		{"a node has not listed it yet", []networkv1alpha1.WindowsNodeNetwork{node("a", current), node("b", other)},
			metav1.ConditionUnknown, networkv1alpha1.ProgressingReason, "Waiting for 1 of 2 winnet nodes: b"},
		{"no node reported", nil, metav1.ConditionUnknown, networkv1alpha1.ProgressingReason, "No winnet node has reported it yet"},
		{"a part is not realised", []networkv1alpha1.WindowsNodeNetwork{node("a", current), node("b", partly)},
			metav1.ConditionFalse, networkv1alpha1.PartlyRealisedReason, "Not realised whole on b: egress rule 0: peer 0: domainNames peers are not realised"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			p := &cnpv1beta1.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", Generation: 2}}
			setRealisedCondition(p, tc.nodes)
			c := meta.FindStatusCondition(p.Status.Conditions, networkv1alpha1.RealisedCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(tc.status))
			g.Expect(c.Reason).To(Equal(tc.reason))
			g.Expect(c.Message).To(Equal(tc.msg))
			g.Expect(c.ObservedGeneration).To(Equal(int64(2)))
		})
	}
}
