package packettrace

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/internal/pipeline"
)

// ServiceEndpoints tells the agent over which endpoints its node balances a Pod's new connection
// to a Service address (the services reconciler's realised Service ports:
// service.Reconciler.TraceEndpoints). ok is false when no realised Service port serves dst; the
// endpoints may be none (a port without endpoint for this node).
type ServiceEndpoints interface {
	TraceEndpoints(proto uint8, dst netip.AddrPort) (endpoints []pipeline.Endpoint, ok bool)
}

// serviceWait is how long the source node waits, before it injects a trace to a Service, for the
// services reconciler to realise the Service's port (the trace's own DNAT needs its endpoints);
// after it, the trace ends without its packet (Source Dropped, "not injected"): it never takes the
// port's group, which commits.
const serviceWait = 5 * time.Second

// installedAt is when the node first installed the trace's flows.
func (r *AgentReconciler) installedAt(uid types.UID) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.installed[uid]
}

// tracePath is the trace's path (status.nodes) but this node, as this node reaches each node: its
// tunnel endpoint and Pod CIDRs, from the RemoteSubnetRoutes that name it (spec.nodeName). A node
// of the path without a route is left out: the node has no way there anyway.
func tracePath(tr *networkv1alpha1.PacketTrace, self string, routes []networkv1alpha1.RemoteSubnetRoute) []pipeline.TracePeer {
	var out []pipeline.TracePeer
	for _, name := range tr.Status.Nodes {
		if name == self {
			continue
		}
		for i := range routes {
			rt := &routes[i]
			if rt.Spec.NodeName != name {
				continue
			}
			ip, err := netip.ParseAddr(string(rt.Spec.NodeIP))
			if err != nil || !ip.Is4() {
				continue
			}
			peer := pipeline.TracePeer{NodeIP: ip}
			for _, c := range rt.Spec.PodCIDRs {
				if p, err := netip.ParsePrefix(string(c)); err == nil && p.Addr().Is4() {
					peer.CIDRs = append(peer.CIDRs, p.Masked())
				}
			}
			out = append(out, peer)
		}
	}
	return out
}

// traceService is how the source node DNATs the trace's packet when its destination is a Service
// port the node balances (nil otherwise): to one of the port's endpoints, picked as its group
// would pick one (the group's choice is a hash of the packet; this one is the trace's source port
// modulo the endpoints, sorted, so that it stays the same from one pass to the next), or nowhere
// when the port has no endpoint for this node.
func traceService(services ServiceEndpoints, t pipeline.Trace, dst netip.Addr, dstPort int32) *pipeline.TraceService {
	if services == nil || (t.Protocol != openflow.ProtoTCP && t.Protocol != openflow.ProtoUDP) || !dst.Is4() || dstPort <= 0 || dstPort > 65535 {
		return nil
	}
	to := netip.AddrPortFrom(dst, uint16(dstPort))
	eps, ok := services.TraceEndpoints(t.Protocol, to)
	if !ok {
		return nil
	}
	s := &pipeline.TraceService{Dst: to}
	if len(eps) > 0 {
		eps = slices.SortedFunc(slices.Values(eps), func(a, b pipeline.Endpoint) int { return cmp.Compare(a.Addr.String(), b.Addr.String()) })
		s.Endpoint = eps[int(t.SrcPort)%len(eps)].Addr
	}
	return s
}

// containmentObservation says what the trace points that keep the traced packet inside what winnet
// controls saw: a packet consumed before it left through the tunnel or the uplink towards a node
// off the trace's path, or at a Service port without endpoint. ok is false for the other points
// (observation's).
func containmentObservation(point pipeline.TracePoint, p openflow.PacketIn) (o networkv1alpha1.PacketTraceObservation, ok bool, err error) {
	const offPath = "not a node on the trace's path (no winnet agent there): consumed here"
	switch point {
	case pipeline.TraceTunnelLeaves:
		return networkv1alpha1.PacketTraceObservation{Component: networkv1alpha1.PacketTraceComponentForwarding, Action: networkv1alpha1.PacketTraceActionForwardedExternally,
			Detail: fmt.Sprintf("tunnel to %s: %s", p.TunDst, offPath)}, true, nil
	case pipeline.TraceUplinkLeaves, pipeline.TraceServiceNoEndpoint:
		h, err := parseFrame(p.Frame)
		if err != nil {
			return o, true, fmt.Errorf("report of trace point %d: %w", point, err)
		}
		if point == pipeline.TraceUplinkLeaves {
			return networkv1alpha1.PacketTraceObservation{Component: networkv1alpha1.PacketTraceComponentForwarding, Action: networkv1alpha1.PacketTraceActionForwardedExternally,
				Detail: fmt.Sprintf("routed out of the uplink towards %s: %s", h.Dst, offPath)}, true, nil
		}
		return networkv1alpha1.PacketTraceObservation{Component: networkv1alpha1.PacketTraceComponentService, Action: networkv1alpha1.PacketTraceActionDropped,
			Detail: fmt.Sprintf("the Service port %s has no endpoint for this node: a connection would be refused (or dropped, under internalTrafficPolicy Local); consumed here",
				endpointText(h))}, true, nil
	}
	return o, false, nil
}

// needsFlows tells whether a running trace needs its flows on the node: not once the end of its
// packet is reported on the hops of its path (PathVerdict), even before the controller ends the trace (the tag of
// a trace without flows still names it, so late packet-ins are recorded).
func needsFlows(tr *networkv1alpha1.PacketTrace) bool {
	_, _, ended := PathVerdict(&tr.Status)
	return !ended
}

// reportKey identifies one report of a trace on this node: its point and argument.
func reportKey(point pipeline.TracePoint, arg uint32) uint32 {
	return uint32(point)<<24 | arg&0xffffff
}
