package networkpolicy

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	cnpv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/winnet-io/winnet/controllers/nodenetwork"
	"github.com/winnet-io/winnet/internal/auditlog"
	"github.com/winnet-io/winnet/internal/cnpstatus"
	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/internal/pipeline"
)

// ClusterDesired is what the node realises of the ClusterNetworkPolicies (policy.networking.k8s.io
// v1beta1, the Admin and Baseline tiers).
type ClusterDesired struct {
	Policy pipeline.ClusterPolicy
	// Policies counts the ClusterNetworkPolicies with a rule on a local Pod, Rules those rules.
	Policies, Rules int
	// Unsupported holds, per policy name, what of it winnet does not realise as written and how it
	// is treated instead (ComputeCluster); Refused its rules beyond the tier's priority band or
	// the part limit.
	Unsupported, Refused map[string][]string
	// Generations are the generations compiled, by policy name.
	Generations map[string]int64
	// Applied names the policies whose subject selects a Pod of this node: the node reports what
	// it does not realise of those only (Report).
	Applied map[string]bool
	// Index names every rule given a priority, local subjects or not, by its cookie object
	// (pipeline.ClusterRuleObject): PolicyIndex.ClusterRules. The rules beyond a band share
	// pipeline.ClusterPriorityBeyondBand: the first of them names it.
	Index map[uint64]nodenetwork.PolicyRuleName
	// AuditInvalid names the policies with local subjects whose AuditLogAnnotation is neither
	// "true" nor "false" (their rules are not audited), when the agent audits (Inputs.Audit).
	AuditInvalid []string
}

// clusterRulesPerBand is how many rules of one tier and direction have a priority of their own.
const clusterRulesPerBand = int(pipeline.ClusterPriorityHighest-pipeline.ClusterPriorityLowest) + 1

// ComputeCluster compiles the ClusterNetworkPolicies for the node's Pods. In each tier, policies
// are ordered by spec.priority (lower first) and, at equal priority, by name (the API leaves the
// order of equal priorities to the implementation: winnet makes it deterministic), and their rules
// in the order written; each rule of a tier and direction gets the next OVS priority down from
// pipeline.ClusterPriorityHighest, whether or not it has subjects on this node, so that every node
// orders the same rules the same way.
//
// What cannot be realised as written fails closed, never wider than the rule's subjects: a Deny
// or Pass rule (or a rule whose action winnet does not know) drops a superset of what it matches
// instead (a Pass widened would hand on what the later Admin rules deny, and passing or ignoring
// what the administrator denied would admit it); an Accept rule
// accepts a subset or nothing (what it does not accept goes on to the later rules and tiers, which
// admit no more than the Accept would have). In a Deny or Pass rule, a protocol entry winnet does
// not know (or an invalid port) makes the rule drop every port of its peers, and a peer it cannot
// resolve (no field it knows, a domainNames peer, a nodes peer whose Nodes are not listed) every
// peer; a rule whose named ports resolve to more than pipeline.MaxClusterSubRules sets of ports
// drops every port of its peers; an unknown action drops. Rules beyond a band
// (clusterRulesPerBand) cannot have a priority of their own: a Deny or Pass rule drops every peer
// and port of its subjects at pipeline.ClusterPriorityBeyondBand, below the band (whose rules the
// API orders first) and above the next tier (which it precedes). A policy of a tier winnet does not
// know has its Deny and Pass rules drop ahead of every Admin rule: it is ordered before the Admin
// tier's policies in the Admin tables, the earliest place there is. Every such rule is said in
// Unsupported or Refused, with how it is treated.
func ComputeCluster(policies []cnpv1beta1.ClusterNetworkPolicy, in Inputs) ClusterDesired {
	d := ClusterDesired{Unsupported: map[string][]string{}, Refused: map[string][]string{}, Generations: map[string]int64{},
		Applied: map[string]bool{}, Index: map[uint64]nodenetwork.PolicyRuleName{}}
	sorted := make([]*cnpv1beta1.ClusterNetworkPolicy, 0, len(policies))
	for i := range policies {
		sorted = append(sorted, &policies[i])
	}
	// A tier winnet does not know goes first: its rules are realised in the Admin tables, ahead of
	// the Admin tier's own.
	known := func(p *cnpv1beta1.ClusterNetworkPolicy) int {
		if _, ok := clusterTier(p.Spec.Tier); ok {
			return 1
		}
		return 0
	}
	slices.SortFunc(sorted, func(a, b *cnpv1beta1.ClusterNetworkPolicy) int {
		return cmp.Or(cmp.Compare(known(a), known(b)), cmp.Compare(a.Spec.Priority, b.Spec.Priority), cmp.Compare(a.Name, b.Name))
	})
	infos := map[string]*PodInfo{}
	for i := range in.Pods {
		infos[in.Pods[i].Namespace+"/"+in.Pods[i].Name] = &in.Pods[i]
	}
	type band struct {
		tier pipeline.ClusterTier
		dir  pipeline.PolicyDirection
	}
	used := map[band]int{}
	for _, p := range sorted {
		d.Generations[p.Name] = p.Generation
		unsupported := func(s string) { d.Unsupported[p.Name] = append(d.Unsupported[p.Name], s) }
		refused := func(s string) { d.Refused[p.Name] = append(d.Refused[p.Name], s) }
		tier, tierKnown := clusterTier(p.Spec.Tier)
		if !tierKnown {
			tier = pipeline.AdminTier
			unsupported(fmt.Sprintf("tier %q is unknown: its Deny and Pass rules drop instead, ahead of every Admin rule (fail closed); its Accept rules are not realised", p.Spec.Tier))
		}
		subjects, why := clusterSubjects(p.Spec.Subject, in, infos)
		if why != "" {
			unsupported(why)
		}
		// A subject the node cannot read may select its Pods: the policy is reported as applying.
		if len(subjects) > 0 || why != "" {
			d.Applied[p.Name] = true
		}
		local := false
		audit, auditValid := auditValue(p.Annotations)
		audit = audit && in.Audit && !in.AuditSuspended[auditlog.ClusterPolicyOwner(p.Name)]
		rule := func(dir pipeline.PolicyDirection, index int, action cnpv1beta1.ClusterNetworkPolicyRuleAction, peers []cnpv1beta1.ClusterNetworkPolicyEgressPeer, protocols []cnpv1beta1.ClusterNetworkPolicyProtocol) {
			b := band{tier, dir}
			n := used[b]
			used[b]++
			name := fmt.Sprintf("%s rule %d", dirName(dir), index)
			act, actionKnown := clusterAction(action)
			accept := actionKnown && act == pipeline.ClusterAccept
			if !actionKnown {
				unsupported(fmt.Sprintf("%s: action %q is unknown: it drops instead (fail closed)", name, action))
			}
			if accept && !tierKnown {
				return // said once for the policy
			}
			closed := !actionKnown || !tierKnown
			beyond := n >= clusterRulesPerBand
			priority := pipeline.ClusterPriorityBeyondBand
			switch {
			case beyond && accept:
				refused(fmt.Sprintf("%s: beyond the %d rules of the %s tier's %s priority band: not realised", name, clusterRulesPerBand, p.Spec.Tier, dirName(dir)))
				return
			case beyond:
				refused(fmt.Sprintf("%s: beyond the %d rules of the %s tier's %s priority band: its subjects' traffic to and from every peer, on every port, is dropped instead, below the band (fail closed)",
					name, clusterRulesPerBand, p.Spec.Tier, dirName(dir)))
				closed = true
			default:
				priority = pipeline.ClusterPriorityHighest - uint16(n)
			}
			ruleName := func(closed bool) nodenetwork.PolicyRuleName {
				n := nodenetwork.PolicyRuleName{Kind: nodenetwork.KindClusterNetworkPolicy, Policy: types.NamespacedName{Name: p.Name},
					Egress: dir == pipeline.PolicyEgress, Index: index, Action: string(action), Tier: string(p.Spec.Tier)}
				if closed {
					n.Action, n.FailClosed = nodenetwork.ActionDeny, true
				}
				return n
			}
			obj := pipeline.ClusterRuleObject(tier, dir, priority)
			if _, named := d.Index[obj]; !named || !beyond {
				d.Index[obj] = ruleName(closed)
			}
			if closed {
				act = pipeline.ClusterDeny
			}
			base := pipeline.ClusterRule{Tier: tier, Direction: dir, Action: act, Priority: priority, Audit: audit}
			if beyond {
				if len(subjects) > 0 {
					r := base
					r.Pods, r.AnyPeer = clusterSubjectPods(subjects), true
					d.Policy.Rules = append(d.Policy.Rules, r)
					d.Rules++
					local = true
				}
				return
			}
			anyPeer, networks, peerPods, notes := clusterPeers(peers, !accept, in)
			ports, names, none, everyPort, portNotes := clusterPorts(protocols, !accept)
			for _, s := range append(notes, portNotes...) {
				unsupported(name + ": " + s)
			}
			if (anyPeer || everyPort) && !closed {
				// Widened: a Pass would hand on, past the later Admin rules, what it does not match.
				base.Action = pipeline.ClusterDeny
				d.Index[obj] = ruleName(true)
			}
			if none || len(subjects) == 0 {
				return // it matches nothing here
			}
			parts := clusterRuleParts(base, subjects, anyPeer, networks, peerPods, ports, names, in)
			if len(parts) > pipeline.MaxClusterSubRules {
				if accept {
					refused(fmt.Sprintf("%s: its named ports resolve to %d sets of ports, above %d: not realised", name, len(parts), pipeline.MaxClusterSubRules))
					return
				}
				refused(fmt.Sprintf("%s: its named ports resolve to %d sets of ports, above %d: every port of its peers is dropped instead (fail closed)",
					name, len(parts), pipeline.MaxClusterSubRules))
				base.Action = pipeline.ClusterDeny
				d.Index[obj] = ruleName(true)
				parts = clusterRuleParts(base, subjects, anyPeer, networks, peerPods, nil, nil, in)
			}
			if len(parts) == 0 {
				return
			}
			d.Policy.Rules = append(d.Policy.Rules, parts...)
			d.Rules++
			local = true
		}
		for i, ing := range p.Spec.Ingress {
			peers := make([]cnpv1beta1.ClusterNetworkPolicyEgressPeer, len(ing.From))
			for j, f := range ing.From {
				peers[j] = cnpv1beta1.ClusterNetworkPolicyEgressPeer{Namespaces: f.Namespaces, Pods: f.Pods}
			}
			rule(pipeline.PolicyIngress, i, ing.Action, peers, ing.Protocols)
		}
		for i, e := range p.Spec.Egress {
			rule(pipeline.PolicyEgress, i, e.Action, e.To, e.Protocols)
		}
		if local {
			d.Policies++
			if in.Audit && !auditValid {
				d.AuditInvalid = append(d.AuditInvalid, p.Name)
			}
		}
	}
	for k, v := range d.Unsupported {
		d.Unsupported[k] = slices.Compact(v)
	}
	return d
}

func dirName(dir pipeline.PolicyDirection) string {
	if dir == pipeline.PolicyEgress {
		return "egress"
	}
	return "ingress"
}

func clusterTier(t cnpv1beta1.Tier) (pipeline.ClusterTier, bool) {
	switch t {
	case cnpv1beta1.AdminTier:
		return pipeline.AdminTier, true
	case cnpv1beta1.BaselineTier:
		return pipeline.BaselineTier, true
	}
	return 0, false
}

func clusterAction(a cnpv1beta1.ClusterNetworkPolicyRuleAction) (pipeline.ClusterAction, bool) {
	switch a {
	case cnpv1beta1.ClusterNetworkPolicyRuleActionAccept:
		return pipeline.ClusterAccept, true
	case cnpv1beta1.ClusterNetworkPolicyRuleActionDeny:
		return pipeline.ClusterDeny, true
	case cnpv1beta1.ClusterNetworkPolicyRuleActionPass:
		return pipeline.ClusterPass, true
	}
	return 0, false
}

// clusterSubject is a local Pod a subject selects, and what policy knows of it.
type clusterSubject struct {
	pod  pipeline.Pod
	info *PodInfo
}

// clusterSubjects are the local Pods the subject selects (host-network Pods never: they have no
// attachment), sorted by port; why says what is wrong with a subject that selects nothing.
func clusterSubjects(s cnpv1beta1.ClusterNetworkPolicySubject, in Inputs, infos map[string]*PodInfo) ([]clusterSubject, string) {
	var sel peerSelector
	switch {
	case s.Namespaces != nil:
		ns, err := metav1.LabelSelectorAsSelector(s.Namespaces)
		if err != nil {
			return nil, fmt.Sprintf("subject namespaces selector: %v: it selects nothing", err)
		}
		sel = peerSelector{pod: labels.Everything(), namespace: ns}
	case s.Pods != nil:
		var ok bool
		if sel, ok = namespacedPodSelector(s.Pods); !ok {
			return nil, "subject pods selector does not parse: it selects nothing"
		}
	default:
		return nil, "subject has no field winnet knows (a newer API than v0.3.0?): it selects nothing"
	}
	byPort := map[uint32]clusterSubject{}
	for _, l := range in.Local {
		info := infos[l.Key.Namespace+"/"+l.Key.Name]
		if info != nil && sel.matches(info, in.Namespaces) {
			byPort[l.Pod.OFPort] = clusterSubject{pod: l.Pod, info: info}
		}
	}
	out := make([]clusterSubject, 0, len(byPort))
	for _, c := range byPort {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b clusterSubject) int { return cmp.Compare(a.pod.OFPort, b.pod.OFPort) })
	return out, ""
}

func namespacedPodSelector(p *cnpv1beta1.NamespacedPod) (peerSelector, bool) {
	ns, err := metav1.LabelSelectorAsSelector(&p.NamespaceSelector)
	if err != nil {
		return peerSelector{}, false
	}
	pod, err := metav1.LabelSelectorAsSelector(&p.PodSelector)
	if err != nil {
		return peerSelector{}, false
	}
	return peerSelector{pod: pod, namespace: ns}, true
}

// clusterPeerAsNetworkPolicyPeer is the NetworkPolicy peer that selects the same Pods as a
// ClusterNetworkPolicy namespaces or pods peer (always with a namespaceSelector, so never the
// policy's own namespace), so that the peer watches and the namespace reads serve both kinds; ok is
// false for the other peer kinds.
func clusterPeerAsNetworkPolicyPeer(p cnpv1beta1.ClusterNetworkPolicyEgressPeer) (networkingv1.NetworkPolicyPeer, bool) {
	switch {
	case p.Namespaces != nil:
		return networkingv1.NetworkPolicyPeer{NamespaceSelector: p.Namespaces}, true
	case p.Pods != nil:
		return networkingv1.NetworkPolicyPeer{NamespaceSelector: &p.Pods.NamespaceSelector, PodSelector: &p.Pods.PodSelector}, true
	}
	return networkingv1.NetworkPolicyPeer{}, false
}

// clusterPeers resolves a rule's peers to addresses. Namespaces and pods peers are the addresses
// of the Pods they select; networks are their CIDRs (IPv6 ones match nothing on this IPv4
// pipeline and are left out without a note: that is their meaning here); nodes are the addresses
// of the Nodes selected (nodes.go). A peer winnet cannot resolve (no field winnet knows, a
// domainNames peer, a network that is no CIDR, a nodes peer whose Nodes are not listed) fails
// closed: it matches nothing in an Accept rule, every peer in the others (failClosed), and a note
// says so.
func clusterPeers(peers []cnpv1beta1.ClusterNetworkPolicyEgressPeer, failClosed bool, in Inputs) (anyPeer bool, out []netip.Prefix, pods []*PodInfo, notes []string) {
	var selectors []networkingv1.NetworkPolicyPeer
	unresolved := func(i int, why string) {
		if failClosed {
			notes = append(notes, fmt.Sprintf("peer %d: %s: every peer is dropped instead (fail closed)", i, why))
			anyPeer = true
			return
		}
		notes = append(notes, fmt.Sprintf("peer %d: %s: it matches nothing (fail closed)", i, why))
	}
	for i, p := range peers {
		if np, ok := clusterPeerAsNetworkPolicyPeer(p); ok {
			selectors = append(selectors, np)
			continue
		}
		switch {
		case len(p.Networks) > 0:
			for _, c := range p.Networks {
				prefix, err := netip.ParsePrefix(string(c))
				if err != nil {
					unresolved(i, fmt.Sprintf("network %q is no CIDR", c))
					continue
				}
				if prefix.Addr().Is4() {
					out = append(out, prefix.Masked())
				}
			}
		case p.Nodes != nil:
			addrs, err := nodePeer(p.Nodes, in.NodePeers)
			if err != nil {
				unresolved(i, err.Error())
			}
			for _, a := range addrs {
				out = append(out, netip.PrefixFrom(a, 32))
			}
		case len(p.DomainNames) > 0:
			unresolved(i, "domainNames peers are not realised (winnet resolves no DNS in the datapath)")
		default:
			unresolved(i, "no field winnet knows")
		}
	}
	if len(selectors) > 0 {
		pods = resolvePeers("", selectors, in).pods
	}
	return anyPeer, uniquePrefixes(out), pods, notes
}

// clusterSubjectPods are the subjects' Pods.
func clusterSubjectPods(ss []clusterSubject) []pipeline.Pod {
	out := make([]pipeline.Pod, len(ss))
	for i, s := range ss {
		out[i] = s.pod
	}
	return out
}

// clusterRuleParts are the parts of one rule (ClusterRule.Sub): without named ports, one, whose
// peers are the networks and the peer Pods' addresses. With named ports, a name resolves on the
// Pod that serves it (as for NetworkPolicy): for ingress on the subjects, so the subjects are
// grouped by the ports their names resolve to, one part per group; for egress on the peer Pods
// (every Pod of the cluster for a rule that matches every peer), one part per group of peers, and
// the networks (which have no named ports; the API refuses the combination) keep the numbered
// ports alone. A part left with no port matches nothing and is left out.
func clusterRuleParts(base pipeline.ClusterRule, subjects []clusterSubject, anyPeer bool, networks []netip.Prefix, peerPods []*PodInfo, ports []pipeline.PolicyPort, names []string, in Inputs) []pipeline.ClusterRule {
	subjectPods := clusterSubjectPods
	podAddrs := func(pods []*PodInfo) []netip.Prefix {
		var out []netip.Prefix
		for _, p := range pods {
			out = append(out, hostPrefixes(p.IPs)...)
		}
		return out
	}
	if len(names) == 0 {
		r := base
		r.Pods, r.AnyPeer, r.Peers, r.Ports = subjectPods(subjects), anyPeer, uniquePrefixes(append(slices.Clip(networks), podAddrs(peerPods)...)), ports
		if !r.AnyPeer && len(r.Peers) == 0 {
			return nil
		}
		return []pipeline.ClusterRule{r}
	}
	var out []pipeline.ClusterRule
	addPart := func(r pipeline.ClusterRule) {
		if len(r.Ports) == 0 || (!r.AnyPeer && len(r.Peers) == 0) {
			return
		}
		r.Sub = uint16(len(out))
		out = append(out, r)
	}
	if base.Direction == pipeline.PolicyIngress {
		peers := uniquePrefixes(append(slices.Clip(networks), podAddrs(peerPods)...))
		keys, groups, resolved := groupByPorts(subjects, ports, names, func(s clusterSubject) *PodInfo { return s.info })
		for _, k := range keys {
			r := base
			r.Pods, r.AnyPeer, r.Peers, r.Ports = subjectPods(groups[k]), anyPeer, peers, resolved[k]
			addPart(r)
		}
		return out
	}
	targets := peerPods
	if anyPeer {
		targets = nil
		for i := range in.Pods {
			targets = append(targets, &in.Pods[i])
		}
	}
	pods := subjectPods(subjects)
	keys, groups, resolved := groupByPorts(targets, ports, names, func(t *PodInfo) *PodInfo { return t })
	for _, k := range keys {
		r := base
		r.Pods, r.Peers, r.Ports = pods, uniquePrefixes(podAddrs(groups[k])), resolved[k]
		addPart(r)
	}
	if len(networks) > 0 {
		r := base
		r.Pods, r.Peers, r.Ports = pods, networks, ports
		addPart(r)
	}
	return out
}

// resolveNames are the TCP and UDP ports the Pod serves under the names (SCTP ones are not
// realised, see clusterPorts).
// groupByPorts groups items by the ports a rule's numbered ports and its named ports resolve to on
// each item's Pod: the groups' keys in order, the items of each, and each group's ports.
func groupByPorts[T any](items []T, ports []pipeline.PolicyPort, names []string, pod func(T) *PodInfo) ([]string, map[string][]T, map[string][]pipeline.PolicyPort) {
	var keys []string
	groups, resolved := map[string][]T{}, map[string][]pipeline.PolicyPort{}
	for _, it := range items {
		ps := append(slices.Clip(ports), resolveNames(names, pod(it))...)
		k := portsKey(ps)
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
			resolved[k] = ps
		}
		groups[k] = append(groups[k], it)
	}
	slices.Sort(keys)
	return keys, groups, resolved
}

func resolveNames(names []string, p *PodInfo) []pipeline.PolicyPort {
	var out []pipeline.PolicyPort
	if p == nil {
		return nil
	}
	for _, np := range p.Ports {
		if proto, ok := protocols[np.Protocol]; ok && slices.Contains(names, np.Name) {
			out = append(out, pipeline.PolicyPort{Protocol: proto, Port: np.Port})
		}
	}
	return out
}

// portsKey identifies a set of ports, in any order.
func portsKey(ps []pipeline.PolicyPort) string {
	keys := make([]string, len(ps))
	for i, p := range ps {
		keys[i] = portSortKey(p)
	}
	slices.Sort(keys)
	return strings.Join(slices.Compact(keys), ",")
}

// clusterPorts compiles a rule's protocols: none is every port of every protocol; TCP and UDP
// with a port number or range are realised; destinationNamedPort names are returned to resolve on
// the Pods (clusterRuleParts); SCTP is not realised (the Windows datapath's conntrack drops it, so
// winnet drops SCTP from Pods anyway). An entry winnet cannot realise otherwise (no field it
// knows, an invalid port) fails closed: in an Accept rule it matches nothing; in the others
// (failClosed) the rule matches every port of its peers (everyPort; ports and names nil). none is
// true when the rule names protocols and none of them is realised: the rule then matches nothing.
func clusterPorts(protocols []cnpv1beta1.ClusterNetworkPolicyProtocol, failClosed bool) (ports []pipeline.PolicyPort, names []string, none, everyPort bool, notes []string) {
	unrealised := func(i int, why string) {
		if failClosed {
			notes = append(notes, fmt.Sprintf("protocol %d: %s: every port of its peers is dropped instead (fail closed)", i, why))
			everyPort = true
			return
		}
		notes = append(notes, fmt.Sprintf("protocol %d: %s: it matches nothing (fail closed)", i, why))
	}
	for i, p := range protocols {
		var proto uint8
		var port *cnpv1beta1.Port
		switch {
		case p.TCP != nil:
			proto, port = openflow.ProtoTCP, p.TCP.DestinationPort
		case p.UDP != nil:
			proto, port = openflow.ProtoUDP, p.UDP.DestinationPort
		case p.SCTP != nil:
			notes = append(notes, fmt.Sprintf("protocol %d: SCTP is not realised (the Windows datapath drops SCTP): it matches nothing", i))
			continue
		case p.DestinationNamedPort != "":
			names = append(names, p.DestinationNamedPort)
			continue
		default:
			unrealised(i, "no field winnet knows")
			continue
		}
		pp := pipeline.PolicyPort{Protocol: proto}
		switch {
		case port == nil:
		case port.Range != nil:
			if port.Range.Start < 1 || port.Range.End > 65535 || port.Range.Start > port.Range.End {
				unrealised(i, fmt.Sprintf("range %d-%d is invalid", port.Range.Start, port.Range.End))
				continue
			}
			pp.Port, pp.EndPort = uint16(port.Range.Start), uint16(port.Range.End)
		case port.Number >= 1 && port.Number <= 65535:
			pp.Port = uint16(port.Number)
		default:
			unrealised(i, fmt.Sprintf("port %d is invalid", port.Number))
			continue
		}
		ports = append(ports, pp)
	}
	if everyPort {
		return nil, nil, false, true, notes
	}
	return ports, names, len(protocols) > 0 && len(ports) == 0 && len(names) == 0, false, notes
}

// clusterPeersAsNetworkPolicy is a NetworkPolicy that names, as ingress peers, the Pods the
// ClusterNetworkPolicies' peers select, and as peers too their subjects' namespace selectors: what
// peerWatchKeys and readNamespaces read of it is what the ClusterNetworkPolicies need (the Pod
// watches of their peers, the namespace labels their selectors read).
func clusterPeersAsNetworkPolicy(policies []cnpv1beta1.ClusterNetworkPolicy, withSubjects bool) networkingv1.NetworkPolicy {
	var rule networkingv1.NetworkPolicyIngressRule
	add := func(p cnpv1beta1.ClusterNetworkPolicyEgressPeer) {
		if np, ok := clusterPeerAsNetworkPolicyPeer(p); ok {
			rule.From = append(rule.From, np)
		}
	}
	for i := range policies {
		spec := &policies[i].Spec
		for _, r := range spec.Ingress {
			for _, f := range r.From {
				add(cnpv1beta1.ClusterNetworkPolicyEgressPeer{Namespaces: f.Namespaces, Pods: f.Pods})
			}
		}
		for _, r := range spec.Egress {
			for _, t := range r.To {
				add(t)
			}
		}
		if withSubjects {
			// Subjects are local Pods (the manager's cache): only their namespaces' labels matter,
			// through a selector of Pods no Pod has, which opens no watch.
			none := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "winnet.io/none", Operator: metav1.LabelSelectorOpExists}}}
			switch {
			case spec.Subject.Namespaces != nil:
				rule.From = append(rule.From, networkingv1.NetworkPolicyPeer{NamespaceSelector: spec.Subject.Namespaces, PodSelector: none})
			case spec.Subject.Pods != nil:
				rule.From = append(rule.From, networkingv1.NetworkPolicyPeer{NamespaceSelector: &spec.Subject.Pods.NamespaceSelector, PodSelector: none})
			}
		}
	}
	return networkingv1.NetworkPolicy{Spec: networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{rule}}}
}

// withClusterPeers is policies and, when there are ClusterNetworkPolicies, the NetworkPolicy that
// stands for their peers (clusterPeersAsNetworkPolicy).
func withClusterPeers(policies []networkingv1.NetworkPolicy, cluster []cnpv1beta1.ClusterNetworkPolicy, withSubjects bool) []networkingv1.NetworkPolicy {
	if len(cluster) == 0 {
		return policies
	}
	return append(slices.Clip(policies), clusterPeersAsNetworkPolicy(cluster, withSubjects))
}

// ClusterUnsupportedReason is the reason of the Warning Event on a ClusterNetworkPolicy with parts
// winnet does not realise (the Event says how each is treated instead).
const ClusterUnsupportedReason = "NotRealised"

// maxEventNote is the longest note of an events.k8s.io/v1 Event (the API refuses longer ones).
const maxEventNote = 1024

// warnCluster emits one Warning Event per ClusterNetworkPolicy generation and reason for what of
// it is not realised (ClusterUnsupportedReason) or refused (RuleRefusedReason), from the nodes
// where it applies (ClusterDesired.Applied), as its Realised condition names them. The note is
// cut to what the API takes; the condition has the whole of it.
func (r *Reconciler) warnCluster(ctx context.Context, policies []cnpv1beta1.ClusterNetworkPolicy, d ClusterDesired) {
	if r.warned == nil {
		r.warned = map[warnKey]int64{}
	}
	for i := range policies {
		p := &policies[i]
		if !d.Applied[p.Name] {
			continue
		}
		for reason, parts := range map[string][]string{ClusterUnsupportedReason: d.Unsupported[p.Name], RuleRefusedReason: d.Refused[p.Name]} {
			k := warnKey{p.UID, "cnp/" + reason}
			if len(parts) == 0 || r.warned[k] == p.Generation {
				continue
			}
			r.warned[k] = p.Generation
			ctrl.LoggerFrom(ctx).Info("ClusterNetworkPolicy is not realised whole", "clusterNetworkPolicy", p.Name, "reason", reason, "parts", parts)
			if r.Recorder != nil {
				note := cnpstatus.Cut(fmt.Sprintf("On node %s: %s", r.NodeName, strings.Join(parts, "; ")), maxEventNote)
				r.Recorder.Eventf(p, nil, corev1.EventTypeWarning, reason, "Realise", "%s", note)
			}
		}
	}
}

// clusterPass is what an incremental pass compiled of the ClusterNetworkPolicies.
type clusterPass struct {
	in      Inputs
	desired ClusterDesired
	objects map[uint64][]openflow.Flow
	// changed are the rules' objects whose flows changed (nil: gone), for SyncObjects.
	changed map[uint64][]openflow.Flow
}

// applyClusterPods recompiles the ClusterNetworkPolicies of the last pass with the changed Pods'
// current state (remote Pods only: a local Pod's change takes the full pass) and returns the rules
// whose flows changed, each a cookie object of its own (pipeline.ClusterRuleObject): a peer Pod's
// change sends only the flows of the rules it joins or leaves, in the incremental pass's bundle.
// Compiling them again costs what ComputeCluster costs; the NetworkPolicies are not recompiled.
func (r *Reconciler) applyClusterPods(rz nodenetwork.Realized, pods map[types.NamespacedName]bool) *clusterPass {
	in := r.clusterIn
	in.Pods = make([]PodInfo, 0, len(r.clusterIn.Pods)+len(pods))
	for _, p := range r.clusterIn.Pods {
		if !pods[types.NamespacedName{Namespace: p.Namespace, Name: p.Name}] {
			in.Pods = append(in.Pods, p)
		}
	}
	for key := range pods {
		if pod := r.Peers.get(key); pod != nil {
			if info, ok := podInfo(pod); ok {
				in.Pods = append(in.Pods, info)
			}
		}
	}
	d := ComputeCluster(in.ClusterPolicies, in)
	flows := rz.Node.ClusterPolicyFlows(d.Policy)
	now := byObject(flows)
	changed := map[uint64][]openflow.Flow{}
	for obj := range r.clusterObjs {
		if _, ok := now[obj]; !ok {
			changed[obj] = nil
		}
	}
	for obj, fs := range now {
		if !sameFlows(r.clusterObjs[obj], fs) {
			changed[obj] = fs
		}
	}
	return &clusterPass{in: in, desired: d, objects: now, changed: changed}
}

// clusterCommitted records an incremental pass's ClusterNetworkPolicy flows as realised, and the
// rules packet traces report when they changed (a rule whose peers were none has flows now).
func (r *Reconciler) clusterCommitted(c *clusterPass) {
	r.clusterIn, r.clusterLast, r.clusterObjs = c.in, c.desired, c.objects
	idx := r.State.PolicyIndex()
	if rules := c.desired.Policy.TraceRules(); !reflect.DeepEqual(rules, idx.ClusterTraceRules) {
		idx.ClusterTraceRules = rules
		r.State.SetPolicyIndex(idx)
	}
}

// byObject groups flows by their cookie object.
func byObject(flows []openflow.Flow) map[uint64][]openflow.Flow {
	out := map[uint64][]openflow.Flow{}
	for _, f := range flows {
		obj := f.Cookie & openflow.ObjectMask
		out[obj] = append(out[obj], f)
	}
	return out
}

func sameFlows(a, b []openflow.Flow) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].String() != b[i].String() {
			return false
		}
	}
	return true
}

// nodePeer returns the addresses of the Nodes a nodes peer selects, or why it matches nothing.
func nodePeer(sel *metav1.LabelSelector, nodes map[string][]netip.Addr) ([]netip.Addr, error) {
	if nodes == nil {
		return nil, fmt.Errorf("nodes peers are not realised by this agent (it has no Node watches)")
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return nil, fmt.Errorf("nodes selector: %w", err)
	}
	addrs, ok := nodes[s.String()]
	if !ok {
		return nil, fmt.Errorf("the Nodes of selector %q are not listed yet", s.String())
	}
	return addrs, nil
}
