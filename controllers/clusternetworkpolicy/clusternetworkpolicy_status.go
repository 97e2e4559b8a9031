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
)

// maxNamedNodes bounds how many nodes a message names.
const maxNamedNodes = 5

// setRealisedCondition sets Realised from the nodes' reports. A node takes part when its agent
// reports ClusterNetworkPolicies at all (a non-empty list); it is behind when it does not list the
// policy at its current generation.
func setRealisedCondition(p *cnpv1beta1.ClusterNetworkPolicy, nodes []networkv1alpha1.WindowsNodeNetwork) {
	var behind, partly []string
	reporting := 0
	for i := range nodes {
		list := nodes[i].Status.NetworkPolicies.ClusterNetworkPolicies
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
