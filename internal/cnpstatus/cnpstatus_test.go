package cnpstatus

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"unicode/utf8"

	. "github.com/onsi/gomega"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
)

// TestDigest: a bucket's digest is what the API documents (ClusterNetworkPolicyReport.Digests), so
// that agents and winnet-controller of any release compute the same: the first 16 hexadecimal
// digits of the SHA-256 of "<name> <generation>\n" lines sorted by name; Digests puts each policy
// in its bucket.
func TestDigest(t *testing.T) {
	g := NewWithT(t)
	sum := sha256.Sum256([]byte("a 2\nb 10\n"))
	g.Expect(Digest(map[string]int64{"b": 10, "a": 2})).To(Equal(hex.EncodeToString(sum[:])[:16]))
	g.Expect(Digest(map[string]int64{"a": 3})).NotTo(Equal(Digest(map[string]int64{"a": 2})))
	g.Expect(Digest(nil)).To(BeEmpty(), "a bucket without policies")

	digests := Digests(map[string]int64{"a": 2, "b": 10})
	g.Expect(digests).To(HaveLen(Buckets))
	g.Expect(Bucket("a")).NotTo(Equal(Bucket("b")))
	g.Expect(digests[Bucket("a")]).To(Equal(Digest(map[string]int64{"a": 2})))
	g.Expect(digests[Bucket("b")]).To(Equal(Digest(map[string]int64{"b": 10})))
	for i, d := range digests {
		if i != Bucket("a") && i != Bucket("b") {
			g.Expect(d).To(Equal(Digest(nil)))
		}
	}
}

// TestCut: a message is cut on a rune boundary to at most max bytes, and says so.
func TestCut(t *testing.T) {
	g := NewWithT(t)
	g.Expect(Cut("short", 10)).To(Equal("short"))
	long := strings.Repeat("é", 100)
	cut := Cut(long, 51)
	g.Expect(len(cut)).To(BeNumerically("<=", 51))
	g.Expect(utf8.ValidString(cut)).To(BeTrue())
	g.Expect(cut).To(HaveSuffix(" ..."))
}

// TestValid: a report is read only with every bucket and with the list it was written with.
func TestValid(t *testing.T) {
	g := NewWithT(t)
	list := []networkv1alpha1.ClusterNetworkPolicyRealisation{{Name: "p", Generation: 1}}
	s := networkv1alpha1.NetworkPoliciesStatus{ClusterNetworkPolicies: list, ClusterNetworkPolicyReport: &networkv1alpha1.ClusterNetworkPolicyReport{
		Digests: Digests(map[string]int64{"p": 1}), LegacyDigest: LegacyDigest(list)}}
	g.Expect(Valid(s)).To(BeTrue())
	s.ClusterNetworkPolicies = []networkv1alpha1.ClusterNetworkPolicyRealisation{{Name: "p", Generation: 2}}
	g.Expect(Valid(s)).To(BeFalse(), "the list rewritten by an agent that does not write the report")
	s.ClusterNetworkPolicies = list
	s.ClusterNetworkPolicyReport.Digests = s.ClusterNetworkPolicyReport.Digests[:8]
	g.Expect(Valid(s)).To(BeFalse())
	g.Expect(Valid(networkv1alpha1.NetworkPoliciesStatus{ClusterNetworkPolicies: list})).To(BeFalse())
}
