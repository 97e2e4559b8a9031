package clusternetworkpolicy

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cnpv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/cnpstatus"
)

// maxNamedNodes bounds how many nodes a message names.
const maxNamedNodes = 5

// setRealisedCondition sets Realised from the nodes' reports. A node takes part when its agent
// reports ClusterNetworkPolicies at all. Its report (ClusterNetworkPolicyReport) says it is behind
// unless compiled holds for the digest of the policy's bucket (the node compiled the policy's
// current generation), and names the policy when the node does not realise it whole; a node
// without a report that can be read (an agent before 0.2.0) takes part when its list is not empty,
// and is behind when the list does not name the policy at its current generation.
func setRealisedCondition(p *cnpv1beta1.ClusterNetworkPolicy, nodes []networkv1alpha1.WindowsNodeNetwork, compiled func(digest string) bool) {
	var behind, partly, unreported []string
	reporting := 0
	bucket := cnpstatus.Bucket(p.Name)
	for i := range nodes {
		status := nodes[i].Status.NetworkPolicies
		if cnpstatus.Valid(status) {
			reporting++
			r := status.ClusterNetworkPolicyReport
			if !compiled(r.Digests[bucket]) {
				behind = append(behind, nodes[i].Name)
				continue
			}
			j := slices.IndexFunc(r.NotRealised, func(c networkv1alpha1.ClusterNetworkPolicyRealisation) bool { return c.Name == p.Name })
			switch {
			case j >= 0 && r.NotRealised[j].Generation != p.Generation:
				behind = append(behind, nodes[i].Name)
			case j >= 0:
				partly = append(partly, nodes[i].Name+": "+r.NotRealised[j].NotRealised)
			case r.NotRealisedOmitted > 0 && (len(r.NotRealised) == 0 || p.Name > r.NotRealised[len(r.NotRealised)-1].Name):
				unreported = append(unreported, fmt.Sprintf("%s (%d more not listed)", nodes[i].Name, r.NotRealisedOmitted))
			}
			continue
		}
		list := status.ClusterNetworkPolicies
		if len(list) == 0 {
			continue
		}
		reporting++
		j := slices.IndexFunc(list, func(c networkv1alpha1.ClusterNetworkPolicyRealisation) bool { return c.Name == p.Name })
		switch {
		case j < 0 || list[j].Generation != p.Generation:
			behind = append(behind, nodes[i].Name)
		case list[j].NotRealised != "":
			partly = append(partly, nodes[i].Name+": "+list[j].NotRealised)
		}
	}
	slices.Sort(behind)
	slices.Sort(partly)
	slices.Sort(unreported)
	c := metav1.Condition{Type: networkv1alpha1.RealisedCondition, ObservedGeneration: p.Generation}
	switch {
	case len(partly) > 0:
		c.Status, c.Reason = metav1.ConditionFalse, networkv1alpha1.PartlyRealisedReason
		c.Message = "Not realised whole on " + named(partly)
	case reporting == 0 || len(behind) > 0:
		c.Status, c.Reason = metav1.ConditionUnknown, networkv1alpha1.ProgressingReason
		c.Message = "No winnet node has reported it yet"
		if len(behind) > 0 {
			c.Message = fmt.Sprintf("Waiting for %d of %d winnet nodes: %s", len(behind), reporting, named(behind))
		}
	case len(unreported) > 0:
		c.Status, c.Reason = metav1.ConditionUnknown, networkv1alpha1.NotReportedReason
		c.Message = fmt.Sprintf("Not known on %d of %d winnet nodes, which do not realise whole more policies than they list: %s",
			len(unreported), reporting, named(unreported))
	default:
		c.Status, c.Reason = metav1.ConditionTrue, networkv1alpha1.RealisedReason
		c.Message = fmt.Sprintf("Realised whole on the %d winnet nodes", reporting)
	}
	if len(c.Message) > 32768 {
		c.Message = c.Message[:32760] + " ..."
	}
	meta.SetStatusCondition(&p.Status.Conditions, c)
}

func named(items []string) string {
	if len(items) > maxNamedNodes {
		return strings.Join(items[:maxNamedNodes], "; ") + fmt.Sprintf("; and %d more", len(items)-maxNamedNodes)
	}
	return strings.Join(items, "; ")
}

func equalConditions(a, b *cnpv1beta1.ClusterNetworkPolicy) bool {
	return equality.Semantic.DeepEqual(a.Status.Conditions, b.Status.Conditions)
}
