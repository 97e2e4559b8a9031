package networkpolicy

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/winnet-io/winnet/controllers/nodenetwork"
	"github.com/winnet-io/winnet/internal/auditlog"
	cnpv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/internal/pipeline"
)

// PodInfo is what policy needs of a Pod anywhere in the cluster.
type PodInfo struct {
	Namespace, Name string
	Labels          map[string]string
	// IPs are the Pod's IPv4 addresses (status.podIPs, or the local attachment's).
	IPs []netip.Addr
	// Ports are the Pod's named container ports.
	Ports []NamedPort
}

// NamedPort is a named container port.
type NamedPort struct {
	Name     string
	Protocol corev1.Protocol
	Port     uint16
}

// LocalPod is a Pod attached on this node.
type LocalPod struct {
	Key types.NamespacedName
	Pod pipeline.Pod
}

// Inputs are the facts the desired policy is computed from.
type Inputs struct {
	Policies []networkingv1.NetworkPolicy
	// ClusterPolicies are every ClusterNetworkPolicy of the cluster (none when the agent does
	// not realise them: Reconciler.ClusterPolicies).
	ClusterPolicies []cnpv1beta1.ClusterNetworkPolicy
	// Namespaces maps every namespace to its labels.
	Namespaces map[string]map[string]string
	// Pods are every Pod of the cluster with an address; Local the ones attached on this node.
	Pods  []PodInfo
	Local []LocalPod
	// Audit: the agent writes an audit log (internal/auditlog). The NetworkPolicies of the
	// namespaces in AuditNamespaces (annotated AuditLogAnnotation "true") and the
	// ClusterNetworkPolicies so annotated are then audited, but for the owners (namespaces,
	// ClusterNetworkPolicies) in AuditSuspended, whose audit log is suspended; without Audit
	// nothing is.
	Audit           bool
	AuditNamespaces map[string]bool
	AuditSuspended  map[auditlog.Owner]bool
	// NodePeers are, per label selector of a ClusterNetworkPolicy nodes peer (as the API server
	// parses it), the IPv4 addresses of the Nodes it selects (PeerNodes). nil: nodes peers are not
	// realised; a selector missing: its Nodes are not listed yet.
	NodePeers map[string][]netip.Addr
}

// Desired is the node's policy: the pipeline's input, what it counts, and what cannot be realised.
type Desired struct {
	Policy pipeline.Policy
	// Policies counts the policies that select at least one local Pod; Rules the conjunctions.
	Policies, Rules int
	// Unsupported lists, per policy, the parts winnet cannot realise (SCTP ports).
	Unsupported map[types.NamespacedName][]string
	// Refused lists, per policy, the rules refused for their size (MaxExceptsPerRule): they admit
	// nothing, the policy's other rules apply.
	Refused map[types.NamespacedName][]string
	// Index names the rules and isolations of this pass, for packet traces.
	Index nodenetwork.PolicyIndex
	// ids are the conjunction ids of every rule of this pass, merged ones included (conjIDs.keepOnly).
	ids map[uint32]bool
	// peers indexes what the pass resolved, for the incremental compiler (incremental.go). Only
	// a Pod's change after the pass needs it, so the reconciler builds it once the pass's flows
	// are in the switch, off the path of the flows.
	peers func() *peerIndex
}

// RuleKey identifies one conjunction across passes, so that its id (and flows) stay the same while
// the rule does: the policy, the direction and rule index, and the port set of a group of
// targets or peers that a named port split the rule into.
type RuleKey struct {
	Policy    types.UID
	Direction pipeline.PolicyDirection
	Index     int
	Ports     string
}

// IDs allocates conjunction ids, and the ids of the peer classes (pipeline.PeerClass).
type IDs interface {
	ID(RuleKey) uint32
	ClassID(pipeline.PolicyDirection, netip.Prefix) uint32
}

// MaxExceptsPerRule is the most ipBlock exceptions one rule (all its ipBlocks together) may have.
// A rule with more is refused: it admits nothing, the policy's other rules apply, and the node's
// PoliciesReady condition and a Warning Event on the policy say why. Each exception costs one flow
// of the peer class stage and its share of every pass; 4,000 /32s are about 150 KB of policy.
const MaxExceptsPerRule = 4000

// compiledPorts is a rule's port set for one group of Pods: any port, or the listed ones (which
// may be none: named ports that do not resolve match nothing).
type compiledPorts struct {
	any   bool
	ports []pipeline.PolicyPort
}

func (c compiledPorts) key() string {
	if c.any {
		return "any"
	}
	var b strings.Builder
	for _, p := range c.ports {
		fmt.Fprintf(&b, "%d/%d-%d,", p.Protocol, p.Port, p.EndPort)
	}
	return b.String()
}

// Compute is the node's desired NetworkPolicy, a pure function of its inputs: every local Pod a
// policy selects is isolated in the policy's directions, and each rule becomes one conjunction per
// distinct port set (named ports resolve per Pod: the target Pods for ingress, the destination
// Pods for egress, as the Kubernetes specification says).
func Compute(in Inputs, ids IDs) Desired {
	d := Desired{Unsupported: map[types.NamespacedName][]string{}, Refused: map[types.NamespacedName][]string{}, ids: map[uint32]bool{},
		Index: nodenetwork.NewPolicyIndex()}
	policyNames := make(map[types.UID]types.NamespacedName, len(in.Policies))
	for i := range in.Policies {
		policyNames[in.Policies[i].UID] = types.NamespacedName{Namespace: in.Policies[i].Namespace, Name: in.Policies[i].Name}
	}
	podInfo := map[types.NamespacedName]*PodInfo{}
	for i := range in.Pods {
		p := &in.Pods[i]
		podInfo[types.NamespacedName{Namespace: p.Namespace, Name: p.Name}] = p
	}
	ingressIsolated, egressIsolated := map[uint32]pipeline.Pod{}, map[uint32]pipeline.Pod{}
	m := &memo{in: in, podInfo: podInfo, targets: map[string][]localTarget{}, peers: map[string]*resolvedPeers{},
		namedEgress: map[string]bool{}, peerSpecs: map[string]peerSpec{}}
	ruleID := func(k RuleKey) uint32 {
		id := ids.ID(k)
		d.ids[id] = true
		if _, ok := d.Index.Rules[id]; !ok {
			d.Index.Rules[id] = nodenetwork.PolicyRuleName{Kind: nodenetwork.KindNetworkPolicy, Policy: policyNames[k.Policy],
				Egress: k.Direction == pipeline.PolicyEgress, Index: k.Index, Action: nodenetwork.ActionAllow}
		}
		return id
	}
	var rules []compiledRule
	for i := range in.Policies {
		np := &in.Policies[i]
		key := types.NamespacedName{Namespace: np.Namespace, Name: np.Name}
		targets := m.selectTargets(np.Namespace, &np.Spec.PodSelector)
		ingress, egress := policyTypes(np)
		d.Unsupported[key] = unsupported(np)
		if len(d.Unsupported[key]) == 0 {
			delete(d.Unsupported, key)
		}
		if len(targets) == 0 {
			continue
		}
		d.Policies++
		// Audited: the policy's rules and the default drops of the Pods it isolates (all of its
		// namespace, whose every policy is audited alike, and suspended alike).
		audit := in.Audit && in.AuditNamespaces[np.Namespace] && !in.AuditSuspended[auditlog.NamespaceOwner(np.Namespace)]
		audited := func(rs []compiledRule) []compiledRule {
			for i := range rs {
				rs[i].Audit = audit
			}
			return rs
		}
		if ingress {
			for _, t := range targets {
				ingressIsolated[t.pod.OFPort] = t.pod
				d.Index.IngressIsolation[t.pod.OFPort] = append(d.Index.IngressIsolation[t.pod.OFPort], key)
				if audit {
					d.Policy.AuditIngressDrops = setPort(d.Policy.AuditIngressDrops, t.pod.OFPort)
				}
			}
			for ri, rule := range np.Spec.Ingress {
				if n := countExcepts(rule.From); n > MaxExceptsPerRule {
					d.Refused[key] = append(d.Refused[key], refusal("ingress", ri, n))
					continue
				}
				rules = append(rules, audited(ingressRules(np, ri, rule, targets, m, ruleID))...)
			}
		}
		if egress {
			for _, t := range targets {
				egressIsolated[t.pod.OFPort] = t.pod
				d.Index.EgressIsolation[t.pod.OFPort] = append(d.Index.EgressIsolation[t.pod.OFPort], key)
				if audit {
					d.Policy.AuditEgressDrops = setPort(d.Policy.AuditEgressDrops, t.pod.OFPort)
				}
			}
			for ri, rule := range np.Spec.Egress {
				if n := countExcepts(rule.To); n > MaxExceptsPerRule {
					d.Refused[key] = append(d.Refused[key], refusal("egress", ri, n))
					continue
				}
				rules = append(rules, audited(egressRules(np, ri, rule, targets, m, ruleID))...)
			}
		}
	}
	// A rule whose peers resolve to nothing allows nothing: it has no flows and does not count.
	rules = slices.DeleteFunc(rules, func(r compiledRule) bool { return !r.AnyPeer && len(r.Peers) == 0 && len(r.excepts) == 0 })
	rules = mergeRules(rules)
	d.Policy.IngressClasses = assignClasses(pipeline.PolicyIngress, rules, ids)
	d.Policy.EgressClasses = assignClasses(pipeline.PolicyEgress, rules, ids)
	slices.SortFunc(rules, func(a, b compiledRule) int { return int(a.ID) - int(b.ID) })
	d.Policy.IngressIsolated = sortedPods(ingressIsolated)
	d.Policy.EgressIsolated = sortedPods(egressIsolated)
	d.Policy.Rules = make([]pipeline.PolicyRule, len(rules))
	for i, r := range rules {
		d.Policy.Rules[i] = r.PolicyRule
	}
	d.Rules = len(d.Policy.Rules)
	for _, r := range d.Policy.Rules {
		if r.Direction == pipeline.PolicyEgress {
			d.Index.EgressRules = append(d.Index.EgressRules, r.ID)
		} else {
			d.Index.IngressRules = append(d.Index.IngressRules, r.ID)
		}
	}
	d.peers = func() *peerIndex { return newPeerIndex(in, m, rules) }
	return d
}

// compiledRule is a rule and the peer set its peers are (memo.resolvePeers' key), or "" when they
// are not one set's addresses (an egress rule with named ports: each group of destinations that
// resolve the names alike has its own rule).
type compiledRule struct {
	pipeline.PolicyRule
	set string
	// excepts are the rule's ipBlocks with exceptions, which become its Classes (assignClasses).
	excepts []exceptBlock
}

// mergeRules merges the rules that allow the same peer set on the same ports in the same direction
// into one, over the union of their Pods, with the lowest of their ids (rules allow, so a packet one
// of them allows is allowed by the merged rule and no other). A thousand policies that admit the
// same peers to different selections of Pods then cost one conjunction whose peer flows carry one
// conjunction action each, not a thousand. The merged rule counts each Pod under the lowest id of
// the rules that select it (CountAs), so that each rule's counters count its own Pods' connections.
// An audited rule is never merged, with another audited rule or not: its conjunction id names it
// in the audit log.
func mergeRules(rules []compiledRule) []compiledRule {
	type key struct {
		dir     pipeline.PolicyDirection
		set     string
		anyPeer bool
		ports   string
	}
	byKey := map[key]int{}
	var out []compiledRule
	var pods []map[uint32]bool
	// countAs holds, for the rules that others merged into, the id each Pod is counted under.
	countAs := map[int]map[uint32]uint32{}
	for _, r := range rules {
		k := key{r.Direction, r.set, r.AnyPeer, compiledPorts{ports: r.Ports}.key()}
		i, ok := byKey[k]
		if !ok || r.set == "" || r.Audit {
			seen := map[uint32]bool{}
			own := make([]pipeline.Pod, 0, len(r.Pods))
			for _, p := range r.Pods {
				if !seen[p.OFPort] {
					seen[p.OFPort] = true
					own = append(own, p)
				}
			}
			r.Pods = own
			if !r.Audit {
				byKey[k] = len(out)
			}
			out = append(out, r)
			pods = append(pods, seen)
			continue
		}
		o := &out[i]
		if countAs[i] == nil {
			countAs[i] = map[uint32]uint32{}
			for _, p := range o.Pods {
				countAs[i][p.OFPort] = o.ID
			}
		}
		o.ID = min(o.ID, r.ID)
		for _, p := range r.Pods {
			if !pods[i][p.OFPort] {
				pods[i][p.OFPort] = true
				o.Pods = append(o.Pods, p)
				countAs[i][p.OFPort] = r.ID
			} else {
				countAs[i][p.OFPort] = min(countAs[i][p.OFPort], r.ID)
			}
		}
	}
	// Each Pod of a merged rule is counted under the lowest id of the rules that select it (the
	// rules' own counters stay right): only the Pods counted under another id than the merged
	// rule's need a flow of their own (pipeline.PolicyRule.CountAs).
	for i, m := range countAs {
		for port, id := range m {
			if id == out[i].ID {
				delete(m, port)
			}
		}
		if len(m) > 0 {
			out[i].CountAs = m
		}
	}
	return out
}

type localTarget struct {
	pod  pipeline.Pod
	info *PodInfo
}

// memo remembers, for one Compute, what many policies ask alike: the local Pods a podSelector
// selects in a namespace, and what a list of peers resolves to. A thousand policies with the same
// peers then cost one resolution over the cluster's Pods, not a thousand. What it returns is shared
// and must not be changed.
type memo struct {
	in      Inputs
	podInfo map[types.NamespacedName]*PodInfo
	targets map[string][]localTarget
	peers   map[string]*resolvedPeers
	// namedEgress holds the peer sets of egress rules with named ports, which resolve the names on
	// each destination Pod; namedEgressAll is set by such a rule without peers (every Pod).
	namedEgress    map[string]bool
	namedEgressAll bool
	// peerSpecs is what each peer set of peers was resolved from.
	peerSpecs map[string]peerSpec
}

// specKey identifies a selector in namespace ns by its content.
func specKey(ns string, spec any) string {
	b, _ := json.Marshal(spec)
	return ns + "\x00" + string(b)
}

// peersKey identifies a list of peers in namespace ns by its content, as specKey does, with
// ipBlocks written by hand: a policy of 5,000 ipBlocks spent more time in JSON than in the rest of
// its compilation. Every part is length-prefixed, so two different lists never share a key.
func peersKey(ns string, peers []networkingv1.NetworkPolicyPeer) string {
	b := make([]byte, 0, len(ns)+1+len(peers)*24)
	b = append(b, ns...)
	b = append(b, 0)
	for _, p := range peers {
		if p.IPBlock != nil && p.PodSelector == nil && p.NamespaceSelector == nil {
			b = append(b, 'B')
			b = appendLenString(b, p.IPBlock.CIDR)
			b = binary.AppendUvarint(b, uint64(len(p.IPBlock.Except)))
			for _, e := range p.IPBlock.Except {
				b = appendLenString(b, e)
			}
			continue
		}
		j, _ := json.Marshal(p)
		b = append(b, 'J')
		b = appendLenString(b, string(j))
	}
	return string(b)
}

func appendLenString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// selectTargets returns the local Pods of namespace ns that selector selects.
func (m *memo) selectTargets(ns string, selector *metav1.LabelSelector) []localTarget {
	k := specKey(ns, selector)
	if t, ok := m.targets[k]; ok {
		return t
	}
	var targets []localTarget
	if sel, err := metav1.LabelSelectorAsSelector(selector); err == nil { // the API server validates selectors
		for _, lp := range m.in.Local {
			info := m.podInfo[lp.Key]
			if lp.Key.Namespace == ns && info != nil && sel.Matches(labels.Set(info.Labels)) {
				targets = append(targets, localTarget{pod: lp.Pod, info: info})
			}
		}
	}
	m.targets[k] = targets
	return targets
}

// resolvePeers is resolvePeers, once per namespace and list of peers (a peer set, known by key).
func (m *memo) resolvePeers(ns string, peers []networkingv1.NetworkPolicyPeer) (r *resolvedPeers, key string) {
	k := peersKey(ns, peers)
	if r, ok := m.peers[k]; ok {
		return r, k
	}
	res := resolvePeers(ns, peers, m.in)
	res.all = res.prefixes()
	m.peers[k] = &res
	m.peerSpecs[k] = peerSpec{ns: ns, peers: peers}
	return &res, k
}

// policyTypes are the policy's directions, defaulted as the API server defaults them: Ingress, and
// Egress when the policy has egress rules.
func policyTypes(np *networkingv1.NetworkPolicy) (ingress, egress bool) {
	if len(np.Spec.PolicyTypes) == 0 {
		return true, len(np.Spec.Egress) > 0
	}
	return slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress), slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress)
}

// unsupported lists the ports of the policy that the Windows datapath cannot realise: SCTP, which
// Windows conntrack drops (see pipeline's Windows profile). Such ports allow nothing.
func unsupported(np *networkingv1.NetworkPolicy) []string {
	var out []string
	add := func(dir string, i int, ports []networkingv1.NetworkPolicyPort) {
		for _, p := range ports {
			if p.Protocol != nil && *p.Protocol == corev1.ProtocolSCTP {
				port := "all ports"
				if p.Port != nil {
					port = "port " + p.Port.String()
				}
				out = append(out, fmt.Sprintf("%s rule %d: SCTP %s", dir, i+1, port))
			}
		}
	}
	for i, r := range np.Spec.Ingress {
		add("ingress", i, r.Ports)
	}
	for i, r := range np.Spec.Egress {
		add("egress", i, r.Ports)
	}
	return out
}

// ingressRules compiles one ingress rule: the peers are sources; named ports resolve on the
// target Pods, so targets with different resolutions get different conjunctions.
func ingressRules(np *networkingv1.NetworkPolicy, index int, rule networkingv1.NetworkPolicyIngressRule, targets []localTarget, m *memo, ruleID func(RuleKey) uint32) []compiledRule {
	anyPeer := len(rule.From) == 0
	peers, set := m.resolvePeers(np.Namespace, rule.From)
	groups := map[string]*compiledRule{}
	var order []string
	named := hasNamedPort(rule.Ports)
	numbered := resolvePorts(rule.Ports, nil)
	numberedKey := numbered.key()
	for _, t := range targets {
		ports, k := numbered, numberedKey
		if named {
			ports = resolvePorts(rule.Ports, t.info)
			k = ports.key()
		}
		if !ports.any && len(ports.ports) == 0 {
			continue
		}
		r, ok := groups[k]
		if !ok {
			r = &compiledRule{set: set, excepts: peers.excepts, PolicyRule: pipeline.PolicyRule{
				ID: ruleID(RuleKey{Policy: np.UID, Direction: pipeline.PolicyIngress, Index: index, Ports: k}), Direction: pipeline.PolicyIngress,
				AnyPeer: anyPeer, Peers: peers.all, Ports: ports.ports, Pods: make([]pipeline.Pod, 0, len(targets)),
			}}
			groups[k] = r
			order = append(order, k)
		}
		r.Pods = append(r.Pods, t.pod)
	}
	var out []compiledRule
	for _, k := range order {
		out = append(out, *groups[k])
	}
	return out
}

// egressRules compiles one egress rule: the peers are destinations; named ports resolve on the
// destination Pods, so destinations with different resolutions get different conjunctions, and
// ipBlock peers (no Pod, no name) get the numbered ports only.
func egressRules(np *networkingv1.NetworkPolicy, index int, rule networkingv1.NetworkPolicyEgressRule, targets []localTarget, m *memo, ruleID func(RuleKey) uint32) []compiledRule {
	in := m.in
	var pods []pipeline.Pod
	for _, t := range targets {
		pods = append(pods, t.pod)
	}
	type group struct {
		ports   compiledPorts
		anyPeer bool
		peers   []netip.Prefix
		excepts []exceptBlock
	}
	groups := map[string]*group{}
	var order []string
	add := func(ports compiledPorts, any bool, peers ...netip.Prefix) {
		if !ports.any && len(ports.ports) == 0 {
			return
		}
		k := ports.key()
		g, ok := groups[k]
		if !ok {
			g = &group{ports: ports}
			groups[k] = g
			order = append(order, k)
		}
		g.anyPeer = g.anyPeer || any
		g.peers = append(g.peers, peers...)
	}
	named := hasNamedPort(rule.Ports)
	peers, set := m.resolvePeers(np.Namespace, rule.To)
	if !named {
		add(resolvePorts(rule.Ports, nil), len(rule.To) == 0, peers.all...)
		if g := groups[resolvePorts(rule.Ports, nil).key()]; g != nil {
			g.excepts = peers.excepts
		}
	} else {
		// The rule's groups are not its peer set's addresses: a change of a Pod in the set
		// needs a full pass (incremental.go).
		m.namedEgress[set] = true
		set = ""
		if len(rule.To) == 0 {
			m.namedEgressAll = true
			// Any destination: the numbered ports to anyone, the named ones to each Pod that has them.
			add(resolvePorts(rule.Ports, nil), true)
			for i := range in.Pods {
				p := &in.Pods[i]
				add(resolvePorts(rule.Ports, p), false, hostPrefixes(p.IPs)...)
			}
		} else {
			add(resolvePorts(rule.Ports, nil), false, peers.blocks...)
			if g := groups[resolvePorts(rule.Ports, nil).key()]; g != nil {
				g.excepts = peers.excepts
			}
			for _, p := range peers.pods {
				add(resolvePorts(rule.Ports, p), false, hostPrefixes(p.IPs)...)
			}
		}
	}
	var out []compiledRule
	for _, k := range order {
		g := groups[k]
		out = append(out, compiledRule{set: set, excepts: g.excepts, PolicyRule: pipeline.PolicyRule{
			ID: ruleID(RuleKey{Policy: np.UID, Direction: pipeline.PolicyEgress, Index: index, Ports: k}), Direction: pipeline.PolicyEgress,
			Pods: pods, AnyPeer: g.anyPeer, Peers: uniquePrefixes(g.peers), Ports: g.ports.ports,
		}})
	}
	return out
}

func hasNamedPort(ports []networkingv1.NetworkPolicyPort) bool {
	return slices.ContainsFunc(ports, func(p networkingv1.NetworkPolicyPort) bool {
		return p.Port != nil && p.Port.Type == intstr.String
	})
}

// resolvePorts is a rule's port set for pod (nil: no Pod, named ports match nothing). SCTP ports
// are left out (see unsupported).
func resolvePorts(ports []networkingv1.NetworkPolicyPort, pod *PodInfo) compiledPorts {
	if len(ports) == 0 {
		return compiledPorts{any: true}
	}
	var out []pipeline.PolicyPort
	for _, p := range ports {
		proto := corev1.ProtocolTCP
		if p.Protocol != nil {
			proto = *p.Protocol
		}
		ofProto, ok := protocols[proto]
		if !ok {
			continue
		}
		switch {
		case p.Port == nil:
			out = append(out, pipeline.PolicyPort{Protocol: ofProto})
		case p.Port.Type == intstr.Int:
			pp := pipeline.PolicyPort{Protocol: ofProto, Port: uint16(p.Port.IntVal)}
			if p.EndPort != nil && *p.EndPort > p.Port.IntVal {
				pp.EndPort = uint16(*p.EndPort)
			}
			out = append(out, pp)
		case pod != nil:
			for _, np := range pod.Ports {
				if np.Name == p.Port.StrVal && np.Protocol == proto {
					out = append(out, pipeline.PolicyPort{Protocol: ofProto, Port: np.Port})
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b pipeline.PolicyPort) int {
		return strings.Compare(portSortKey(a), portSortKey(b))
	})
	return compiledPorts{ports: slices.Compact(out)}
}

func portSortKey(p pipeline.PolicyPort) string {
	return fmt.Sprintf("%03d/%05d-%05d", p.Protocol, p.Port, p.EndPort)
}

var protocols = map[corev1.Protocol]uint8{corev1.ProtocolTCP: openflow.ProtoTCP, corev1.ProtocolUDP: openflow.ProtoUDP}

// resolvedPeers are a rule's peers: the Pods its selectors match and its ipBlocks' prefixes.
type resolvedPeers struct {
	pods   []*PodInfo
	blocks []netip.Prefix
	// excepts are the ipBlocks with exceptions, matched through the peer class stage.
	excepts []exceptBlock
	// all is prefixes(), once (memo.resolvePeers).
	all []netip.Prefix
}

func (r resolvedPeers) prefixes() []netip.Prefix {
	out := slices.Clone(r.blocks)
	for _, p := range r.pods {
		out = append(out, hostPrefixes(p.IPs)...)
	}
	return uniquePrefixes(out)
}

// resolvePeers resolves a rule's peers in the policy's namespace ns: a podSelector alone selects
// Pods of ns, a namespaceSelector alone every Pod of the namespaces it selects, both together the
// Pods the podSelector selects in those namespaces; an ipBlock is its CIDR minus its exceptions.
func resolvePeers(ns string, peers []networkingv1.NetworkPolicyPeer, in Inputs) resolvedPeers {
	var out resolvedPeers
	for _, peer := range peers {
		if peer.IPBlock == nil {
			continue
		}
		plain, ex, ok := parseIPBlock(peer.IPBlock)
		switch {
		case !ok:
		case ex != nil:
			out.excepts = append(out.excepts, *ex)
		default:
			out.blocks = append(out.blocks, plain)
		}
	}
	seen := map[*PodInfo]bool{}
	for _, s := range peerSelectors(ns, peers) {
		for i := range in.Pods {
			if p := &in.Pods[i]; !seen[p] && s.matches(p, in.Namespaces) {
				seen[p] = true
				out.pods = append(out.pods, p)
			}
		}
	}
	return out
}

// peerSelector is a rule's podSelector and namespaceSelector peer, parsed.
type peerSelector struct {
	ns  string          // the policy's namespace
	pod labels.Selector // everything when the peer has no podSelector
	// namespace selects the namespaces; nil when the peer has no namespaceSelector (ns only).
	namespace labels.Selector
}

type peerSelectorList []peerSelector

// peerSelectors parses the selector peers of a rule of a policy in namespace ns; the API server
// validates selectors, and one it did not is left out (it selects nothing).
func peerSelectors(ns string, peers []networkingv1.NetworkPolicyPeer) peerSelectorList {
	var out peerSelectorList
	for _, peer := range peers {
		if peer.IPBlock != nil {
			continue
		}
		s := peerSelector{ns: ns, pod: labels.Everything()}
		if peer.PodSelector != nil {
			sel, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
			if err != nil {
				continue
			}
			s.pod = sel
		}
		if peer.NamespaceSelector != nil {
			sel, err := metav1.LabelSelectorAsSelector(peer.NamespaceSelector)
			if err != nil {
				continue
			}
			s.namespace = sel
		}
		out = append(out, s)
	}
	return out
}

// matches tells whether the selector selects Pod p, given every namespace's labels.
func (s peerSelector) matches(p *PodInfo, namespaces map[string]map[string]string) bool {
	inNS := p.Namespace == s.ns
	if s.namespace != nil {
		nsLabels, ok := namespaces[p.Namespace]
		inNS = ok && s.namespace.Matches(labels.Set(nsLabels))
	}
	return inNS && s.pod.Matches(labels.Set(p.Labels))
}

// match tells whether one of the selectors selects Pod p.
func (l peerSelectorList) match(p *PodInfo, namespaces map[string]map[string]string) bool {
	return slices.ContainsFunc(l, func(s peerSelector) bool { return s.matches(p, namespaces) })
}

// exceptBlock is an ipBlock with exceptions: its CIDR and the exceptions inside it.
type exceptBlock struct {
	cidr    netip.Prefix
	excepts []netip.Prefix
}

// parseIPBlock reads an ipBlock (IPv4 only: the pipeline is IPv4 for now): a plain prefix when no
// exception takes anything from the CIDR, or the CIDR with its exceptions; ok is false when it
// admits nothing (an unreadable or IPv6 CIDR, an exception covering the whole CIDR). Exceptions
// outside the CIDR take nothing from it and are left out; an unreadable or IPv6 exception is left
// out too (the API server rejects both).
func parseIPBlock(b *networkingv1.IPBlock) (plain netip.Prefix, ex *exceptBlock, ok bool) {
	cidr, err := netip.ParsePrefix(b.CIDR)
	if err != nil || !cidr.Addr().Is4() {
		return netip.Prefix{}, nil, false
	}
	cidr = cidr.Masked()
	var excepts []netip.Prefix
	for _, e := range b.Except {
		p, err := netip.ParsePrefix(e)
		if err != nil || !p.Addr().Is4() {
			continue
		}
		p = p.Masked()
		switch {
		case !cidr.Overlaps(p):
		case p.Bits() <= cidr.Bits():
			return netip.Prefix{}, nil, false // the exception covers the whole CIDR
		default:
			excepts = append(excepts, p)
		}
	}
	if len(excepts) == 0 {
		return cidr, nil, true
	}
	return netip.Prefix{}, &exceptBlock{cidr: cidr, excepts: uniquePrefixes(excepts)}, true
}

// countExcepts is the number of ipBlock exceptions of a rule's peers, as written.
func countExcepts(peers []networkingv1.NetworkPolicyPeer) int {
	n := 0
	for _, p := range peers {
		if p.IPBlock != nil {
			n += len(p.IPBlock.Except)
		}
	}
	return n
}

// refusal says why a rule is refused.
func refusal(dir string, index, excepts int) string {
	return fmt.Sprintf("%s rule %d: %d ipBlock exceptions, above the limit of %d per rule; the rule admits nothing", dir, index+1, excepts, MaxExceptsPerRule)
}

// assignClasses builds the peer class stage of one direction and gives each rule of that direction
// its Classes. The stage's prefixes P are every distinct CIDR and exception of the direction's
// ipBlocks with exceptions; an address's class is its longest matching prefix in P (0: none).
// Prefixes nest or are disjoint, so an address is in a CIDR c (or an exception e) of P exactly when
// its class is c or a prefix inside c: a rule admits the classes inside one of its CIDRs and inside
// none of that CIDR's exceptions. Sorted by address then length, P lists every prefix right before
// the prefixes inside it (its subtree), so a block's classes are one walk over its CIDR's subtree
// that jumps over the subtrees of its exceptions: linear in what the block covers.
func assignClasses(dir pipeline.PolicyDirection, rules []compiledRule, ids IDs) []pipeline.PeerClass {
	var all []netip.Prefix
	for _, r := range rules {
		if r.Direction != dir {
			continue
		}
		for _, b := range r.excepts {
			all = append(all, b.cidr)
			all = append(all, b.excepts...)
		}
	}
	if len(all) == 0 {
		return nil
	}
	all = uniquePrefixes(all) // by address, then length: pre-order of the nesting
	index := make(map[netip.Prefix]int, len(all))
	for i, p := range all {
		index[p] = i
	}
	// end[i] is the index after the last prefix inside all[i].
	end := make([]int, len(all))
	var stack []int
	for i, p := range all {
		for len(stack) > 0 && !all[stack[len(stack)-1]].Contains(p.Addr()) {
			end[stack[len(stack)-1]] = i
			stack = stack[:len(stack)-1]
		}
		stack = append(stack, i)
	}
	for _, j := range stack {
		end[j] = len(all)
	}
	classes := make([]pipeline.PeerClass, len(all))
	for i, p := range all {
		classes[i] = pipeline.PeerClass{Prefix: p, ID: ids.ClassID(dir, p)}
	}
	skip := map[int]bool{}
	for ri := range rules {
		r := &rules[ri]
		if r.Direction != dir || len(r.excepts) == 0 {
			continue
		}
		seen := map[int]bool{}
		for _, b := range r.excepts {
			clear(skip)
			for _, e := range b.excepts {
				skip[index[e]] = true
			}
			c := index[b.cidr]
			for i := c; i < end[c]; {
				if skip[i] {
					i = end[i]
					continue
				}
				if !seen[i] {
					seen[i] = true
					r.Classes = append(r.Classes, classes[i].ID)
				}
				i++
			}
		}
		slices.Sort(r.Classes)
	}
	return classes
}

func hostPrefixes(ips []netip.Addr) []netip.Prefix {
	var out []netip.Prefix
	for _, ip := range ips {
		if ip.Is4() {
			out = append(out, netip.PrefixFrom(ip, 32))
		}
	}
	return out
}

// uniquePrefixes sorts ps by address, then length, in place and drops the repeated ones.
func uniquePrefixes(ps []netip.Prefix) []netip.Prefix {
	// IPv4 prefixes (all of them, as the pipeline is IPv4 for now) sort as integers, several times
	// faster than comparing netip values: 5,000 ipBlocks are sorted on every pass.
	keys := make([]uint64, 0, len(ps))
	for _, p := range ps {
		if !p.Addr().Is4() {
			keys = nil
			break
		}
		a := p.Addr().As4()
		keys = append(keys, uint64(binary.BigEndian.Uint32(a[:]))<<8|uint64(p.Bits()))
	}
	if keys == nil && len(ps) > 0 {
		slices.SortFunc(ps, func(a, b netip.Prefix) int {
			if c := a.Addr().Compare(b.Addr()); c != 0 {
				return c
			}
			return a.Bits() - b.Bits()
		})
		return slices.Compact(ps)
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	ps = ps[:len(keys)]
	for i, k := range keys {
		var a [4]byte
		binary.BigEndian.PutUint32(a[:], uint32(k>>8))
		ps[i] = netip.PrefixFrom(netip.AddrFrom4(a), int(k&0xff))
	}
	return ps
}

// setPort adds port to the set m (made when nil).
func setPort(m map[uint32]bool, port uint32) map[uint32]bool {
	if m == nil {
		m = map[uint32]bool{}
	}
	m[port] = true
	return m
}

func sortedPods(m map[uint32]pipeline.Pod) []pipeline.Pod {
	var out []pipeline.Pod
	for _, p := range m {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b pipeline.Pod) int { return int(a.OFPort) - int(b.OFPort) })
	return out
}

// podInfo extracts what policy needs of a Pod; ok is false for Pods that take no part (host
// network, finished, or without an IPv4 address).
func podInfo(p *corev1.Pod) (PodInfo, bool) {
	if p.Spec.HostNetwork || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return PodInfo{}, false
	}
	info := PodInfo{Namespace: p.Namespace, Name: p.Name, Labels: p.Labels}
	for _, ip := range p.Status.PodIPs {
		if a, err := netip.ParseAddr(ip.IP); err == nil && a.Is4() {
			info.IPs = append(info.IPs, a)
		}
	}
	for _, c := range p.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.Name == "" {
				continue
			}
			proto := cp.Protocol
			if proto == "" {
				proto = corev1.ProtocolTCP
			}
			info.Ports = append(info.Ports, NamedPort{Name: cp.Name, Protocol: proto, Port: uint16(cp.ContainerPort)})
		}
	}
	return info, true
}

// String renders a RuleKey for logs.
func (k RuleKey) String() string {
	dir := "ingress"
	if k.Direction == pipeline.PolicyEgress {
		dir = "egress"
	}
	return string(k.Policy) + "/" + dir + "/" + strconv.Itoa(k.Index) + "/" + k.Ports
}
