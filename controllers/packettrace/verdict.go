package packettrace

import (
	"slices"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
)

// PathVerdict is Verdict of the hops of the nodes on the trace's path (status.sourceNode and
// status.nodes) only: an agent may write its own node's hop into any trace, and a node the packet
// was never sent to must not decide its fate (a forged Dropped or Delivered hop is ignored).
func PathVerdict(st *networkv1alpha1.PacketTraceStatus) (v networkv1alpha1.PacketTraceVerdict, droppedBy *networkv1alpha1.PolicyRuleReference, done bool) {
	return Verdict(HopsOnPath(st), st.SourceNode)
}

// HopsOnPath returns the hops of the nodes on the trace's path: the source node and status.nodes.
func HopsOnPath(st *networkv1alpha1.PacketTraceStatus) []networkv1alpha1.PacketTraceHop {
	var hops []networkv1alpha1.PacketTraceHop
	for _, h := range st.Hops {
		if h.Node != "" && (h.Node == st.SourceNode || slices.Contains(st.Nodes, h.Node)) {
			hops = append(hops, h)
		}
	}
	return hops
}

// Verdict reads the packet's fate from the nodes' hops: dropped (and by which policy), delivered,
// or forwarded to an external address. done is false until a node reported one of them and every
// node that reported anything has reported where the packet left it (forwarded, or one of those):
// the hops of the nodes before the last one may arrive after the last one's. The source node's hop
// must have observations: its acknowledgement (an empty hop) is written before it injects.
//
// Verdict counts every hop it is given: give it the hops of the trace's path only (PathVerdict).
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
