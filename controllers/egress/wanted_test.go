package egress

import (
	"net/netip"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/nodenetwork"
)

// TestMayHoldAny: the agent renews its Egress Lease only when an Egress is assigned to its node, or one
// could be (its IP on the node's uplink subnet, its nodeSelector selecting the node).
func TestMayHoldAny(t *testing.T) {
	g := NewWithT(t)
	r := &Reconciler{NodeName: "node-a"}
	rz := nodenetwork.Realized{NodeSubnet: netip.MustParsePrefix("192.168.10.11/24")}
	eg := func(ip, node string, selector map[string]networkv1alpha1.LabelValue) networkv1alpha1.Egress {
		e := networkv1alpha1.Egress{ObjectMeta: metav1.ObjectMeta{Name: "e-" + ip}, Spec: networkv1alpha1.EgressSpec{
			EgressIP:          networkv1alpha1.IPv4Address(ip),
			PodSelector:       networkv1alpha1.LabelSelector{MatchLabels: map[string]networkv1alpha1.LabelValue{"app": "x"}},
			NamespaceSelector: networkv1alpha1.LabelSelector{MatchLabels: map[string]networkv1alpha1.LabelValue{"team": "x"}},
		}}
		if selector != nil {
			e.Spec.NodeSelector = &networkv1alpha1.LabelSelector{MatchLabels: selector}
		}
		e.Status.Node = node
		return e
	}
	mine := labels.Set{"egress": "yes"}
	g.Expect(r.mayHoldAny(rz, nil, mine)).To(BeFalse(), "no Egress")
	g.Expect(r.mayHoldAny(rz, []networkv1alpha1.Egress{eg("192.168.20.5", "", nil)}, mine)).To(BeFalse(), "another subnet")
	g.Expect(r.mayHoldAny(rz, []networkv1alpha1.Egress{eg("192.168.10.200", "", map[string]networkv1alpha1.LabelValue{"egress": "no"})}, mine)).
		To(BeFalse(), "not selected by nodeSelector")
	g.Expect(r.mayHoldAny(rz, []networkv1alpha1.Egress{eg("192.168.10.200", "", map[string]networkv1alpha1.LabelValue{"egress": "yes"})}, mine)).
		To(BeTrue(), "selected, on the subnet")
	g.Expect(r.mayHoldAny(rz, []networkv1alpha1.Egress{eg("192.168.10.200", "", nil)}, mine)).To(BeTrue(), "no nodeSelector, on the subnet")
	g.Expect(r.mayHoldAny(rz, []networkv1alpha1.Egress{eg("192.168.20.5", "node-a", nil)}, mine)).To(BeTrue(), "assigned here, whatever else")
}
