package podendpoint

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
)

// setStatus records the attachment and the outcome of its repair in the PodEndpoint's status.
func setStatus(pep *networkv1alpha1.PodEndpoint, a *Attachment, repaired []string, repairErr error) {
	pep.Status.HNSEndpointID = a.EndpointID
	pep.Status.OVSPort = a.EndpointName
	pep.Status.OFPort = a.OFPort
	pep.Status.AttachedContainers = slices.Clone(a.Containers)
	setReadyCondition(pep, a, repaired, repairErr)
	if repairErr == nil {
		pep.Status.ObservedGeneration = pep.Generation
	}
}

// setReadyCondition: True when the endpoint, the port and the flows are in place; False with the
// reason of the part that is being repaired.
func setReadyCondition(pep *networkv1alpha1.PodEndpoint, a *Attachment, repaired []string, repairErr error) {
	c := metav1.Condition{
		Type: networkv1alpha1.ReadyCondition, Status: metav1.ConditionTrue, Reason: networkv1alpha1.ReadyReason,
		ObservedGeneration: pep.Generation,
		Message: fmt.Sprintf("HNS endpoint %s, OVS port %s (ofport %d) and the Pod's flows are in place for %s",
			a.EndpointID, a.EndpointName, a.OFPort, a.IP),
	}
	if len(repaired) > 0 {
		c.Message += "; repaired: " + strings.Join(repaired, ", ")
	}
	if repairErr != nil {
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, networkv1alpha1.ProgressingReason, repairErr.Error()
		if len(repaired) > 0 {
			c.Reason = repaired[0]
		}
	}
	meta.SetStatusCondition(&pep.Status.Conditions, c)
}
