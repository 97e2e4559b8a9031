package networkpolicy

import (
	"maps"
	"slices"
	"strings"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/cnpstatus"
)

// notRealised says what the node does not realise of the policy, and how it treats it instead:
// empty for a policy realised whole, and for one that does not apply to the node.
func (d ClusterDesired) notRealised(name string) string {
	if !d.Applied[name] {
		return ""
	}
	return strings.Join(append(slices.Clone(d.Refused[name]), d.Unsupported[name]...), "; ")
}

// Report is what the node reports of the ClusterNetworkPolicies compiled, bounded whatever their
// number (cnpstatus): the report winnet-controller reads (digests of every policy compiled, the
// policies that apply here and are not realised whole, the first cnpstatus.MaxNotRealised by
// name), and the list previous releases' controllers read, which they need whole (a node that lists
// some policies and not another is behind on it, for them): every policy compiled while there are
// at most cnpstatus.MaxLegacyEntries, none beyond.
func (d ClusterDesired) Report() ([]networkv1alpha1.ClusterNetworkPolicyRealisation, *networkv1alpha1.ClusterNetworkPolicyReport) {
	names := slices.Sorted(maps.Keys(d.Generations))
	var legacy []networkv1alpha1.ClusterNetworkPolicyRealisation
	if len(names) <= cnpstatus.MaxLegacyEntries {
		for _, name := range names {
			legacy = append(legacy, networkv1alpha1.ClusterNetworkPolicyRealisation{Name: name, Generation: d.Generations[name],
				NotRealised: cnpstatus.Cut(d.notRealised(name), cnpstatus.MaxLegacyMessage)})
		}
	}
	r := &networkv1alpha1.ClusterNetworkPolicyReport{Compiled: int32(len(names)), Applied: int32(len(d.Applied)),
		Digests: cnpstatus.Digests(d.Generations), LegacyDigest: cnpstatus.LegacyDigest(legacy)}
	for _, name := range names {
		msg := d.notRealised(name)
		switch {
		case msg == "":
		case len(r.NotRealised) == cnpstatus.MaxNotRealised:
			r.NotRealisedOmitted++
		default:
			r.NotRealised = append(r.NotRealised, networkv1alpha1.ClusterNetworkPolicyRealisation{Name: name, Generation: d.Generations[name],
				NotRealised: cnpstatus.Cut(msg, cnpstatus.MaxMessage)})
		}
	}
	return legacy, r
}
