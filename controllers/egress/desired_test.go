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
	d := r.desired(rz, items, pods, nil)
	g.Expect(d.held).To(ConsistOf(
		pipeline.Egress{ID: 1, IP: netip.MustParseAddr("192.168.77.150"), Pods: []netip.Addr{netip.MustParseAddr("10.244.1.5")}},
		pipeline.Egress{ID: 2, IP: netip.MustParseAddr("192.168.77.151")},
	))
	g.Expect(d.others).To(ConsistOf(netip.MustParseAddr("192.168.77.152"), netip.MustParseAddr("192.168.77.153"), netip.MustParseAddr("192.168.99.5")))

	// "billing" goes elsewhere: "billing-newer" keeps its id and now carries the Pod.
	items[0].Status.Node = "node-b"
	d = r.desired(rz, items, pods, nil)
	g.Expect(d.held).To(ConsistOf(
		pipeline.Egress{ID: 2, IP: netip.MustParseAddr("192.168.77.151")},
	), "the Pod's Egress is the oldest that selects it, held here or not: it keeps the node's SNAT here")
	g.Expect(d.others).To(ContainElement(netip.MustParseAddr("192.168.77.150")))
}

// TestDesiredRemotePods: the holder SNATs the remote Pods its Egress applies to when the route to
// their node is realised (skipped otherwise); a node relays its selected Pods to the holder of their
// Egress when the Egress is Ready there and the route to the holder is realised (skipped
// otherwise), and never a Pod whose Egress is not assigned.
func TestDesiredRemotePods(t *testing.T) {
	g := NewWithT(t)
	rz := nodenetwork.Realized{NodeSubnet: netip.MustParsePrefix("192.168.77.11/24")}
	rz.Node.NodeIP = netip.MustParseAddr("192.168.77.11")
	peerB := nodenetwork.Peer{NodeName: "node-b", Route: pipeline.RemoteRoute{CIDR: netip.MustParsePrefix("10.244.2.0/24"), Tunnel: true,
		NodeIP: netip.MustParseAddr("192.168.77.12"), VNI: 1, DstMAC: pipeline.GlobalVirtualMAC}}
	ip := netip.MustParseAddr
	pods := []pod{
		{ip: ip("10.244.1.5"), labels: labels.Set{"app": "billing"}, namespaceLabs: labels.Set{}},
		{ip: ip("10.244.2.5"), labels: labels.Set{"app": "billing"}, namespaceLabs: labels.Set{}, remote: true},
		{ip: ip("10.244.3.5"), labels: labels.Set{"app": "billing"}, namespaceLabs: labels.Set{}, remote: true}, // no route to its node
		{ip: ip("10.244.1.6"), labels: labels.Set{"app": "web"}, namespaceLabs: labels.Set{}},
		{ip: ip("10.244.2.6"), labels: labels.Set{"app": "web"}, namespaceLabs: labels.Set{}, remote: true}, // another node's Pod of an Egress held elsewhere
		{ip: ip("10.244.1.7"), labels: labels.Set{"app": "db"}, namespaceLabs: labels.Set{}},
		{ip: ip("10.244.1.8"), labels: labels.Set{"app": "far"}, namespaceLabs: labels.Set{}},
	}
	items := []networkv1alpha1.Egress{
		testEgress("billing", "192.168.77.150", 0, "node-a", true, "billing"),
		testEgress("web", "192.168.77.152", 0, "node-b", true, "web"),
		testEgress("db", "192.168.77.153", 0, "node-b", false, "db"),  // not assigned: nothing relayed
		testEgress("far", "192.168.77.154", 0, "node-c", true, "far"), // no route to node-c: skipped
	}
	for _, i := range []int{1, 3} {
		items[i].Status.Conditions = append(items[i].Status.Conditions, metav1.Condition{Type: networkv1alpha1.ReadyCondition, Status: metav1.ConditionTrue, Reason: "Test"})
	}
	r := &Reconciler{NodeName: "node-a"}
	d := r.desired(rz, items, pods, []nodenetwork.Peer{peerB})
	g.Expect(d.held).To(ConsistOf(pipeline.Egress{ID: 1, IP: ip("192.168.77.150"), Pods: []netip.Addr{ip("10.244.1.5")},
		RemotePods: []pipeline.RemotePod{{IP: ip("10.244.2.5"), Node: peerB.Route}}}))
	g.Expect(d.relays).To(ConsistOf(pipeline.EgressRelay{Holder: peerB.Route, Pods: []netip.Addr{ip("10.244.1.6")}}))
	g.Expect(d.skipped).To(ConsistOf(ip("10.244.3.5"), ip("10.244.1.8")))

	// Not Ready on its holder yet: not relayed (the holder would drop the packets).
	items[1].Status.Conditions = items[1].Status.Conditions[:1]
	g.Expect(r.desired(rz, items, pods, []nodenetwork.Peer{peerB}).relays).To(BeEmpty())

	// Without realised routes nothing is relayed and no remote Pod is SNATed.
	d = r.desired(rz, items, pods, nil)
	g.Expect(d.relays).To(BeEmpty())
	g.Expect(d.held[0].RemotePods).To(BeEmpty())
}

// TestRemoteWatches: the holder watches the Pods of the Egresses assigned to it only, one watch per
// namespace the namespaceSelector selects, filtered by the podSelector.
func TestRemoteWatches(t *testing.T) {
	g := NewWithT(t)
	billing := testEgress("billing", "192.168.77.150", 0, "node-a", true, "billing")
	billing.Spec.NamespaceSelector = networkv1alpha1.LabelSelector{MatchLabels: map[string]networkv1alpha1.LabelValue{"team": "finance"}}
	other := testEgress("web", "192.168.77.152", 0, "node-b", true, "web")
	unassigned := testEgress("db", "192.168.77.153", 0, "node-a", false, "db")
	r := &Reconciler{NodeName: "node-a"}
	ns := map[string]labels.Set{"fin-1": {"team": "finance"}, "fin-2": {"team": "finance"}, "web": {"team": "web"}}
	g.Expect(r.remoteWatches([]networkv1alpha1.Egress{billing, other, unassigned}, ns)).To(Equal(map[podWatch]bool{
		{namespace: "fin-1", selector: "app=billing"}: true,
		{namespace: "fin-2", selector: "app=billing"}: true,
	}))
}
