package cluster

import (
	"net/netip"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/egress"
)

// TestNewEgressSettles: an Egress not placed yet waits newEgressSettle from when winnet-controller first
// saw it while a node that could hold it has not renewed its Lease yet (its agent starts renewing on
// seeing the Egress); not once that time is past, not when the nodes are all renewing or none could
// hold it, and never an Egress already placed.
func TestNewEgressSettles(t *testing.T) {
	g := NewWithT(t)
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	subnet := netip.MustParsePrefix("192.168.10.11/24")
	compile := func(name, ip, node string) egress.Compiled {
		e := &networkv1alpha1.Egress{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: networkv1alpha1.EgressSpec{
			EgressIP:          networkv1alpha1.IPv4Address(ip),
			PodSelector:       networkv1alpha1.LabelSelector{MatchLabels: map[string]networkv1alpha1.LabelValue{"app": "x"}},
			NamespaceSelector: networkv1alpha1.LabelSelector{MatchLabels: map[string]networkv1alpha1.LabelValue{"team": "x"}},
		}}
		e.Status.Node = node
		c, err := egress.Compile(e)
		g.Expect(err).NotTo(HaveOccurred())
		return c
	}
	renewing := egress.Node{Name: "a", Ready: true, Subnet: subnet}
	silent := egress.Node{Name: "b", Ready: true, Subnet: subnet, LeaseExpired: true}
	cluster := egress.Cluster{Nodes: []egress.Node{renewing, silent}}
	seen := map[string]time.Time{}

	held, recheck := settling([]egress.Compiled{compile("new", "192.168.10.200", ""), compile("placed", "192.168.10.201", "a"),
		compile("elsewhere", "192.168.20.5", "")}, cluster, seen, t0)
	g.Expect(held).To(Equal(map[string]bool{"new": true}), "node b could hold it but has not renewed yet")
	g.Expect(recheck).To(Equal(newEgressSettle))

	held, recheck = settling([]egress.Compiled{compile("new", "192.168.10.200", "")}, cluster, seen, t0.Add(time.Second))
	g.Expect(held).To(HaveKey("new"))
	g.Expect(recheck).To(Equal(newEgressSettle-time.Second), "counted from the first sight")

	held, _ = settling([]egress.Compiled{compile("new", "192.168.10.200", "")}, cluster, seen, t0.Add(newEgressSettle))
	g.Expect(held).To(BeEmpty(), "placed on what renews by then")

	held, _ = settling([]egress.Compiled{compile("other", "192.168.10.202", "")}, egress.Cluster{Nodes: []egress.Node{renewing}}, seen, t0)
	g.Expect(held).To(BeEmpty(), "every node that could hold it renews: no wait")
	g.Expect(seen).NotTo(HaveKey("new"), "a deleted Egress is forgotten")
}
