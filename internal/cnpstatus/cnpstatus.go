package cnpstatus

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strings"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
)

const (
	// Buckets is how many digests a report carries (ClusterNetworkPolicyReport.Digests).
	Buckets = 256
	// MaxNotRealised bounds the policies a report lists as not realised whole.
	MaxNotRealised = 64
	// MaxMessage bounds a ClusterNetworkPolicyRealisation's message (the API's MaxLength).
	MaxMessage = 2048
	// MaxLegacyEntries is the most ClusterNetworkPolicies for which an agent writes the list
	// previous releases read (NetworkPoliciesStatus.ClusterNetworkPolicies); beyond, it writes none.
	MaxLegacyEntries = 256
	// MaxLegacyMessage bounds the messages of that list: a previous release's controller needs only
	// to know whether one is empty, and its condition's message shows it.
	MaxLegacyMessage = 256
)

// Bucket is the bucket of the policy named name: the FNV-1a hash of the name modulo Buckets.
func Bucket(name string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	return int(h.Sum32() % Buckets)
}

// Digest is the digest of one bucket's policies, by name and generation: the first 16 hexadecimal
// digits of the SHA-256 of their "<name> <generation>\n" lines sorted by name; empty for a bucket
// without policies (a node with few policies writes little).
func Digest(generations map[string]int64) string {
	if len(generations) == 0 {
		return ""
	}
	h := sha256.New()
	for _, name := range slices.Sorted(maps.Keys(generations)) {
		fmt.Fprintf(h, "%s %d\n", name, generations[name])
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// Digests are the digests of every bucket of the policies, by name and generation.
func Digests(generations map[string]int64) []string {
	byBucket := make([]map[string]int64, Buckets)
	for name, gen := range generations {
		b := Bucket(name)
		if byBucket[b] == nil {
			byBucket[b] = map[string]int64{}
		}
		byBucket[b][name] = gen
	}
	out := make([]string, Buckets)
	for i := range out {
		out[i] = Digest(byBucket[i])
	}
	return out
}

// LegacyDigest is the digest of the list previous releases read, as written (its order included).
func LegacyDigest(list []networkv1alpha1.ClusterNetworkPolicyRealisation) string {
	h := sha256.New()
	for _, c := range list {
		fmt.Fprintf(h, "%s %d %q\n", c.Name, c.Generation, c.NotRealised)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// Cut shortens a message to at most max bytes, on a rune boundary, ending in " ..." when cut.
func Cut(msg string, max int) string {
	if len(msg) <= max {
		return msg
	}
	cut := max - len(" ...")
	for cut > 0 && !utf8RuneStart(msg[cut]) {
		cut--
	}
	return strings.TrimRight(msg[:cut], " ") + " ..."
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

// Valid tells whether a node's report can be read: present, with every bucket, and written with
// the list beside it (its legacyDigest matches it). A report that does not match was left by a newer
// agent and the list overwritten since by an older one.
func Valid(s networkv1alpha1.NetworkPoliciesStatus) bool {
	r := s.ClusterNetworkPolicyReport
	return r != nil && len(r.Digests) == Buckets && r.LegacyDigest == LegacyDigest(s.ClusterNetworkPolicies)
}
