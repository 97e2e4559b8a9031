package pipeline

import (
	"cmp"
	"encoding/binary"
	"hash/maphash"
	"net/netip"
	"slices"

	"github.com/winnet-io/winnet/internal/ovs/openflow"
)

// PolicyDirection is the direction of a NetworkPolicy rule.
type PolicyDirection int

// Policy directions.
const (
	PolicyIngress PolicyDirection = iota
	PolicyEgress
)

// PolicyPort is one port of a rule: Protocol (openflow.ProtoTCP or ProtoUDP) and the destination
// ports Port..EndPort. Port 0 is every port of Protocol; EndPort 0 is Port alone.
type PolicyPort struct {
	Protocol      uint8
	Port, EndPort uint16
}

// PolicyRule is one allow rule of a NetworkPolicy as the pipeline realises it: a conjunction of
// three clauses, so that it costs the sum of its dimensions in flows, not their product.
type PolicyRule struct {
	// ID is the rule's conjunction id, unique among the node's rules of both directions and not 0.
	ID        uint32
	Direction PolicyDirection
	// Pods are the local Pods the rule applies to: the sources of an egress rule, the targets of
	// an ingress rule.
	Pods []Pod
	// AnyPeer allows every peer; otherwise Peers are the addresses allowed on the other side
	// (destinations of egress, sources of ingress).
	AnyPeer bool
	Peers   []netip.Prefix
	// Ports are the destination ports allowed; none allows every port of every protocol.
	Ports []PolicyPort
}

// Policy is everything NetworkPolicy asks of the node: the allow rules and the Pods isolated in
// each direction (a Pod is isolated in a direction when a policy of that direction selects it).
type Policy struct {
	Rules                           []PolicyRule
	IngressIsolated, EgressIsolated []Pod
}

// PolicyFlows are the flows of the node's NetworkPolicy (CategoryPolicy), with the exemptions the
// Kubernetes specification makes: traffic between a Pod and its own node, and from a Pod to
// itself, is never blocked. The node is recognised by the port its traffic enters on (the gateway
// or the bridge's LOCAL port) as well as by its address, so that nothing that reaches the node
// from elsewhere (a NodePort client from the uplink, a node masquerading for another node through
// the tunnel) passes as the node (Antrea issue 280).
//
// A rule's clauses are: for egress the source Pods' ports (in_port), the destinations (nw_dst) and
// the ports; for ingress the sources (nw_src), the target Pods' ports (TargetOFPortField) and the
// ports. An absent dimension (any peer, any port) is one flow matching all IP. Flows with the same
// match are shared between rules, one conjunction() action each, so that a change of one rule's
// dimension changes only that dimension's flows.
func (n Node) PolicyFlows(p Policy) []openflow.Flow {
	fromLocalPod := regMatch(PktSourceField, FromLocalPod)
	out := []openflow.Flow{
		flow(EgressRuleTable, priorityHigh, match(openflow.IPv4(), fromLocalPod, hostPrefix(n.GatewayIP, openflow.NwDst)), openflow.GotoTable(EgressMetricTable)),
		flow(EgressRuleTable, priorityHigh, match(openflow.IPv4(), fromLocalPod, hostPrefix(n.NodeIP, openflow.NwDst)), openflow.GotoTable(EgressMetricTable)),
		flow(IngressRuleTable, priorityHigh, match(openflow.IPv4(), regMatch(PktSourceField, FromGateway), hostPrefix(n.GatewayIP, openflow.NwSrc)),
			openflow.GotoTable(IngressMetricTable)),
		flow(IngressRuleTable, priorityHigh, match(openflow.IPv4(), regMatch(PktSourceField, FromLocal), hostPrefix(n.NodeIP, openflow.NwSrc)),
			openflow.GotoTable(IngressMetricTable)),
	}
	for _, pod := range p.EgressIsolated {
		out = append(out,
			flow(EgressRuleTable, priorityHigh, match(openflow.IPv4(), openflow.InPort(pod.OFPort), hostPrefix(pod.IP, openflow.NwDst)), openflow.GotoTable(EgressMetricTable)),
			flow(EgressDefaultTable, priorityNormal, match(openflow.IPv4(), openflow.InPort(pod.OFPort)), openflow.Drop()))
	}
	for _, pod := range p.IngressIsolated {
		target := regMatch(TargetOFPortField, pod.OFPort)
		out = append(out,
			flow(IngressRuleTable, priorityHigh, match(openflow.IPv4(), target, hostPrefix(pod.IP, openflow.NwSrc)), openflow.GotoTable(IngressMetricTable)),
			flow(IngressDefaultTable, priorityNormal, match(openflow.IPv4(), target), openflow.Drop()))
	}
	return append(dedup(out), conjunctionFlows(p.Rules)...)
}

// conjunctionFlows are the rules' clause flows, shared between rules where their match is equal,
// and one conj_id flow per rule. A rule with an empty dimension (no Pods, no peers) matches
// nothing and has no flows.
//
// A dimension that matches every IP packet (any peer, a 0.0.0.0/0 peer, any port) is no clause at
// all, as in Antrea's calculateClauses: its flow would be the same flow as the other such dimension
// of the rule, and OVS never completes a conjunction from two clauses of one flow (cyclonus's
// "allow all" cases found that: the rule allowed nothing). The remaining clauses are numbered in
// order; a rule left with only its Pods allows them everything, with one flow per Pod
// (priorityAllowAll) instead of a conjunction, which needs two clauses.
func conjunctionFlows(rules []PolicyRule) []openflow.Flow {
	rules = mergeRules(rules)
	type clause struct {
		flow    openflow.Flow
		actions []openflow.Action
		order   []uint64
	}
	// A clause flow is known by its table and what it matches (a Pod, a peer prefix, a port
	// block), which is cheaper to compare than its text: a node's policy can have a million adds.
	type clauseKey struct {
		table, kind uint8
		value       uint64
	}
	const podClause, peerClause, portClause = 1, 2, 3
	clauses := map[clauseKey]*clause{}
	var keys []clauseKey
	add := func(table uint8, kind uint8, value uint64, m func() []openflow.MatchField, id uint32, k, n uint8) {
		key := clauseKey{table: table, kind: kind, value: value}
		c, ok := clauses[key]
		if !ok {
			c = &clause{flow: flow(table, priorityNormal, m())}
			clauses[key] = c
			keys = append(keys, key)
		}
		c.actions = append(c.actions, openflow.Conjunction(id, k, n))
		c.order = append(c.order, uint64(id)<<8|uint64(k))
	}
	var out []openflow.Flow
	allowed := map[string]bool{}
	for _, r := range rules {
		if len(r.Pods) == 0 || (!r.AnyPeer && len(r.Peers) == 0) {
			continue
		}
		table, metric := IngressRuleTable, IngressMetricTable
		peerField := openflow.NwSrc
		if r.Direction == PolicyEgress {
			table, metric = EgressRuleTable, EgressMetricTable
			peerField = openflow.NwDst
		}
		podMatch := func(pod Pod) []openflow.MatchField {
			if r.Direction == PolicyEgress {
				return match(openflow.IPv4(), openflow.InPort(pod.OFPort))
			}
			return match(openflow.IPv4(), regMatch(TargetOFPortField, pod.OFPort))
		}
		anyPeer := r.AnyPeer || slices.ContainsFunc(r.Peers, func(p netip.Prefix) bool { return p.Bits() == 0 })
		anyPort := len(r.Ports) == 0
		if anyPeer && anyPort {
			for _, pod := range r.Pods {
				f := flow(table, priorityAllowAll, podMatch(pod), openflow.GotoTable(metric))
				if k := f.String(); !allowed[k] {
					allowed[k] = true
					out = append(out, f)
				}
			}
			continue
		}
		// Clause numbers: egress Pods, peers, ports; ingress peers, Pods, ports; absent ones skipped.
		n := uint8(3)
		if anyPeer || anyPort {
			n = 2
		}
		pods, peers, ports := uint8(1), uint8(2), n
		if r.Direction == PolicyIngress {
			pods, peers = 2, 1
			if anyPeer {
				pods = 1
			}
		}
		for _, pod := range r.Pods {
			add(table, podClause, uint64(pod.OFPort), func() []openflow.MatchField { return podMatch(pod) }, r.ID, pods, n)
		}
		if !anyPeer {
			for _, peer := range r.Peers {
				peer = peer.Masked()
				a := peer.Addr().As4()
				value := uint64(a[0])<<32 | uint64(a[1])<<24 | uint64(a[2])<<16 | uint64(a[3])<<8 | uint64(peer.Bits())
				add(table, peerClause, value, func() []openflow.MatchField { return match(openflow.IPv4(), peerField(peer)) }, r.ID, peers, n)
			}
		}
		for _, pp := range r.Ports {
			base := func() []openflow.MatchField { return match(openflow.IPv4(), openflow.IPProto(pp.Protocol)) }
			if pp.Port == 0 {
				add(table, portClause, uint64(pp.Protocol)<<40, base, r.ID, ports, n)
				continue
			}
			// One value/mask match per aligned block of the range (80-85 is 0x50/0xfffc and
			// 0x54/0xfffe), as Antrea's portsToBitRanges does.
			for _, b := range PortRange(pp.Port, pp.EndPort) {
				value := uint64(pp.Protocol)<<40 | 1<<32 | uint64(b.Value)<<16 | uint64(b.Mask)
				add(table, portClause, value, func() []openflow.MatchField {
					return append(base(), openflow.TpDstMasked(pp.Protocol, b.Value, b.Mask))
				}, r.ID, ports, n)
			}
		}
		out = append(out, flow(table, priorityLow, match(openflow.ConjID(r.ID), openflow.IPv4()), openflow.GotoTable(metric)))
	}
	for _, key := range keys {
		c := clauses[key]
		idx := make([]int, len(c.actions))
		for i := range idx {
			idx[i] = i
		}
		slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(c.order[a], c.order[b]) })
		f := c.flow
		for i, j := range idx {
			if i > 0 && c.order[j] == c.order[idx[i-1]] {
				continue // the same Pod or peer listed twice in one rule
			}
			f.Actions = append(f.Actions, c.actions[j])
		}
		out = append(out, f)
	}
	return out
}

// mergeRules merges the rules that allow the same peers on the same ports in the same direction
// into one, over the union of their Pods, with the lowest of their ids (rules allow, so a packet
// one of them allows is allowed by the merged rule and no other). A thousand policies that admit the
// same peers to different selections of Pods then cost one conjunction whose peer flows carry one
// conjunction action each, not a thousand. Rules are grouped by a hash of what they allow and
// compared in full within a group.
func mergeRules(rules []PolicyRule) []PolicyRule {
	seed := maphash.MakeSeed()
	// Rules of many policies with the same peers share one slice (the compiler resolves each list
	// of peers once): hash it once.
	type slice struct {
		first *netip.Prefix
		n     int
	}
	peerHashes := map[slice]uint64{}
	byHash := map[uint64][]int{}
	var out []PolicyRule
	var pods []map[uint32]bool
	for _, r := range rules {
		var ph uint64
		if len(r.Peers) > 0 {
			k := slice{&r.Peers[0], len(r.Peers)}
			var ok bool
			if ph, ok = peerHashes[k]; !ok {
				ph = peersHash(seed, r.Peers)
				peerHashes[k] = ph
			}
		}
		h := ruleHash(seed, r, ph)
		merged := false
		for _, i := range byHash[h] {
			o := &out[i]
			if o.Direction != r.Direction || o.AnyPeer != r.AnyPeer || !samePeers(o.Peers, r.Peers) || !slices.Equal(o.Ports, r.Ports) {
				continue
			}
			if r.ID < o.ID {
				o.ID = r.ID
			}
			for _, p := range r.Pods {
				if !pods[i][p.OFPort] {
					pods[i][p.OFPort] = true
					o.Pods = append(o.Pods, p)
				}
			}
			merged = true
			break
		}
		if merged {
			continue
		}
		seen := map[uint32]bool{}
		var own []Pod
		for _, p := range r.Pods {
			if !seen[p.OFPort] {
				seen[p.OFPort] = true
				own = append(own, p)
			}
		}
		r.Pods = own
		byHash[h] = append(byHash[h], len(out))
		out = append(out, r)
		pods = append(pods, seen)
	}
	return out
}

// ruleHash hashes what a rule allows (direction, peers by their hash ph, ports), not to whom (its
// Pods).
func ruleHash(seed maphash.Seed, r PolicyRule, ph uint64) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	var b [8]byte
	b[0], b[1] = byte(r.Direction), 0
	if r.AnyPeer {
		b[1] = 1
	}
	_, _ = h.Write(b[:2])
	binary.LittleEndian.PutUint64(b[:], ph)
	_, _ = h.Write(b[:])
	for _, p := range r.Ports {
		b[0], b[1], b[2], b[3], b[4] = p.Protocol, byte(p.Port>>8), byte(p.Port), byte(p.EndPort>>8), byte(p.EndPort)
		_, _ = h.Write(b[:5])
	}
	return h.Sum64()
}

// samePeers compares two lists of peers, at once when they are the same slice.
func samePeers(a, b []netip.Prefix) bool {
	if len(a) != len(b) {
		return false
	}
	if len(a) == 0 || &a[0] == &b[0] {
		return true
	}
	return slices.Equal(a, b)
}

func peersHash(seed maphash.Seed, peers []netip.Prefix) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	for _, p := range peers {
		a := p.Addr().As16()
		_, _ = h.Write(a[:])
		_ = h.WriteByte(byte(p.Bits()))
	}
	return h.Sum64()
}

// PortBlock is an aligned block of ports: the ports p with p&Mask == Value.
type PortBlock struct{ Value, Mask uint16 }

// PortRange splits start..end (end 0 or below start: start alone) into aligned blocks, the fewest
// value/mask matches that cover exactly the range.
func PortRange(start, end uint16) []PortBlock {
	if end < start {
		end = start
	}
	var out []PortBlock
	lo, hi := uint32(start), uint32(end)
	for lo <= hi {
		size := uint32(1)
		// Grow the block while lo stays aligned to it and it stays inside the range.
		for lo&(size*2-1) == 0 && lo+size*2-1 <= hi && size < 1<<16 {
			size *= 2
		}
		out = append(out, PortBlock{Value: uint16(lo), Mask: uint16(^(size - 1))})
		lo += size
	}
	return out
}

// dedup drops repeated flows (a Pod listed twice), keeping the first.
func dedup(flows []openflow.Flow) []openflow.Flow {
	seen := map[string]bool{}
	out := flows[:0]
	for _, f := range flows {
		if k := f.String(); !seen[k] {
			seen[k] = true
			out = append(out, f)
		}
	}
	return out
}

func hostPrefix(ip netip.Addr, field func(netip.Prefix) openflow.MatchField) openflow.MatchField {
	return field(netip.PrefixFrom(ip, ip.BitLen()))
}
