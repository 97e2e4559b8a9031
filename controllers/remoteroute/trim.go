package remoteroute

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
)

// TrimRoute is the transform of the agent's RemoteSubnetRoute cache, which holds every route of the
// cluster (5,000 with 5,000 Nodes). It drops what the remote route reconciler does not read: the
// managed fields, labels, annotations, owner references and finalizers, and of the status every
// condition but Accepted, and of that one all but its type and status (accepted reads nothing else;
// its message, reason and time were a third of a route's cached size). Whatever the reconciler starts
// to read must be kept here too (TestTrimRouteKeepsWhatTheReconcilerReads).
func TrimRoute(obj any) (any, error) {
	rsr, ok := obj.(*networkv1alpha1.RemoteSubnetRoute)
	if !ok {
		return obj, nil
	}
	rsr.ManagedFields, rsr.Labels, rsr.Annotations, rsr.OwnerReferences, rsr.Finalizers = nil, nil, nil, nil, nil
	var kept []metav1.Condition
	if c := meta.FindStatusCondition(rsr.Status.Conditions, networkv1alpha1.AcceptedCondition); c != nil {
		kept = []metav1.Condition{{Type: c.Type, Status: c.Status}}
	}
	rsr.Status.Conditions = kept
	return rsr, nil
}
