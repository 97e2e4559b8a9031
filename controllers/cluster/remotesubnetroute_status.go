package cluster

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
)

// maxNamedOverlaps bounds how many overlapping objects a Conflict message names.
const maxNamedOverlaps = 3

// setRouteConditions sets Conflict and Accepted from the route's overlaps.
func setRouteConditions(route *networkv1alpha1.RemoteSubnetRoute, overlaps []Overlap) {
	gen := route.Generation
	route.Status.ObservedGeneration = gen
	if len(overlaps) == 0 {
		meta.SetStatusCondition(&route.Status.Conditions, metav1.Condition{
			Type: networkv1alpha1.ConflictCondition, Status: metav1.ConditionFalse, ObservedGeneration: gen,
			Reason: networkv1alpha1.NoConflictReason, Message: "No other route or node claims these CIDRs",
		})
		meta.SetStatusCondition(&route.Status.Conditions, metav1.Condition{
			Type: networkv1alpha1.AcceptedCondition, Status: metav1.ConditionTrue, ObservedGeneration: gen,
			Reason: networkv1alpha1.AcceptedReason, Message: "Agents install this route",
		})
		return
	}
	msg := overlapMessage(overlaps)
	reason := conflictReason(overlaps)
	meta.SetStatusCondition(&route.Status.Conditions, metav1.Condition{
		Type: networkv1alpha1.ConflictCondition, Status: metav1.ConditionTrue, ObservedGeneration: gen,
		Reason: reason, Message: msg,
	})
	meta.SetStatusCondition(&route.Status.Conditions, metav1.Condition{
		Type: networkv1alpha1.AcceptedCondition, Status: metav1.ConditionFalse, ObservedGeneration: gen,
		Reason: reason, Message: "Agents skip this route until the overlap is resolved: " + msg,
	})
}

// conflictReason is Duplicate when every overlap is an older route of the same node with the same CIDR,
// Overlap otherwise.
func conflictReason(overlaps []Overlap) string {
	for _, o := range overlaps {
		if !o.Duplicate() {
			return networkv1alpha1.OverlapReason
		}
	}
	return networkv1alpha1.DuplicateReason
}

func overlapMessage(overlaps []Overlap) string {
	parts := make([]string, 0, maxNamedOverlaps)
	for i, o := range overlaps {
		if i == maxNamedOverlaps {
			break
		}
		if o.Duplicate() {
			parts = append(parts, fmt.Sprintf("%s is already routed to node %s by %s, which is older (or of the same age and sorts first) and wins",
				o.CIDR, o.Other.Node, o.Other))
			continue
		}
		parts = append(parts, fmt.Sprintf("%s overlaps %s", o.CIDR, o.Other))
	}
	msg := strings.Join(parts, "; ")
	if more := len(overlaps) - maxNamedOverlaps; more > 0 {
		msg += fmt.Sprintf(" (and %d more)", more)
	}
	return msg
}

// routeStatusCurrent reports whether the route's status already says what setRouteConditions would
// write, without copying the route.
func routeStatusCurrent(route *networkv1alpha1.RemoteSubnetRoute, overlaps []Overlap) bool {
	if route.Status.ObservedGeneration != route.Generation {
		return false
	}
	conflict := meta.FindStatusCondition(route.Status.Conditions, networkv1alpha1.ConflictCondition)
	accepted := meta.FindStatusCondition(route.Status.Conditions, networkv1alpha1.AcceptedCondition)
	if conflict == nil || accepted == nil || conflict.ObservedGeneration != route.Generation || accepted.ObservedGeneration != route.Generation {
		return false
	}
	if len(overlaps) == 0 {
		return conflict.Status == metav1.ConditionFalse && accepted.Status == metav1.ConditionTrue
	}
	return conflict.Status == metav1.ConditionTrue && accepted.Status == metav1.ConditionFalse && conflict.Message == overlapMessage(overlaps) &&
		conflict.Reason == conflictReason(overlaps)
}
