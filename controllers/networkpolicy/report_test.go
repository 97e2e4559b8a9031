package networkpolicy

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/cnpstatus"
)

// maxReportBytes bounds what a node writes of the ClusterNetworkPolicies in its status (the report
// and the list beside it, as JSON), whatever their number: a fifth of etcd's default request limit
// (1.5 MiB), which the whole status must stay under.
const maxReportBytes = 320 << 10

// largestClusterDesired is n ClusterNetworkPolicies of the longest names, each applying to the node
// and not realised whole, with a message longer than any report keeps.
func largestClusterDesired(n int) ClusterDesired {
	d := ClusterDesired{Generations: map[string]int64{}, Applied: map[string]bool{}, Unsupported: map[string][]string{}, Refused: map[string][]string{}}
	for i := range n {
		name := fmt.Sprintf("%05d-%s", i, strings.Repeat("n", 247))
		d.Generations[name] = int64(1<<40 + i)
		d.Applied[name] = true
		d.Unsupported[name] = []string{strings.Repeat("ingress rule 0: protocol 0: no field winnet knows: every port of its peers is dropped instead (fail closed); ", 40)}
	}
	return d
}

// TestClusterReportBounded: however many ClusterNetworkPolicies apply to the node and are not
// realised whole, what it writes of them stays under maxReportBytes: the list previous releases
// read up to cnpstatus.MaxLegacyEntries policies (none beyond), the report's digests, and the first
// cnpstatus.MaxNotRealised policies not realised whole with a count of the others.
func TestClusterReportBounded(t *testing.T) {
	for _, n := range []int{0, 1, cnpstatus.MaxLegacyEntries, cnpstatus.MaxLegacyEntries + 1, 20000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			g := NewWithT(t)
			legacy, report := largestClusterDesired(n).Report()
			status := networkv1alpha1.NetworkPoliciesStatus{ClusterNetworkPolicies: legacy, ClusterNetworkPolicyReport: report}
			b, err := json.Marshal(status)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(len(b)).To(BeNumerically("<=", maxReportBytes), "%d policies", n)
			t.Logf("%d policies: %d bytes", n, len(b))
			g.Expect(report.Compiled).To(Equal(int32(n)))
			g.Expect(report.Digests).To(HaveLen(cnpstatus.Buckets))
			g.Expect(len(report.NotRealised) + int(report.NotRealisedOmitted)).To(Equal(n))
			g.Expect(len(report.NotRealised)).To(BeNumerically("<=", cnpstatus.MaxNotRealised))
			for _, c := range report.NotRealised {
				g.Expect(len(c.NotRealised)).To(BeNumerically("<=", cnpstatus.MaxMessage))
				g.Expect(c.NotRealised).To(HaveSuffix(" ..."))
			}
			if n > cnpstatus.MaxLegacyEntries {
				g.Expect(legacy).To(BeEmpty(), "no list beyond its cap: a previous release's controller counts no node")
			} else {
				g.Expect(legacy).To(HaveLen(n), "the list whole: a previous release's controller needs every policy")
			}
			g.Expect(report.LegacyDigest).To(Equal(cnpstatus.LegacyDigest(legacy)))
		})
	}
}

// TestClusterReportApplied: a node reports what it does not realise only of the policies that
// apply to it; the others are in its digests and, at their generation, in the list.
func TestClusterReportApplied(t *testing.T) {
	g := NewWithT(t)
	d := ClusterDesired{Generations: map[string]int64{"here": 2, "elsewhere": 3}, Applied: map[string]bool{"here": true},
		Unsupported: map[string][]string{"here": {"egress rule 0: x"}, "elsewhere": {"egress rule 0: y"}}, Refused: map[string][]string{"here": {"ingress rule 1: z"}}}
	legacy, report := d.Report()
	g.Expect(report.NotRealised).To(Equal([]networkv1alpha1.ClusterNetworkPolicyRealisation{{Name: "here", Generation: 2, NotRealised: "ingress rule 1: z; egress rule 0: x"}}))
	g.Expect(report.Applied).To(Equal(int32(1)))
	g.Expect(report.Digests).To(Equal(cnpstatus.Digests(map[string]int64{"here": 2, "elsewhere": 3})))
	g.Expect(legacy).To(Equal([]networkv1alpha1.ClusterNetworkPolicyRealisation{{Name: "elsewhere", Generation: 3}, {Name: "here", Generation: 2, NotRealised: "ingress rule 1: z; egress rule 0: x"}}))
}
