package service

import (
	"net/netip"
	"slices"

	"github.com/winnet-io/winnet/internal/pipeline"
)

// TraceEndpoints returns the endpoints over which the node balances a new connection from one of
// its Pods to dst (proto openflow.ProtoTCP or ProtoUDP), as it realised the Service port that dst
// names: its ClusterIP, an external IP, a load balancer IP without source ranges, or its NodePort
// on one of the node's addresses. They are what the port's cluster group's buckets hold (only the
// local ones under internalTrafficPolicy Local), so possibly none. ok is false when no realised
// Service port serves dst.
//
// Packet traces DNAT their packet to one of them with a flow of their own rather than through the
// group, whose buckets commit the connection and learn session affinity (packettrace's
// ServiceEndpoints). It waits for a pass under way (mu).
func (r *Reconciler) TraceEndpoints(proto uint8, dst netip.AddrPort) (endpoints []pipeline.Endpoint, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range r.realised {
		for _, p := range rs.d.ports {
			if p.protocol != proto || !servesFromPod(p, r.realisedIPs, dst) {
				continue
			}
			for _, ep := range p.endpoints {
				if ep.addr.Addr().Is4() && (ep.local || !p.internalLocal) {
					endpoints = append(endpoints, pipeline.Endpoint{Addr: ep.addr, Local: ep.local})
				}
			}
			return endpoints, true
		}
	}
	return nil, false
}

// servesFromPod tells whether the port balances a Pod's connection to dst over its cluster group
// (pipeline.ServicePort's targets that are not from the uplink, without source ranges).
func servesFromPod(p desiredPort, nodeIPs []netip.Addr, dst netip.AddrPort) bool {
	if dst.Port() == uint16(p.key.Port) {
		if p.clusterIP == dst.Addr() || slices.Contains(p.externalIPs, dst.Addr()) ||
			len(p.sourceRanges) == 0 && slices.Contains(p.loadBalancerIPs, dst.Addr()) {
			return true
		}
	}
	return p.nodePort != 0 && dst.Port() == p.nodePort && slices.Contains(nodeIPs, dst.Addr())
}
