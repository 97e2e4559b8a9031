package cluster

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/egress"
)

// setEgressStatus writes the decision into the Egress's status: node, Assigned, Ready, Superseded.
func setEgressStatus(e *networkv1alpha1.Egress, d egress.Decision, ready bool, s supersession) {
	gen := e.Generation
	e.Status.ObservedGeneration = gen
	e.Status.Node = d.Node
	setEgressAssigned(e, d)
	setEgressReady(e, d, ready)
	setEgressSuperseded(e, s)
}

func setEgressAssigned(e *networkv1alpha1.Egress, d egress.Decision) {
	status := metav1.ConditionFalse
	if d.Assigned() {
		status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&e.Status.Conditions, metav1.Condition{Type: networkv1alpha1.AssignedCondition, Status: status,
		ObservedGeneration: e.Generation, Reason: d.Reason, Message: d.Message})
}

func setEgressReady(e *networkv1alpha1.Egress, d egress.Decision, ready bool) {
	c := metav1.Condition{Type: networkv1alpha1.ReadyCondition, Status: metav1.ConditionFalse, ObservedGeneration: e.Generation}
	switch {
	case !d.Assigned():
		c.Reason, c.Message = networkv1alpha1.NotAssignedReason, "No node holds the egress IP: see Assigned"
	case ready:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, networkv1alpha1.EgressRealisedReason,
			fmt.Sprintf("Node %s holds %s and SNATs the selected Pods' connections to it", d.Node, e.Spec.EgressIP)
	default:
		c.Reason, c.Message = networkv1alpha1.EgressPendingReason, fmt.Sprintf("Waiting for node %s to report %s realised", d.Node, e.Spec.EgressIP)
	}
	meta.SetStatusCondition(&e.Status.Conditions, c)
}

func setEgressSuperseded(e *networkv1alpha1.Egress, s supersession) {
	c := metav1.Condition{Type: networkv1alpha1.SupersededCondition, Status: metav1.ConditionFalse, ObservedGeneration: e.Generation,
		Reason: networkv1alpha1.NoOverlapReason, Message: "No older Egress selects a Pod this one selects"}
	if s.pods > 0 {
		c.Status, c.Reason = metav1.ConditionTrue, networkv1alpha1.OlderEgressSelectsPodsReason
		c.Message = fmt.Sprintf("%d Pods this Egress selects use the egress IP of the older Egress %s, which selects them too", s.pods, s.by)
	}
	meta.SetStatusCondition(&e.Status.Conditions, c)
}

// egressStatusEqual compares two statuses, conditions without their transition times.
func egressStatusEqual(a, b networkv1alpha1.EgressStatus) bool {
	strip := func(s networkv1alpha1.EgressStatus) networkv1alpha1.EgressStatus {
		s = *s.DeepCopy()
		for i := range s.Conditions {
			s.Conditions[i].LastTransitionTime = metav1.Time{}
		}
		return s
	}
	return equality.Semantic.DeepEqual(strip(a), strip(b))
}
