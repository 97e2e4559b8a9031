package cluster

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// nodeFactsChanged passes a Node's update only when something winnet-controller derives from changed:
// its labels (which nodes are Windows nodes), annotations (flannel's lease and winnet's record), Pod
// CIDRs, addresses, or the start of its deletion. kubelet's heartbeats (conditions, capacity, images)
// change none of them: at 5,000 nodes they would otherwise queue work ahead of a new node's routes.
func nodeFactsChanged() predicate.Funcs {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		old, ok1 := e.ObjectOld.(*corev1.Node)
		cur, ok2 := e.ObjectNew.(*corev1.Node)
		if !ok1 || !ok2 {
			return true
		}
		return !maps.Equal(old.Labels, cur.Labels) || !maps.Equal(old.Annotations, cur.Annotations) ||
			old.Spec.PodCIDR != cur.Spec.PodCIDR || !slices.Equal(old.Spec.PodCIDRs, cur.Spec.PodCIDRs) ||
			!slices.Equal(old.Status.Addresses, cur.Status.Addresses) ||
			old.DeletionTimestamp.IsZero() != cur.DeletionTimestamp.IsZero()
	}}
}

// nodeCIDRsChanged passes a Node's update only when its Pod CIDRs or its deletion changed: all the
// route conflict check reads of a Node.
func nodeCIDRsChanged() predicate.Funcs {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		old, ok1 := e.ObjectOld.(*corev1.Node)
		cur, ok2 := e.ObjectNew.(*corev1.Node)
		if !ok1 || !ok2 {
			return true
		}
		return old.Spec.PodCIDR != cur.Spec.PodCIDR || !slices.Equal(old.Spec.PodCIDRs, cur.Spec.PodCIDRs) ||
			old.DeletionTimestamp.IsZero() != cur.DeletionTimestamp.IsZero()
	}}
}
