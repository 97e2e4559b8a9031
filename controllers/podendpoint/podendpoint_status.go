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
	pep.Status.VNICToForwarding = nil
	if !a.WaitingForVNIC && a.VNICToForwarding > 0 {
		pep.Status.VNICToForwarding = &metav1.Duration{Duration: a.VNICToForwarding}
	}
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
	switch {
	case a.PolicyPending:
		c.Status, c.Reason = metav1.ConditionFalse, networkv1alpha1.PoliciesPendingReason
		c.Message = fmt.Sprintf("the NetworkPolicy flows for the Pod (ofport %d) are not committed yet; OVS port %s stays unbound, the Pod isolated, until they are (see the node's PoliciesReady)", a.OFPort, a.EndpointName)
	case a.VNICMissing:
		c.Status, c.Reason = metav1.ConditionFalse, networkv1alpha1.VNICMissingReason
		c.Message = fmt.Sprintf("the vNIC of HNS endpoint %s did not appear after ADD (the runtime did not start the sandbox); its port %s forwards nothing", a.EndpointID, a.EndpointName)
	case a.WaitingForVNIC:
		c.Status, c.Reason = metav1.ConditionFalse, networkv1alpha1.WaitingForVNICReason
		c.Message = fmt.Sprintf("HNS endpoint %s and the Pod's flows (ofport %d) are in place; OVS port %s waits for the endpoint's vNIC, which appears when the runtime starts the sandbox", a.EndpointID, a.OFPort, a.EndpointName)
	}
	if repairErr != nil {
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, networkv1alpha1.ProgressingReason, repairErr.Error()
		if len(repaired) > 0 {
			c.Reason = repaired[0]
		}
	}
	meta.SetStatusCondition(&pep.Status.Conditions, c)
}
