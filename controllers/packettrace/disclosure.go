package packettrace

import (
	"fmt"
	"strings"
	"unicode"

	"k8s.io/apimachinery/pkg/types"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
)

// disclosure names the objects a trace's observations mention as far as the trace's
// spec.disclosure allows: a trace tells whoever may read it only what its creator may read (the
// chart's admission policy checked the creator's rights for the level and for a destination in
// another namespace when the trace was created).
//
// At the Namespace level a trace names the Pods and NetworkPolicies of its own namespace and the
// destination Pod its creator named; a Pod or NetworkPolicy of the namespace of a destination the
// creator named (whose Pods or Services it may get) by its namespace; anything else by its kind
// alone. At the Cluster level it names everything.
type disclosure struct {
	// own is the trace's namespace.
	own string
	// cluster: the trace may name every object.
	cluster bool
	// named is the namespace of the destination Pod or Service the creator named, when it is
	// another namespace than own ("" otherwise).
	named string
	// namedPod is the destination Pod the creator named (zero when the destination is no Pod).
	namedPod types.NamespacedName
}

// disclosureOf is the disclosure of tr.
func disclosureOf(tr *networkv1alpha1.PacketTrace) disclosure {
	d := disclosure{own: tr.Namespace, cluster: tr.Spec.Disclosure == networkv1alpha1.PacketTraceDisclosureCluster}
	dst := tr.Spec.Destination
	switch {
	case dst.Pod != nil:
		d.namedPod = types.NamespacedName{Namespace: orDefault(dst.Pod.Namespace, tr.Namespace), Name: dst.Pod.Name}
		if d.namedPod.Namespace != d.own {
			d.named = d.namedPod.Namespace
		}
	case dst.Service != nil:
		if ns := orDefault(dst.Service.Namespace, tr.Namespace); ns != d.own {
			d.named = ns
		}
	}
	return d
}

// pod names the Pod namespace/name: ", Pod ns/name", or its namespace alone, or nothing of it.
func (d disclosure) pod(namespace, name string) string {
	switch {
	case d.cluster || namespace == d.own || (types.NamespacedName{Namespace: namespace, Name: name}) == d.namedPod:
		return fmt.Sprintf("Pod %s/%s", namespace, name)
	case namespace == d.named:
		return "a Pod of namespace " + namespace
	}
	return "a Pod of another namespace"
}

// networkPolicy names a NetworkPolicy and its rule: the reference an observation carries and the
// text of its detail. A NetworkPolicy the trace may not name keeps its namespace only when the
// creator may read that namespace's Pods or Services (its own rule index is left out: "default
// deny", which says the Pod is isolated, stays).
func (d disclosure) networkPolicy(policy types.NamespacedName, rule string) (*networkv1alpha1.PolicyRuleReference, string) {
	if d.cluster || policy.Namespace == d.own {
		return &networkv1alpha1.PolicyRuleReference{Kind: "NetworkPolicy", Namespace: policy.Namespace, Name: policy.Name, Rule: rule},
			"NetworkPolicy " + policy.String()
	}
	if rule != "default deny" {
		rule = ""
	}
	if policy.Namespace == d.named {
		return &networkv1alpha1.PolicyRuleReference{Kind: "NetworkPolicy", Namespace: policy.Namespace, Rule: rule},
			"a NetworkPolicy of namespace " + policy.Namespace
	}
	return &networkv1alpha1.PolicyRuleReference{Kind: "NetworkPolicy", Rule: rule}, "a NetworkPolicy of another namespace"
}

// clusterNetworkPolicy says whether the trace may name ClusterNetworkPolicies.
func (d disclosure) clusterNetworkPolicy() bool { return d.cluster }

// printable replaces control characters (C0, DEL, C1) with spaces and cuts s to the length an
// observation's detail may have: the CRD refuses control characters (a terminal that prints a
// trace must not take them for commands), and text from errors or objects may carry them.
func printable(s string) string {
	if strings.IndexFunc(s, unicode.IsControl) >= 0 {
		s = strings.Map(func(r rune) rune {
			if unicode.IsControl(r) {
				return ' '
			}
			return r
		}, s)
	}
	return truncate(s)
}
