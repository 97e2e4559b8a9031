package service

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/winnet-io/winnet/internal/pipeline"
)

// UDP Service ports and endpoint changes. A UDP client (a DNS resolver) keeps its socket, so its
// packets stay one conntrack connection, DNATed to the endpoint its first packet was balanced to:
// when that endpoint goes, the connection has to go too, or the client keeps sending to nowhere
// (every packet refreshes the connection's timeout). kube-proxy deletes such connections one by one;
// on Windows that breaks every other NATed connection of the zone (a flush of one connection also
// wipes the zone's NAT table, see pipeline.ConntrackFlush). So every UDP Service port DNATs in a
// conntrack zone of its own (pipeline.ServicePort.UDPZone, from the budget
// pipeline.ServiceUDPZoneFirst..ServiceUDPZoneLast), and the agent flushes that zone whole:
//   - when it gives the zone to a port, before the flows that use it are installed: the zone may
//     hold connections of a port that had it before (the agent carries its zones over a restart in
//     the Reconciler's IDsFile, idsfile.go, so that a restart flushes nothing; a zone it could not
//     take back is given out again and flushed);
//   - when one of the port's endpoints goes (also while no agent ran: carriedGone), after the pass's
//     groups and flows are in the switch,
//     so that the connections that start again never meet a bucket of the endpoint that went: the
//     port's other clients start again too, and are balanced over the endpoints there are (the
//     price of a clean flush).
//
// A zone goes back to the budget once its port's flows are gone from the switch. Never a flush of
// one connection, never zone 0 (every zone on Windows), ConntrackZone (Pod SNAT, TCP Services) or
// ServiceSNATZone. Beyond the budget a UDP port DNATs in ConntrackZone like a TCP port, and its
// Service gets a Warning Event (UDPZonesExhaustedReason).

// UDPZonesExhaustedReason is the reason of the Warning Event on a Service with a UDP port that got
// no conntrack zone of its own because every zone of the budget is taken: its clients are not
// balanced again when an endpoint goes, until their connections time out.
const UDPZonesExhaustedReason = "UDPZonesExhausted"

// udpZoneBudget is how many UDP Service ports can have a zone of their own.
const udpZoneBudget = int(pipeline.ServiceUDPZoneLast-pipeline.ServiceUDPZoneFirst) + 1

// udpZones gives out the conntrack zones of UDP Service ports and keeps the flushes still to do.
type udpZones struct {
	// ids numbers the ports from 1: a port's zone is ServiceUDPZoneFirst + id - 1.
	ids ids[portKey]
	// unflushed holds the zones given out and not flushed yet: they are flushed before any flow
	// uses them. stale holds the zones to flush because an endpoint of their port went.
	unflushed, stale map[uint16]bool
	// carried holds the endpoints of the ports whose zones the previous agent gave out (loadIDs),
	// until the first pass compares them with the ports' endpoints now (carriedGone).
	carried map[portKey][]netip.AddrPort
}

// carriedGone marks stale the carried zones of ports one of whose endpoints went while no agent ran,
// once the first pass computed the ports (endpoints(k) returns a port's endpoints now, false when the port
// has no zone any more); then it forgets what it carried.
func (z *udpZones) carriedGone(endpoints func(portKey) ([]netip.AddrPort, bool)) {
	for k, old := range z.carried {
		now, ok := endpoints(k)
		if !ok {
			continue
		}
		for _, ep := range old {
			if !slices.Contains(now, ep) {
				if z.stale == nil {
					z.stale = map[uint16]bool{}
				}
				if id, ok := z.ids.lookup(k); ok {
					z.stale[zoneOf(id)] = true
				}
				break
			}
		}
	}
	z.carried = nil
}

// udpPort is a UDP Service port's zone and the endpoints its flows balance over.
type udpPort struct {
	zone      uint16
	endpoints []netip.AddrPort
}

// zone returns the port's zone, giving it one the first time, or 0 when the budget is spent.
func (z *udpZones) zone(k portKey) uint16 {
	if id, ok := z.ids.lookup(k); ok {
		return zoneOf(id)
	}
	id := z.ids.get(k)
	if int(id) > udpZoneBudget {
		z.ids.release(k)
		return 0
	}
	if z.unflushed == nil {
		z.unflushed = map[uint16]bool{}
	}
	z.unflushed[zoneOf(id)] = true
	return zoneOf(id)
}

func zoneOf(id uint32) uint16 { return pipeline.ServiceUDPZoneFirst + uint16(id-1) }

// endpointsGone marks stale the zones of old's ports whose endpoints are not all among updated's
// (an endpoint added flushes nothing; a port that went gives its zone back, see release).
func (z *udpZones) endpointsGone(old, updated map[portKey]udpPort) {
	for k, o := range old {
		n, ok := updated[k]
		if !ok || n.zone != o.zone {
			continue
		}
		for _, ep := range o.endpoints {
			if !slices.Contains(n.endpoints, ep) {
				if z.stale == nil {
					z.stale = map[uint16]bool{}
				}
				z.stale[o.zone] = true
				break
			}
		}
	}
}

// release gives back the zones of the ports inUse rejects: call it once their flows are gone
// from the switch. A zone given out again is flushed before it is used.
func (z *udpZones) release(inUse func(portKey) bool) {
	z.ids.releaseUnused(inUse)
}

// flushUnflushed flushes the zones given out and not flushed yet; flushStale the zones of ports
// one of whose endpoints went. Each flushes whole zones, in increasing order, and stops at the
// first failure (the rest stay to do for the next pass); it returns the zones it flushed.
func (z *udpZones) flushUnflushed(ctx context.Context, flush func(context.Context, uint16) error) ([]uint16, error) {
	return flushZones(ctx, z.unflushed, flush)
}

func (z *udpZones) flushStale(ctx context.Context, flush func(context.Context, uint16) error) ([]uint16, error) {
	return flushZones(ctx, z.stale, flush)
}

func flushZones(ctx context.Context, zones map[uint16]bool, flush func(context.Context, uint16) error) ([]uint16, error) {
	var done []uint16
	for _, id := range slices.Sorted(maps.Keys(zones)) {
		if err := flush(ctx, id); err != nil {
			return done, fmt.Errorf("flushing conntrack zone %d of a UDP Service port: %w", id, err)
		}
		delete(zones, id)
		done = append(done, id)
	}
	return done, nil
}
