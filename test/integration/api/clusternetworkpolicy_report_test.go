//go:build !windows

package api

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/networkpolicy"
	"github.com/winnet-io/winnet/internal/cnpstatus"
)

// TestClusterNetworkPolicyReportAtTheCap writes, through the real API server, the largest status an
// agent writes of the ClusterNetworkPolicies (the list previous releases read at its cap, and the
// report with its not-realised entries at theirs, every name and message as long as they go) and
// the one of a node with 20,000 policies that apply to it: both are accepted and read back whole.
func TestClusterNetworkPolicyReportAtTheCap(t *testing.T) {
	ctx := context.Background()
	c := server.Client
	for _, n := range []int{cnpstatus.MaxLegacyEntries, 20000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			g := NewWithT(t)
			d := networkpolicy.ClusterDesired{Generations: map[string]int64{}, Applied: map[string]bool{}, Unsupported: map[string][]string{}}
			for i := range n {
				name := fmt.Sprintf("%05d-%s", i, strings.Repeat("n", 247))
				d.Generations[name], d.Applied[name] = int64(1<<40+i), true
				d.Unsupported[name] = []string{strings.Repeat("égress rule 0: protocol 0: no field winnet knows: every port of its peers is dropped instead (fail closed); ", 30)}
			}
			wnn := &networkv1alpha1.WindowsNodeNetwork{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cnp-report-%d", n)},
				Spec:       networkv1alpha1.WindowsNodeNetworkSpec{PodCIDRs: []networkv1alpha1.CIDR{"10.244.9.0/24"}, NodeIP: "192.168.10.19"},
			}
			g.Expect(c.Create(ctx, wnn)).To(Succeed())
			t.Cleanup(func() { _ = c.Delete(ctx, wnn) })
			legacy, report := d.Report()
			wnn.Status.NetworkPolicies = networkv1alpha1.NetworkPoliciesStatus{Policies: int32(n), Rules: int32(n), ClusterNetworkPolicies: legacy, ClusterNetworkPolicyReport: report}
			b, err := json.Marshal(wnn.Status)
			g.Expect(err).NotTo(HaveOccurred())
			t.Logf("status of %d bytes", len(b))
			g.Expect(c.Status().Update(ctx, wnn)).To(Succeed())
			got := &networkv1alpha1.WindowsNodeNetwork{}
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(wnn), got)).To(Succeed())
			g.Expect(got.Status.NetworkPolicies).To(Equal(wnn.Status.NetworkPolicies))
			g.Expect(cnpstatus.Valid(got.Status.NetworkPolicies)).To(BeTrue(), "the report reads as written with its list")
		})
	}
}
