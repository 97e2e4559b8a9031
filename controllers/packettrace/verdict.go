package packettrace

import (
	"slices"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
)

// Verdict reads the packet's fate from the nodes' hops: dropped (and by which policy), delivered,
// or forwarded to an external address. done is false until a node reported one of them and every
// node that reported anything has reported where the packet left it (forwarded, or one of those):
// the hops of the nodes before the last one may arrive after the last one's. The source node's hop
// must have observations: its acknowledgement (an empty hop) is written before it injects.
func Verdict(hops []networkv1alpha1.PacketTraceHop, source string) (v networkv1alpha1.PacketTraceVerdict, droppedBy *networkv1alpha1.PolicyRuleReference, done bool) {
	for _, h := range hops {
		if h.Node == source && len(h.Observations) == 0 {
			return "", nil, false
		}
		if n := len(h.Observations); n > 0 {
			switch h.Observations[n-1].Action {
			case networkv1alpha1.PacketTraceActionForwarded, networkv1alpha1.PacketTraceActionDropped,
				networkv1alpha1.PacketTraceActionDelivered, networkv1alpha1.PacketTraceActionForwardedExternally:
			default:
				return "", nil, false
			}
		}
	}
	for _, h := range hops {
		for _, o := range h.Observations {
			switch o.Action {
			case networkv1alpha1.PacketTraceActionDropped:
				if o.Policy != nil {
					p := *o.Policy
					droppedBy = &p
				}
				return networkv1alpha1.PacketTraceDropped, droppedBy, true
			case networkv1alpha1.PacketTraceActionDelivered:
				v, done = networkv1alpha1.PacketTraceDelivered, true
			case networkv1alpha1.PacketTraceActionForwardedExternally:
				v, done = networkv1alpha1.PacketTraceForwardedExternally, true
			}
		}
	}
	if source != "" && !slices.ContainsFunc(hops, func(h networkv1alpha1.PacketTraceHop) bool { return h.Node == source }) {
		return "", nil, false
	}
	return v, nil, done
}
