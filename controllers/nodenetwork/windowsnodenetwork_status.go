package nodenetwork

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
)

// components are the conditions the reconciler converges, in order: each is built on the ones
// before it.
var components = []string{
	networkv1alpha1.HostSwitchReadyCondition,
	networkv1alpha1.BridgeReadyCondition,
	networkv1alpha1.UplinkReadyCondition,
	networkv1alpha1.GatewayReadyCondition,
	networkv1alpha1.TunnelReadyCondition,
	networkv1alpha1.PipelineReadyCondition,
}

// componentError is a failed component with the reason its condition carries.
type componentError struct {
	reason string
	err    error
}

func (e *componentError) Error() string { return e.err.Error() }
func (e *componentError) Unwrap() error { return e.err }

func failed(reason string, err error) error { return &componentError{reason: reason, err: err} }

// outcome is what a converged component reports in its True condition.
type outcome struct{ reason, message string }

// setComponentConditions records the outcome of the convergence: the components before the failed
// one are True with their outcome, the failed one False with its reason, the ones after it False as
// not attempted. done holds the outcomes of the components that converged, in order; err is nil
// when all did.
func setComponentConditions(w *networkv1alpha1.WindowsNodeNetwork, done []outcome, err error) {
	gen := w.Generation
	for i, typ := range components {
		c := metav1.Condition{Type: typ, ObservedGeneration: gen}
		switch {
		case i < len(done):
			c.Status, c.Reason, c.Message = metav1.ConditionTrue, done[i].reason, done[i].message
		case i == len(done):
			c.Status, c.Reason, c.Message = metav1.ConditionFalse, networkv1alpha1.ProgressingReason, err.Error()
			var ce *componentError
			if errors.As(err, &ce) {
				c.Reason = ce.reason
			}
		default:
			c.Status, c.Reason = metav1.ConditionFalse, networkv1alpha1.DependencyNotReadyReason
			c.Message = fmt.Sprintf("Waiting for %s", components[len(done)])
		}
		meta.SetStatusCondition(&w.Status.Conditions, c)
	}
	setReadyCondition(w)
}

// setReadyCondition summarises the components and RoutesReady (when the route reconciler has set it).
func setReadyCondition(w *networkv1alpha1.WindowsNodeNetwork) {
	var notReady []string
	for _, typ := range append(components[:len(components):len(components)], networkv1alpha1.RoutesReadyCondition) {
		c := meta.FindStatusCondition(w.Status.Conditions, typ)
		if c == nil {
			if typ == networkv1alpha1.RoutesReadyCondition {
				continue
			}
			notReady = append(notReady, typ)
			continue
		}
		if c.Status != metav1.ConditionTrue {
			notReady = append(notReady, typ)
		}
	}
	c := metav1.Condition{Type: networkv1alpha1.ReadyCondition, ObservedGeneration: w.Generation}
	if len(notReady) == 0 {
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, networkv1alpha1.ReadyReason, "The node network is converged"
		if v6 := unrealisedPodCIDRs(w.Spec.PodCIDRs); len(v6) > 0 {
			c.Message += fmt.Sprintf(" for IPv4; IPv6 Pod CIDRs %v not realised (winnet's Windows data plane is IPv4: the node's Pods get IPv4 addresses only)", v6)
		}
	} else {
		c.Status, c.Reason = metav1.ConditionFalse, networkv1alpha1.ComponentsNotReadyReason
		c.Message = "Not ready: " + strings.Join(notReady, ", ")
	}
	meta.SetStatusCondition(&w.Status.Conditions, c)
}

// unrealisedPodCIDRs are the Pod CIDRs of the spec the node does not realise: a dual-stack cluster's IPv6
// ones, which the WindowsNodeNetwork keeps (they are the Node's) and the Ready condition names, once.
func unrealisedPodCIDRs(cidrs []networkv1alpha1.CIDR) []string {
	var out []string
	for _, c := range cidrs {
		if p, err := netip.ParsePrefix(string(c)); err == nil && !p.Addr().Is4() {
			out = append(out, p.String())
		}
	}
	return out
}

// maxNamedRoutes bounds how many failed routes RoutesReady names.
const maxNamedRoutes = 5

// setRoutesCondition reports what the remote route reconciler installed.
func setRoutesCondition(w *networkv1alpha1.WindowsNodeNetwork, r RoutesResult) {
	w.Status.RemoteRoutes = networkv1alpha1.RemoteRoutesStatus{
		Desired: int32(r.Desired), Installed: int32(r.Installed), Failed: int32(len(r.Failed)),
	}
	c := metav1.Condition{Type: networkv1alpha1.RoutesReadyCondition, ObservedGeneration: w.Generation}
	if len(r.Failed) == 0 {
		c.Status, c.Reason = metav1.ConditionTrue, networkv1alpha1.ReadyReason
		c.Message = fmt.Sprintf("%d of %d remote routes installed", r.Installed, r.Desired)
	} else {
		named := r.Failed
		if len(named) > maxNamedRoutes {
			named = named[:maxNamedRoutes]
		}
		c.Status, c.Reason = metav1.ConditionFalse, networkv1alpha1.RoutesFailedReason
		c.Message = fmt.Sprintf("%d of %d remote routes failed: %s", len(r.Failed), r.Desired, strings.Join(named, "; "))
		if len(r.Failed) > maxNamedRoutes {
			c.Message += fmt.Sprintf(" (and %d more)", len(r.Failed)-maxNamedRoutes)
		}
	}
	meta.SetStatusCondition(&w.Status.Conditions, c)
}

// setServicesCondition reports what the Service reconciler realised.
func setServicesCondition(w *networkv1alpha1.WindowsNodeNetwork, r ServicesResult) {
	w.Status.Services = networkv1alpha1.ServicesStatus{Services: int32(r.Services), Ports: int32(r.Ports)}
	c := metav1.Condition{Type: networkv1alpha1.ServicesReadyCondition, ObservedGeneration: w.Generation}
	if r.Err == "" {
		c.Status, c.Reason = metav1.ConditionTrue, networkv1alpha1.ReadyReason
		c.Message = fmt.Sprintf("%d Services (%d ports) realised in OVS", r.Services, r.Ports)
	} else {
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, networkv1alpha1.ServicesFailedReason, r.Err
	}
	meta.SetStatusCondition(&w.Status.Conditions, c)
}

// setPoliciesCondition reports what the NetworkPolicy reconciler realised.
func setPoliciesCondition(w *networkv1alpha1.WindowsNodeNetwork, r PoliciesResult) {
	w.Status.NetworkPolicies = networkv1alpha1.NetworkPoliciesStatus{Policies: int32(r.Policies), Rules: int32(r.Rules), ClusterNetworkPolicies: r.Cluster,
		ClusterNetworkPolicyReport: r.ClusterReport}
	c := metav1.Condition{Type: networkv1alpha1.PoliciesReadyCondition, ObservedGeneration: w.Generation}
	switch {
	case r.Err == "" && len(r.Refused) > 0:
		refused := r.Refused
		if len(refused) > maxNamedRoutes {
			refused = append(refused[:maxNamedRoutes:maxNamedRoutes], fmt.Sprintf("and %d more", len(r.Refused)-maxNamedRoutes))
		}
		c.Status, c.Reason = metav1.ConditionFalse, networkv1alpha1.PolicyRulesRefusedReason
		c.Message = fmt.Sprintf("%d NetworkPolicies (%d rules) realised in OVS; refused: %s", r.Policies, r.Rules, strings.Join(refused, "; "))
	case r.Err == "":
		c.Status, c.Reason = metav1.ConditionTrue, networkv1alpha1.ReadyReason
		c.Message = fmt.Sprintf("%d NetworkPolicies (%d rules) realised in OVS", r.Policies, r.Rules)
	default:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, networkv1alpha1.PoliciesFailedReason, r.Err
	}
	meta.SetStatusCondition(&w.Status.Conditions, c)
}

// setInvalidSpec marks every component False because the spec cannot be realised.
func setInvalidSpec(w *networkv1alpha1.WindowsNodeNetwork, reason string, err error) {
	for _, typ := range components {
		meta.SetStatusCondition(&w.Status.Conditions, metav1.Condition{
			Type: typ, Status: metav1.ConditionFalse, Reason: reason, Message: err.Error(), ObservedGeneration: w.Generation,
		})
	}
	setReadyCondition(w)
}

// setEgressIPs reports the egress IPs the node realised.
func setEgressIPs(w *networkv1alpha1.WindowsNodeNetwork, ips []netip.Addr) {
	w.Status.EgressIPs = nil
	for _, ip := range ips {
		w.Status.EgressIPs = append(w.Status.EgressIPs, networkv1alpha1.IPv4Address(ip.String()))
	}
}
