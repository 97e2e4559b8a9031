package egress

import (
	"net/netip"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// egress returns a compiled Egress of ip created age minutes after t0, held by node (may be "").
func egress(t *testing.T, name, ip string, minute int, node string, nodeSelector *networkv1alpha1.LabelSelector) Compiled {
	t.Helper()
	e := &networkv1alpha1.Egress{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(minute) * time.Minute))},
		Spec:       networkv1alpha1.EgressSpec{EgressIP: networkv1alpha1.IPv4Address(ip), NodeSelector: nodeSelector},
		Status:     networkv1alpha1.EgressStatus{Node: node},
	}
	c, err := Compile(e)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func node(name, subnet string, ready bool, lbls ...string) Node {
	set := labels.Set{}
	for i := 0; i+1 < len(lbls); i += 2 {
		set[lbls[i]] = lbls[i+1]
	}
	return Node{Name: name, Labels: set, Ready: ready, Subnet: netip.MustParsePrefix(subnet)}
}

func TestAssign(t *testing.T) {
	uplink := "192.168.10.11/24"
	two := []Node{node("win-a", "192.168.10.11/24", true), node("win-b", "192.168.10.12/24", true)}
	cluster := func(nodes ...Node) Cluster {
		return Cluster{Nodes: nodes,
			NodeAddresses: map[netip.Addr]string{netip.MustParseAddr("192.168.10.11"): "win-a", netip.MustParseAddr("192.168.10.12"): "win-b"},
			Reserved:      []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("10.96.0.0/12")}}
	}
	onlyB := &networkv1alpha1.LabelSelector{MatchLabels: map[string]networkv1alpha1.LabelValue{"egress": "yes"}}
	cases := []struct {
		name     string
		egresses []Compiled
		cluster  Cluster
		// want maps an Egress to its node, or to the reason it has none.
		want map[string]string
	}{
		{"spread over the nodes, oldest first",
			[]Compiled{egress(t, "e1", "192.168.10.200", 0, "", nil), egress(t, "e2", "192.168.10.201", 1, "", nil), egress(t, "e3", "192.168.10.202", 2, "", nil)},
			cluster(two...), map[string]string{"e1": "win-a", "e2": "win-b", "e3": "win-a"}},
		{"kept where it is while eligible",
			[]Compiled{egress(t, "e1", "192.168.10.200", 0, "win-b", nil), egress(t, "e2", "192.168.10.201", 1, "", nil)},
			cluster(two...), map[string]string{"e1": "win-b", "e2": "win-a"}},
		{"moved when its node is not Ready",
			[]Compiled{egress(t, "e1", "192.168.10.200", 0, "win-a", nil)},
			cluster(node("win-a", uplink, false), two[1]), map[string]string{"e1": "win-b"}},
		{"moved when its node is no longer selected",
			[]Compiled{egress(t, "e1", "192.168.10.200", 0, "win-a", onlyB)},
			cluster(two[0], node("win-b", "192.168.10.12/24", true, "egress", "yes")), map[string]string{"e1": "win-b"}},
		{"only nodes whose uplink subnet holds the IP",
			[]Compiled{egress(t, "e1", "192.168.20.200", 0, "", nil)},
			cluster(two[0], node("win-b", "192.168.20.12/24", true)), map[string]string{"e1": "win-b"}},
		{"no eligible node",
			[]Compiled{egress(t, "e1", "192.168.30.200", 0, "", nil)},
			cluster(two...), map[string]string{"e1": networkv1alpha1.NoEligibleNodeReason}},
		{"a node not reporting its subnet is not eligible",
			[]Compiled{egress(t, "e1", "192.168.10.200", 0, "", nil)},
			cluster(Node{Name: "win-a", Ready: true}), map[string]string{"e1": networkv1alpha1.NoEligibleNodeReason}},
		{"NoEncap nodes refused",
			[]Compiled{egress(t, "e1", "192.168.10.200", 0, "", nil)},
			cluster(Node{Name: "win-a", Ready: true, Subnet: netip.MustParsePrefix(uplink), NoEncap: true}), map[string]string{"e1": networkv1alpha1.NoEncapRefusedReason}},
		{"a node's address",
			[]Compiled{egress(t, "e1", "192.168.10.12", 0, "", nil)},
			cluster(two...), map[string]string{"e1": networkv1alpha1.IPConflictReason}},
		{"an address of the Pod CIDR",
			[]Compiled{egress(t, "e1", "10.244.3.9", 0, "", nil)},
			cluster(two...), map[string]string{"e1": networkv1alpha1.IPConflictReason}},
		{"an address of the Service CIDR",
			[]Compiled{egress(t, "e1", "10.96.0.10", 0, "", nil)},
			cluster(two...), map[string]string{"e1": networkv1alpha1.IPConflictReason}},
		{"the same IP twice: the oldest keeps it, even if the newer held it (here on the least loaded node)",
			[]Compiled{egress(t, "new", "192.168.10.200", 5, "win-a", nil), egress(t, "old", "192.168.10.200", 1, "", nil)},
			cluster(two...), map[string]string{"old": "win-a", "new": networkv1alpha1.IPConflictReason}},
		{"same age: the name decides",
			[]Compiled{egress(t, "b", "192.168.10.200", 0, "", nil), egress(t, "a", "192.168.10.200", 0, "", nil)},
			cluster(two...), map[string]string{"a": "win-a", "b": networkv1alpha1.IPConflictReason}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got := Assign(tc.egresses, tc.cluster)
			simple := map[string]string{}
			for name, d := range got {
				if d.Assigned() {
					simple[name] = d.Node
					g.Expect(d.Reason).To(Equal(networkv1alpha1.EgressAssignedReason))
				} else {
					simple[name] = d.Reason
					g.Expect(d.Message).NotTo(BeEmpty())
					t.Logf("%s: %s: %s", name, d.Reason, d.Message)
				}
			}
			g.Expect(simple).To(Equal(tc.want))
		})
	}
}

func TestApplies(t *testing.T) {
	g := NewWithT(t)
	sel := func(name string, minute int, app string) Compiled {
		e := &networkv1alpha1.Egress{
			ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(minute) * time.Minute))},
			Spec: networkv1alpha1.EgressSpec{
				PodSelector:       networkv1alpha1.LabelSelector{MatchLabels: map[string]networkv1alpha1.LabelValue{"app": networkv1alpha1.LabelValue(app)}},
				NamespaceSelector: networkv1alpha1.LabelSelector{MatchExpressions: []networkv1alpha1.LabelSelectorRequirement{{Key: "team", Operator: "In", Values: []networkv1alpha1.LabelValue{"finance"}}}},
				EgressIP:          "192.168.10.200",
			},
		}
		c, err := Compile(e)
		g.Expect(err).NotTo(HaveOccurred())
		return c
	}
	newer, older, other := sel("newer", 5, "billing"), sel("older", 1, "billing"), sel("other", 0, "web")
	finance := labels.Set{"team": "finance"}
	got, ok := Applies([]Compiled{newer, other, older}, labels.Set{"app": "billing"}, finance)
	g.Expect(ok).To(BeTrue())
	g.Expect(got.Egress.Name).To(Equal("older"), "the oldest Egress that selects the Pod applies")
	_, ok = Applies([]Compiled{newer, older}, labels.Set{"app": "billing"}, labels.Set{"team": "hr"})
	g.Expect(ok).To(BeFalse(), "the namespace is not selected")
	_, ok = Applies([]Compiled{newer, older}, labels.Set{"app": "db"}, finance)
	g.Expect(ok).To(BeFalse(), "the Pod is not selected")
}
