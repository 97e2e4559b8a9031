package egress

import (
	"net/netip"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/nodenetwork"
	"github.com/winnet-io/winnet/internal/pipeline"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func testEgress(name, ip string, minute int, node string, assigned bool, app string) networkv1alpha1.Egress {
	e := networkv1alpha1.Egress{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(minute) * time.Minute))},
		Spec: networkv1alpha1.EgressSpec{EgressIP: networkv1alpha1.IPv4Address(ip),
			PodSelector: networkv1alpha1.LabelSelector{MatchLabels: map[string]networkv1alpha1.LabelValue{"app": networkv1alpha1.LabelValue(app)}}},
		Status: networkv1alpha1.EgressStatus{Node: node},
	}
	status := metav1.ConditionFalse
	if assigned {
		status = metav1.ConditionTrue
	}
	e.Status.Conditions = []metav1.Condition{{Type: networkv1alpha1.AssignedCondition, Status: status, Reason: "Test"}}
	return e
}

// TestDesired: the node holds the Egresses assigned to it on its subnet, each with the local Pods it
// applies to (the oldest Egress selecting a Pod); every other Egress's IP is to be absent; ids stay
// with their Egress while it is held.
func TestDesired(t *testing.T) {
	g := NewWithT(t)
	rz := nodenetwork.Realized{NodeSubnet: netip.MustParsePrefix("192.168.77.11/24")}
	rz.Node.NodeIP = netip.MustParseAddr("192.168.77.11")
	pods := []pod{
		{ip: netip.MustParseAddr("10.244.1.5"), labels: labels.Set{"app": "billing"}, namespaceLabs: labels.Set{}},
		{ip: netip.MustParseAddr("10.244.1.6"), labels: labels.Set{"app": "web"}, namespaceLabs: labels.Set{}},
		{ip: netip.MustParseAddr("10.244.1.7"), labels: labels.Set{"app": "db"}, namespaceLabs: labels.Set{}},
	}
	items := []networkv1alpha1.Egress{
		testEgress("billing", "192.168.77.150", 0, "node-a", true, "billing"),
		testEgress("billing-newer", "192.168.77.151", 5, "node-a", true, "billing"), // the older applies
		testEgress("web", "192.168.77.152", 0, "node-b", true, "web"),               // another node's
		testEgress("db", "192.168.77.153", 0, "node-a", false, "db"),                // not assigned
		testEgress("far", "192.168.99.5", 0, "node-a", true, "web"),                 // off the subnet
		testEgress("self", "192.168.77.11", 0, "node-a", true, "web"),               // the node IP: never touched
	}
	r := &Reconciler{NodeName: "node-a"}
	d := r.desired(rz, items, pods)
	g.Expect(d.held).To(ConsistOf(
		pipeline.Egress{ID: 1, IP: netip.MustParseAddr("192.168.77.150"), Pods: []netip.Addr{netip.MustParseAddr("10.244.1.5")}},
		pipeline.Egress{ID: 2, IP: netip.MustParseAddr("192.168.77.151")},
	))
	g.Expect(d.others).To(ConsistOf(netip.MustParseAddr("192.168.77.152"), netip.MustParseAddr("192.168.77.153"), netip.MustParseAddr("192.168.99.5")))

	// "billing" goes elsewhere: "billing-newer" keeps its id and now carries the Pod.
	items[0].Status.Node = "node-b"
	d = r.desired(rz, items, pods)
	g.Expect(d.held).To(ConsistOf(
		pipeline.Egress{ID: 2, IP: netip.MustParseAddr("192.168.77.151")},
	), "the Pod's Egress is the oldest that selects it, held here or not: it keeps the node's SNAT here")
	g.Expect(d.others).To(ContainElement(netip.MustParseAddr("192.168.77.150")))
}
