package service

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/winnet-io/winnet/controllers/nodenetwork"
	"github.com/winnet-io/winnet/internal/hostnet"
	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/internal/pipeline"
)

// sharedObject is the cookie object of the flows every Service shares: the Services' base flows
// and the hairpin flows of local endpoint addresses. Each Service's own flows carry an object of
// their own (Reconciler.objects), so that one Service is synced without looking at the others.
const sharedObject = 0

// counts are what Services come to: Services served, their ports and their endpoints.
type counts struct{ services, ports, endpoints int }

func (c *counts) add(o counts, sign int) {
	c.services += sign * o.services
	c.ports += sign * o.ports
	c.endpoints += sign * o.endpoints
}

// realisedService is what one Service came to, and from what: the flows and groups installed for
// it (or being installed). A pass whose inputs are the same reuses it instead of computing it
// again, so that one endpoint changing among 10,000 Services costs that Service's computation, and
// a per-Service pass compares the Service's new groups and flows with these.
type realisedService struct {
	// inputs are the Service and EndpointSlice versions it was computed from.
	inputs inputs
	d      desiredService
	// object is the cookie object of the Service's flows.
	object uint64
	groups []openflow.Group
	// groupKeys are the Service ports' groups, in the order of groups.
	groupKeys []groupKey
	// flows are the Service's flows as computed, until the switch has them: then they are
	// dropped (installed), and a full pass takes them from the bridge, which keeps them anyway
	// (openflow.Bridge.InstalledObject): 10,000 Services' flows were held twice (bench-scale,
	// issue 64). hasFlows tells whether the Service has any.
	flows     []openflow.Flow
	hasFlows  bool
	clusterIP netip.Addr
	// nodePorts are the Service's NodePorts the host NATs its own connections to (syncNodePortNAT).
	nodePorts []hostnet.NodePort
	// hairpin are the Service's local endpoint addresses, each once: they need the shared hairpin
	// flows.
	hairpin []netip.Addr
	counts  counts
	// udp holds the zone and endpoints of each UDP port with a zone of its own (udpzones.go).
	udp map[portKey]udpPort
}

// version identifies one version of an object.
type version struct {
	uid             types.UID
	resourceVersion string
}

// inputs are the versions of a Service (first) and of its EndpointSlices.
type inputs []version

// serviceInputs returns the versions of a Service and of its EndpointSlices.
func serviceInputs(svc *corev1.Service, eps []discoveryv1.EndpointSlice) inputs {
	in := make(inputs, 0, 1+len(eps))
	in = append(in, version{svc.UID, svc.ResourceVersion})
	for i := range eps {
		in = append(in, version{eps[i].UID, eps[i].ResourceVersion})
	}
	return in
}

// same tells whether in are the versions of this Service and these EndpointSlices (in any
// order: the cache lists slices in no particular order). It allocates nothing: the full pass asks
// it of every Service.
func (in inputs) same(svc *corev1.Service, eps []discoveryv1.EndpointSlice) bool {
	if len(in) != 1+len(eps) || in[0] != (version{svc.UID, svc.ResourceVersion}) {
		return false
	}
	for i := range eps {
		if !slices.Contains(in[1:], version{eps[i].UID, eps[i].ResourceVersion}) {
			return false
		}
	}
	return true
}

// String renders the versions, slices sorted.
func (in inputs) String() string {
	if len(in) == 0 {
		return ""
	}
	out := make([]string, 0, len(in))
	for _, v := range in {
		out = append(out, string(v.uid)+"/"+v.resourceVersion)
	}
	slices.Sort(out[1:])
	return strings.Join(out, ",")
}

// realiseService computes the groups and flows of one Service on the node network rz, whose
// NodePorts are served on ips; a nil svc (deleted) comes to nothing. A Service with ports gets
// its cookie object and group ids here, the first time.
func (r *Reconciler) realiseService(ctx context.Context, name types.NamespacedName, svc *corev1.Service, eps []discoveryv1.EndpointSlice, rz nodenetwork.Realized, ips []netip.Addr) *realisedService {
	rs := &realisedService{}
	if svc == nil {
		return rs
	}
	rs.inputs = serviceInputs(svc, eps)
	rs.d = desiredPorts(svc, eps, r.NodeName)
	if len(rs.d.unsupported) > 0 {
		r.warnUnsupported(ctx, svc, rs.d.unsupported)
	}
	if rs.d.ipv6Only {
		r.reportIPv6Only(ctx, svc)
	}
	if len(rs.d.ports) == 0 {
		return rs
	}
	if noZone := r.realisePorts(name, rs, rz, ips); len(noZone) > 0 {
		r.warnNoUDPZone(ctx, svc, noZone)
	}
	return rs
}

// realisePorts computes the groups and flows of rs.d's ports, under the cookie object of name, and
// returns the UDP ports that got no zone of their own.
func (r *Reconciler) realisePorts(name types.NamespacedName, rs *realisedService, rz nodenetwork.Realized, ips []netip.Addr) (noZone []string) {
	rs.object = uint64(r.objects.get(name))
	rs.clusterIP = rs.d.ports[0].clusterIP
	rs.counts.services = 1
	hairpin := map[netip.Addr]bool{}
	for _, p := range rs.d.ports {
		rs.counts.ports++
		rs.counts.endpoints += len(p.endpoints)
		cluster := groupKey{port: p.key}
		sp := pipeline.ServicePort{
			ClusterIP: p.clusterIP, Protocol: p.protocol, Port: uint16(p.key.Port), NodePort: p.nodePort,
			ExternalIPs: p.externalIPs, LoadBalancerIPs: p.loadBalancerIPs, SourceRanges: p.sourceRanges,
			InternalLocal: p.internalLocal, ExternalLocal: p.externalLocal, AffinityTimeout: p.affinityTimeout,
			ClusterGroup: r.groups.get(cluster),
		}
		rs.groupKeys = append(rs.groupKeys, cluster)
		if p.nodePort != 0 {
			sp.NodeIPs = ips
			if p.nodeIPs != nil {
				sp.NodeIPs = p.nodeIPs
			}
			if r.NodePorts != nil {
				if !p.noHost {
					host := groupKey{port: p.key, host: true}
					sp.HostGroup = r.groups.get(host)
					rs.groupKeys = append(rs.groupKeys, host)
				}
				np := hostnet.NodePort{Protocol: string(p.key.Protocol), Port: p.nodePort}
				if !slices.Contains(rs.nodePorts, np) {
					rs.nodePorts = append(rs.nodePorts, np)
				}
			}
		}
		if p.nodePort != 0 || len(p.externalIPs) > 0 || len(p.loadBalancerIPs) > 0 {
			external := groupKey{port: p.key, external: true}
			sp.ExternalGroup = r.groups.get(external)
			rs.groupKeys = append(rs.groupKeys, external)
		}
		for _, ep := range p.endpoints {
			sp.Endpoints = append(sp.Endpoints, pipeline.Endpoint{Addr: ep.addr, Local: ep.local})
			if ep.local {
				hairpin[ep.addr.Addr()] = true
			}
		}
		if p.protocol == openflow.ProtoUDP {
			sp.UDPZone = r.udp.zone(p.key)
			if sp.UDPZone == 0 {
				noZone = append(noZone, fmt.Sprintf("%d/%s", p.key.Port, p.key.Protocol))
			} else {
				if rs.udp == nil {
					rs.udp = map[portKey]udpPort{}
				}
				u := udpPort{zone: sp.UDPZone}
				for _, ep := range p.endpoints {
					u.endpoints = append(u.endpoints, ep.addr)
				}
				rs.udp[p.key] = u
			}
		}
		g, f := rz.Node.ServiceFlows(sp)
		rs.groups = append(rs.groups, g...)
		rs.flows = append(rs.flows, f...)
	}
	for i := range rs.flows {
		rs.flows[i].Cookie = rs.object
	}
	rs.hasFlows = len(rs.flows) > 0
	rs.hairpin = slices.SortedFunc(maps.Keys(hairpin), netip.Addr.Compare)
	return noZone
}

// installed drops the flows of a realised Service once the switch has them (see flows).
func (rs *realisedService) installed() { rs.flows = nil }

// flowsFor returns the realised Service's flows for a whole-category Sync: as computed until the
// switch has them, then as the bridge installed them.
func (rs *realisedService) flowsFor(b *openflow.Bridge) []openflow.Flow {
	if rs.flows != nil || !rs.hasFlows {
		return rs.flows
	}
	return b.InstalledObject(pipeline.CategoryService, rs.object)
}

// goneGroups are the groups old had that rs has not.
func goneGroups(old, rs *realisedService) (keys []groupKey) {
	for _, k := range old.groupKeys {
		if !slices.Contains(rs.groupKeys, k) {
			keys = append(keys, k)
		}
	}
	return keys
}

// hairpinCount counts, per local endpoint address, the Services that have it: an address needs
// the shared hairpin flows while a Service has it.
type hairpinCount map[netip.Addr]int

// move takes from's addresses out and puts to's in, and tells whether the set of addresses
// changed.
func (h hairpinCount) move(from, to *realisedService) (changed bool) {
	for _, a := range from.hairpin {
		if h[a]--; h[a] == 0 {
			delete(h, a)
			changed = true
		}
	}
	for _, a := range to.hairpin {
		if h[a]++; h[a] == 1 {
			changed = true
		}
	}
	return changed
}

// sharedFlows are the flows of sharedObject: the Services' base flows, and the hairpin flows of
// every local endpoint address.
func sharedFlows(rz nodenetwork.Realized, hairpin hairpinCount) []openflow.Flow {
	flows := rz.Node.ServiceBaseFlows()
	for _, ip := range slices.SortedFunc(maps.Keys(hairpin), netip.Addr.Compare) {
		flows = append(flows, rz.Node.HairpinFlows(ip)...)
	}
	return flows
}

// groupKey identifies the group of a Service port: the cluster one, the external one, or the one
// of the host's own connections to its NodePort.
type groupKey struct {
	port     portKey
	external bool
	host     bool
}

// ids gives out small numbers to keys: group ids to Service ports, cookie objects to Services.
// A released number is given out again, lowest first, so that numbers stay few and low however
// many Services come and go. Numbers start at 1.
type ids[K comparable] struct {
	byKey map[K]uint32
	next  uint32
	free  []uint32 // sorted
	// dirty is set when a number is given out or taken back (the Reconciler's IDsFile is behind).
	dirty bool
}

// seed gives the keys of m their numbers, as a previous agent gave them (loadIDs); the numbers below
// the highest that no key has are free. Call before any number is given out.
func (a *ids[K]) seed(m map[K]uint32) {
	a.byKey, a.next, a.free = make(map[K]uint32, len(m)), 0, nil
	used := make(map[uint32]bool, len(m))
	for k, id := range m {
		a.byKey[k] = id
		used[id] = true
		a.next = max(a.next, id)
	}
	for id := uint32(1); id < a.next; id++ {
		if !used[id] {
			a.free = append(a.free, id)
		}
	}
}

// get returns the key's number, giving one out the first time.
func (a *ids[K]) get(k K) uint32 {
	if id, ok := a.byKey[k]; ok {
		return id
	}
	if a.byKey == nil {
		a.byKey = map[K]uint32{}
	}
	var id uint32
	if len(a.free) > 0 {
		id, a.free = a.free[0], a.free[1:]
	} else {
		a.next++
		id = a.next
	}
	a.byKey[k] = id
	a.dirty = true
	return id
}

// lookup returns the key's number, if it has one.
func (a *ids[K]) lookup(k K) (uint32, bool) {
	id, ok := a.byKey[k]
	return id, ok
}

// release takes the key's number back. Release a group id only once the switch has no group of
// that id and no flow refers to it, so that a reused id never meets a stale flow.
func (a *ids[K]) release(k K) {
	id, ok := a.byKey[k]
	if !ok {
		return
	}
	delete(a.byKey, k)
	a.dirty = true
	at, _ := slices.BinarySearch(a.free, id)
	a.free = slices.Insert(a.free, at, id)
}

// releaseUnused takes back the numbers of every key that inUse rejects.
func (a *ids[K]) releaseUnused(inUse func(K) bool) {
	n := len(a.free)
	for k, id := range a.byKey {
		if !inUse(k) {
			delete(a.byKey, k)
			a.free = append(a.free, id)
			a.dirty = true
		}
	}
	if len(a.free) > n {
		slices.Sort(a.free)
	}
}
