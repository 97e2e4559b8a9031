package pipeline

import (
	"cmp"
	"encoding/binary"
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
	// Classes are the peer classes the rule admits (the ids of Policy.IngressClasses or
	// EgressClasses): its ipBlocks with exceptions, matched through the peer class stage. They
	// are part of the peer clause, with Peers.
	Classes []uint32
	// Ports are the destination ports allowed; none allows every port of every protocol.
	Ports []PolicyPort
	// Audit sends the first packet of each new connection the rule admits to the agent (its
	// decision flows' AuditAction before their own), under the cookie object AuditRuleObject(ID).
	Audit bool
	// CountAs gives, by ofport, the rule id under which a Pod's connections are counted when it is
	// not ID: a rule merged from the rules of several policies (the same peers on the same ports)
	// counts each Pod under one of the rules that select it (counters.go).
	CountAs map[uint32]uint32
}

// Policy is everything NetworkPolicy asks of the node: the allow rules and the Pods isolated in
// each direction (a Pod is isolated in a direction when a policy of that direction selects it).
type Policy struct {
	Rules                           []PolicyRule
	IngressIsolated, EgressIsolated []Pod
	// IngressClasses and EgressClasses are the peer class stage of each direction: every
	// distinct CIDR and exception of the direction's ipBlocks with exceptions, each with its
	// class id (unique in the direction, not 0).
	IngressClasses, EgressClasses []PeerClass
	// AuditIngressDrops and AuditEgressDrops are the isolated Pods (by OFPort) whose default drop
	// sends the first packet of each new connection it drops to the agent (AuditAction), under the
	// cookie object AuditDropObject(direction).
	AuditIngressDrops, AuditEgressDrops map[uint32]bool
}

// AuditMaxLen is the max_len of the audit logs' output to the controller: the headers of the
// packet, not its payload (OVS sends the whole packet in a standard packet-in whatever it says,
// openflow.ToController; the agent reads no more).
const AuditMaxLen = 128

// AuditAction is what an audited rule's decision flow does before its own actions: a packet-in to
// the agent (controller id 0) that names the rule by the flow's cookie. Only new connections reach
// the rule tables (forwardingFlows), so it is one packet-in per new connection the rule decides, and
// an established one is never sent again.
func AuditAction() openflow.Action { return openflow.ToController(AuditMaxLen) }

// AuditRuleObject is the cookie object of an audited NetworkPolicy rule's decision flows (its
// conj_id flow, or its per-Pod flows when it allows everything): bit 39 set and 62 in bits 32-37
// (above any prefix length of PolicyPeerObject, below ClusterRuleObject's 63), the conjunction id
// below. Unaudited rules' flows keep object 0.
func AuditRuleObject(id uint32) uint64 { return 1<<39 | 62<<32 | uint64(id) }

// AuditDropObject is the cookie object of the audited default drops of a direction: bit 39 set, 61
// in bits 32-37, the direction in bit 0. The Pod is the packet-in's in_port (egress) or
// TargetOFPortField (ingress).
func AuditDropObject(dir PolicyDirection) uint64 { return 1<<39 | 61<<32 | uint64(dir) }

// AuditObject tells what an audit packet-in's cookie names: the NetworkPolicy rule of conjunction
// id (rule true), or the default drops of direction dir (drop true); neither for another object.
func AuditObject(cookie uint64) (id uint32, dir PolicyDirection, rule, drop bool) {
	obj := cookie & openflow.ObjectMask
	switch obj >> 32 {
	case 1<<7 | 62:
		return uint32(obj), 0, true, false
	case 1<<7 | 61:
		if obj&^(1<<39|61<<32) <= 1 {
			return 0, PolicyDirection(obj & 1), false, true
		}
	}
	return 0, 0, false, false
}

// decision is a rule's decision actions: audited, the packet-in to the agent first.
func decision(audit bool, actions ...openflow.Action) []openflow.Action {
	if !audit {
		return actions
	}
	out := []openflow.Action{AuditAction()}
	for _, a := range actions {
		if openflow.Inspect(a).Kind != openflow.KindDrop {
			out = append(out, a)
		}
	}
	return out
}

// PeerClass is one prefix of the peer class stage and the class it gives the addresses whose
// longest matching prefix it is.
type PeerClass struct {
	Prefix netip.Prefix
	ID     uint32
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
		// The host's own connections to its NodePorts enter from the gateway with the node's
		// address (the host's NodePort NAT changes the destination only).
		flow(IngressRuleTable, priorityHigh, match(openflow.IPv4(), regMatch(PktSourceField, FromGateway), hostPrefix(n.NodeIP, openflow.NwSrc)),
			openflow.GotoTable(IngressMetricTable)),
		flow(IngressRuleTable, priorityHigh, match(openflow.IPv4(), regMatch(PktSourceField, FromLocal), hostPrefix(n.NodeIP, openflow.NwSrc)),
			openflow.GotoTable(IngressMetricTable)),
	}
	for _, pod := range p.EgressIsolated {
		out = append(out,
			flow(EgressRuleTable, priorityHigh, match(openflow.IPv4(), openflow.InPort(pod.OFPort), hostPrefix(pod.IP, openflow.NwDst)), openflow.GotoTable(EgressMetricTable)),
			defaultDrop(PolicyEgress, p.AuditEgressDrops[pod.OFPort], match(openflow.IPv4(), openflow.InPort(pod.OFPort))))
	}
	for _, pod := range p.IngressIsolated {
		target := regMatch(TargetOFPortField, pod.OFPort)
		out = append(out,
			flow(IngressRuleTable, priorityHigh, match(openflow.IPv4(), target, hostPrefix(pod.IP, openflow.NwSrc)), openflow.GotoTable(IngressMetricTable)),
			defaultDrop(PolicyIngress, p.AuditIngressDrops[pod.OFPort], match(openflow.IPv4(), target)))
	}
	out = append(dedup(out), peerClassFlows(PolicyIngress, p.IngressClasses)...)
	out = append(out, peerClassFlows(PolicyEgress, p.EgressClasses)...)
	return append(out, conjunctionFlows(p.Rules)...)
}

// defaultDrop is an isolated Pod's default drop in direction dir: audited, a packet-in first, under
// AuditDropObject(dir).
func defaultDrop(dir PolicyDirection, audit bool, m []openflow.MatchField) openflow.Flow {
	table := IngressDefaultTable
	if dir == PolicyEgress {
		table = EgressDefaultTable
	}
	f := flow(table, priorityNormal, m, decision(audit, openflow.Drop())...)
	if audit {
		f.Cookie = AuditDropObject(dir)
	}
	return f
}

// peerClassFlows are the longest-prefix-match stage of one direction: an ipBlock with exceptions
// would be its CIDR minus its exceptions, which as prefixes is about 19 times as many as the
// exceptions (for /32s under 0.0.0.0/0); instead every distinct CIDR and exception is one flow,
// at priorityPeerClass + its length, that loads its class id, and a rule matches the classes
// inside its CIDRs and outside their exceptions (PolicyRule.Classes, one flow per class in the
// rule table shared by every rule that admits it). The flows grow with the prefixes written, not
// with their complement.
func peerClassFlows(dir PolicyDirection, classes []PeerClass) []openflow.Flow {
	table, next, field, nw := IngressPeerClassTable, IngressRuleTable, IngressPeerClassField, openflow.NwSrc
	if dir == PolicyEgress {
		table, next, field, nw = EgressPeerClassTable, EgressRuleTable, EgressPeerClassField, openflow.NwDst
	}
	out := make([]openflow.Flow, 0, len(classes))
	for _, c := range classes {
		if !c.Prefix.Addr().Is4() || c.ID == 0 {
			continue
		}
		out = append(out, flow(table, priorityPeerClass+uint16(c.Prefix.Bits()), match(openflow.IPv4(), nw(c.Prefix.Masked())),
			loadReg(field, c.ID), openflow.GotoTable(next)))
	}
	return out
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
//
// A peer clause flow is built by PolicyPeerFlow from the conjunctions of every rule with that peer,
// so that the incremental compiler, which rebuilds one peer's flow when an address joins or leaves
// a rule's peers, builds exactly the flow this full pass builds.
func conjunctionFlows(rules []PolicyRule) []openflow.Flow {
	type clause struct {
		flow    openflow.Flow
		actions []openflow.Action
		order   []uint64
	}
	// A clause flow is known by its table and what it matches (a Pod or a port block), which is
	// cheaper to compare than its text: a node's policy can have a million adds.
	type clauseKey struct {
		table, kind uint8
		value       uint64
	}
	const podClause, portClause = 1, 3
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
	type peerKey struct {
		dir  PolicyDirection
		peer netip.Prefix
	}
	peers := 0
	for _, r := range rules {
		peers += len(r.Peers)
	}
	peerClauses := make(map[peerKey][]PeerConjunction, peers)
	peerKeys := make([]peerKey, 0, peers)
	type classKey struct {
		dir PolicyDirection
		id  uint32
	}
	classClauses := map[classKey][]PeerConjunction{}
	var classKeys []classKey
	var out []openflow.Flow
	// allowed holds the per-Pod flows of the rules that allow everything, by table and match: the
	// first rule's (by id) is the Pod's flow, which decides and counts (under the Pod's CountAs).
	// Rules of one Pod are all of its namespace, so all audited or none, and audited ones differ
	// only by their cookie.
	allowed := map[string]bool{}
	type counted struct {
		dir PolicyDirection
		id  uint32
	}
	var countedIDs []counted
	isCounted := map[counted]bool{}
	count := func(dir PolicyDirection, id uint32) {
		if c := (counted{dir, id}); !isCounted[c] {
			isCounted[c] = true
			countedIDs = append(countedIDs, c)
		}
	}
	for _, r := range rules {
		if len(r.Pods) == 0 || (!r.AnyPeer && len(r.Peers) == 0 && len(r.Classes) == 0) {
			continue
		}
		table, metric := IngressRuleTable, IngressMetricTable
		if r.Direction == PolicyEgress {
			table, metric = EgressRuleTable, EgressMetricTable
		}
		podMatch := func(pod Pod) []openflow.MatchField {
			if r.Direction == PolicyEgress {
				return match(openflow.IPv4(), openflow.InPort(pod.OFPort))
			}
			return match(openflow.IPv4(), regMatch(TargetOFPortField, pod.OFPort))
		}
		countAs := func(pod Pod) uint32 {
			if id, ok := r.CountAs[pod.OFPort]; ok && id != 0 {
				return id
			}
			return r.ID
		}
		c := r.clauses()
		if c.n == 0 {
			for _, pod := range r.Pods {
				f := flow(table, priorityAllowAll, podMatch(pod))
				if k := f.String(); !allowed[k] {
					allowed[k] = true
					id := countAs(pod)
					f.Actions = decision(r.Audit, loadRule(r.Direction, id), openflow.GotoTable(metric))
					if r.Audit {
						f.Cookie = AuditRuleObject(r.ID)
					}
					out = append(out, f)
					count(r.Direction, id)
				}
			}
			continue
		}
		for _, pod := range r.Pods {
			add(table, podClause, uint64(pod.OFPort), func() []openflow.MatchField { return podMatch(pod) }, r.ID, c.pods, c.n)
		}
		if c.peers != 0 {
			conj := PeerConjunction{ID: r.ID, K: c.peers, N: c.n}
			for _, peer := range r.Peers {
				k := peerKey{r.Direction, peer.Masked()}
				if _, ok := peerClauses[k]; !ok {
					peerKeys = append(peerKeys, k)
				}
				peerClauses[k] = append(peerClauses[k], conj)
			}
			for _, id := range r.Classes {
				k := classKey{r.Direction, id}
				if _, ok := classClauses[k]; !ok {
					classKeys = append(classKeys, k)
				}
				classClauses[k] = append(classClauses[k], conj)
			}
		}
		for _, pp := range r.Ports {
			base := func() []openflow.MatchField { return match(openflow.IPv4(), openflow.IPProto(pp.Protocol)) }
			if pp.Port == 0 {
				add(table, portClause, uint64(pp.Protocol)<<40, base, r.ID, c.ports, c.n)
				continue
			}
			// One value/mask match per aligned block of the range (80-85 is 0x50/0xfffc and
			// 0x54/0xfffe), as Antrea's portsToBitRanges does.
			for _, b := range PortRange(pp.Port, pp.EndPort) {
				value := uint64(pp.Protocol)<<40 | 1<<32 | uint64(b.Value)<<16 | uint64(b.Mask)
				add(table, portClause, value, func() []openflow.MatchField {
					return append(base(), openflow.TpDstMasked(pp.Protocol, b.Value, b.Mask))
				}, r.ID, c.ports, c.n)
			}
		}
		f := flow(table, priorityLow, match(openflow.ConjID(r.ID), openflow.IPv4()), decision(r.Audit, loadRule(r.Direction, r.ID), openflow.GotoTable(metric))...)
		if r.Audit {
			f.Cookie = AuditRuleObject(r.ID)
		}
		out = append(out, f)
		count(r.Direction, r.ID)
		// The Pods a merged rule counts under another rule's id: the conjunction's flow for them.
		// (An audited rule is never merged: none of these is audited.)
		for _, pod := range r.Pods {
			if id := countAs(pod); id != r.ID {
				out = append(out, flow(table, priorityCountAs, append(match(openflow.ConjID(r.ID)), podMatch(pod)...),
					loadRule(r.Direction, id), openflow.GotoTable(metric)))
				count(r.Direction, id)
			}
		}
	}
	for _, c := range countedIDs {
		out = append(out, ruleCounterFlows(c.dir, c.id)...)
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
				continue // the same Pod listed twice in one rule
			}
			f.Actions = append(f.Actions, c.actions[j])
		}
		out = append(out, f)
	}
	out = slices.Grow(out, len(peerKeys))
	a := newPeerFlowArena(len(peerKeys))
	for _, k := range peerKeys {
		out = append(out, a.peerFlow(k.dir, k.peer, peerClauses[k]))
	}
	for _, k := range classKeys {
		out = append(out, a.classFlow(k.dir, k.id, classClauses[k]))
	}
	return out
}

// ruleClauses are the numbers of a rule's clauses (0: no such clause) and how many it has; n is 0
// for a rule that allows its Pods everything (any peer on any port).
type ruleClauses struct{ pods, peers, ports, n uint8 }

// clauses numbers the rule's clauses: egress Pods, peers, ports; ingress peers, Pods, ports; the
// absent ones (any peer, any port) skipped.
func (r PolicyRule) clauses() ruleClauses {
	anyPeer := r.AnyPeer || slices.ContainsFunc(r.Peers, func(p netip.Prefix) bool { return p.Bits() == 0 })
	anyPort := len(r.Ports) == 0
	switch {
	case anyPeer && anyPort:
		return ruleClauses{}
	case anyPeer:
		return ruleClauses{pods: 1, ports: 2, n: 2}
	case anyPort && r.Direction == PolicyIngress:
		return ruleClauses{peers: 1, pods: 2, n: 2}
	case anyPort:
		return ruleClauses{pods: 1, peers: 2, n: 2}
	case r.Direction == PolicyIngress:
		return ruleClauses{peers: 1, pods: 2, ports: 3, n: 3}
	default:
		return ruleClauses{pods: 1, peers: 2, ports: 3, n: 3}
	}
}

// PeerConjunction is one rule's action on a peer clause flow: conjunction(ID, K/N).
type PeerConjunction struct {
	ID   uint32
	K, N uint8
}

// PeerClause is the action the rule puts on the flow of each of its peers, and false when the rule
// has no peer flows (no Pods, no peers, or any peer: no rule of AnyPeer or with a 0.0.0.0/0 peer).
func (r PolicyRule) PeerClause() (PeerConjunction, bool) {
	if len(r.Pods) == 0 || r.AnyPeer || (len(r.Peers) == 0 && len(r.Classes) == 0) {
		return PeerConjunction{}, false
	}
	c := r.clauses()
	if c.peers == 0 {
		return PeerConjunction{}, false
	}
	return PeerConjunction{ID: r.ID, K: c.peers, N: c.n}, true
}

// PolicyPeerFlow is the flow of one peer clause: IP packets from peer (ingress) or to peer (egress),
// with the conjunction action of every rule that has the peer (in id order, each once). Its cookie
// object is the peer's (PolicyPeerObject), so that it can be synced on its own.
func PolicyPeerFlow(dir PolicyDirection, peer netip.Prefix, conjs []PeerConjunction) openflow.Flow {
	return newPeerFlowArena(1).peerFlow(dir, peer, conjs)
}

// peerFlowArena builds many peer clause flows with few allocations: their matches come from one
// array, and each distinct conjunction action is made once (5,000 ipBlock peers are 5,000 flows
// with the same action).
type peerFlowArena struct {
	matches []openflow.MatchField
	actions map[PeerConjunction]openflow.Action
}

func newPeerFlowArena(flows int) *peerFlowArena {
	return &peerFlowArena{matches: make([]openflow.MatchField, 0, 2*flows), actions: map[PeerConjunction]openflow.Action{}}
}

// peerFlow is PolicyPeerFlow.
func (a *peerFlowArena) peerFlow(dir PolicyDirection, peer netip.Prefix, conjs []PeerConjunction) openflow.Flow {
	peer = peer.Masked()
	table, field := IngressRuleTable, openflow.NwSrc
	if dir == PolicyEgress {
		table, field = EgressRuleTable, openflow.NwDst
	}
	sorted := sortConjunctions(conjs)
	if len(a.matches)+2 > cap(a.matches) {
		a.matches = make([]openflow.MatchField, 0, 64)
	}
	n := len(a.matches)
	a.matches = append(a.matches, openflow.IPv4(), field(peer))
	f := flow(table, priorityNormal, a.matches[n:n+2:n+2])
	f.Cookie = PolicyPeerObject(dir, peer)
	a.setConjunctions(&f, sorted)
	return f
}

// classFlow is the flow of one peer class in the rule table: IP packets whose address the peer
// class stage put in class id, with the conjunction action of every rule that admits the class.
func (a *peerFlowArena) classFlow(dir PolicyDirection, id uint32, conjs []PeerConjunction) openflow.Flow {
	table, field := IngressRuleTable, IngressPeerClassField
	if dir == PolicyEgress {
		table, field = EgressRuleTable, EgressPeerClassField
	}
	f := flow(table, priorityNormal, match(openflow.IPv4(), regMatch(field, id)))
	a.setConjunctions(&f, sortConjunctions(conjs))
	return f
}

// sortConjunctions sorts conjunctions by id and clause, each once (a copy when there are several).
func sortConjunctions(conjs []PeerConjunction) []PeerConjunction {
	if len(conjs) < 2 {
		return conjs
	}
	sorted := slices.Clone(conjs)
	slices.SortFunc(sorted, func(a, b PeerConjunction) int {
		return cmp.Or(cmp.Compare(a.ID, b.ID), cmp.Compare(a.K, b.K))
	})
	return slices.CompactFunc(sorted, func(a, b PeerConjunction) bool { return a.ID == b.ID && a.K == b.K })
}

// setConjunctions makes f's actions the conjunctions, each action made once per arena.
func (a *peerFlowArena) setConjunctions(f *openflow.Flow, sorted []PeerConjunction) {
	f.Actions = make([]openflow.Action, len(sorted))
	for i, c := range sorted {
		act, ok := a.actions[c]
		if !ok {
			act = openflow.Conjunction(c.ID, c.K, c.N)
			a.actions[c] = act
		}
		f.Actions[i] = act
	}
}

// PolicyPeerObject is the cookie object of a peer clause flow: bit 39 set (no other policy flow has
// it), the direction in bit 38, the prefix length in bits 32-37, the IPv4 address below.
func PolicyPeerObject(dir PolicyDirection, peer netip.Prefix) uint64 {
	a := peer.Masked().Addr().As4()
	return 1<<39 | uint64(dir)<<38 | uint64(peer.Bits())<<32 | uint64(binary.BigEndian.Uint32(a[:]))
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
