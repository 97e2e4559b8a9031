package nodenetwork

import (
	"fmt"

	"k8s.io/apimachinery/pkg/types"

	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/internal/pipeline"
)

// PolicyKind is the kind of policy a rule belongs to, as logs and metrics name it.
type PolicyKind string

// Policy kinds.
const (
	KindNetworkPolicy        PolicyKind = "NetworkPolicy"
	KindClusterNetworkPolicy PolicyKind = "ClusterNetworkPolicy"
)

// Rule actions, as logs and metrics name them: a NetworkPolicy rule allows; a ClusterNetworkPolicy
// rule accepts, denies or passes (the API's names).
const (
	ActionAllow  = "Allow"
	ActionAccept = "Accept"
	ActionDeny   = "Deny"
	ActionPass   = "Pass"
)

// ClusterNetworkPolicy tiers, as logs and metrics name them (the API's names).
const (
	TierAdmin    = "Admin"
	TierBaseline = "Baseline"
)

// PolicyRuleName names the rule behind a policy flow: a NetworkPolicy rule (by conjunction id) or a
// ClusterNetworkPolicy rule (by cookie object, pipeline.ClusterRuleObject).
type PolicyRuleName struct {
	// Kind is KindNetworkPolicy or KindClusterNetworkPolicy.
	Kind PolicyKind
	// Policy is the policy; a ClusterNetworkPolicy has no namespace.
	Policy types.NamespacedName
	Egress bool
	// Index is the rule's index in its direction's list, as written in the policy.
	Index int
	// Action is ActionAllow for a NetworkPolicy rule, ActionAccept, ActionDeny or ActionPass for a
	// ClusterNetworkPolicy rule.
	Action string
	// Tier is TierAdmin or TierBaseline for a ClusterNetworkPolicy rule, "" for a NetworkPolicy's.
	// (A tier winnet does not know is named as written: its rules fail closed in the Admin tier.)
	Tier string
	// FailClosed marks a ClusterNetworkPolicy rule winnet cannot realise as written (an unknown
	// action, tier or protocol field, peers it cannot resolve, beyond the priority band or the part
	// limit) that drops instead: its Action is then ActionDeny, whatever the policy says.
	FailClosed bool
}

// Direction is "ingress" or "egress".
func (n PolicyRuleName) Direction() string {
	if n.Egress {
		return "egress"
	}
	return "ingress"
}

// Rule is the rule as a PacketTrace names it: "ingress[0]", "egress[1]".
func (n PolicyRuleName) Rule() string {
	if n.Egress {
		return fmt.Sprintf("egress[%d]", n.Index)
	}
	return fmt.Sprintf("ingress[%d]", n.Index)
}

// PolicyIndex is what the NetworkPolicy reconciler's last full pass realised, by the names a packet
// trace, an audit log line or a metric reports: the NetworkPolicy rule of each conjunction id, the
// ClusterNetworkPolicy rule of each cookie object, and the policies that isolate each local Pod port
// in each direction.
type PolicyIndex struct {
	// Rules names the NetworkPolicy rule of each conjunction id (Kind KindNetworkPolicy). Rules
	// merged into one conjunction are named by the first of them (the lowest id).
	Rules                     map[uint32]PolicyRuleName
	EgressRules, IngressRules []uint32
	// ClusterRules names the ClusterNetworkPolicy rule of each cookie object
	// (pipeline.ClusterRuleObject): every flow of a rule carries it (its conj_id flow, its
	// subject-only flows, its clause flows), and a packet-in carries the cookie of the flow that
	// sent it. Every realised rule of the cluster's policies is named, with local subjects or not.
	ClusterRules                      map[uint64]PolicyRuleName
	EgressIsolation, IngressIsolation map[uint32][]types.NamespacedName
	// ClusterTraceRules are the ClusterNetworkPolicy rules with flows on the node as the trace
	// flows report them (pipeline.ClusterPolicy.TraceRules; ClusterRules names them), kept up to
	// date by the incremental passes too (a peer Pod's change can give a rule its first flows).
	ClusterTraceRules []pipeline.TraceClusterRule
}

// NewPolicyIndex returns an empty index.
func NewPolicyIndex() PolicyIndex {
	return PolicyIndex{Rules: map[uint32]PolicyRuleName{}, ClusterRules: map[uint64]PolicyRuleName{},
		EgressIsolation: map[uint32][]types.NamespacedName{}, IngressIsolation: map[uint32][]types.NamespacedName{}}
}

// RuleOfConjID names the rule of a conjunction id of either kind: a NetworkPolicy rule's id, or a
// ClusterNetworkPolicy rule's (pipeline.ClusterConjID, any of its parts).
func (p PolicyIndex) RuleOfConjID(id uint32) (PolicyRuleName, bool) {
	if obj, ok := pipeline.ClusterRuleObjectOfConjID(id); ok {
		n, ok := p.ClusterRules[obj]
		return n, ok
	}
	n, ok := p.Rules[id]
	return n, ok
}

// RuleOfCookie names the rule of a policy flow's cookie (its object bits; the round and category
// are ignored): a ClusterNetworkPolicy rule's (every flow of the rule carries it), or an audited
// NetworkPolicy rule's decision flow (pipeline.AuditRuleObject). Other flows (an unaudited
// NetworkPolicy rule's, a peer clause, a default drop) name no rule by their cookie.
func (p PolicyIndex) RuleOfCookie(cookie uint64) (PolicyRuleName, bool) {
	if id, _, rule, _ := pipeline.AuditObject(cookie); rule {
		n, ok := p.Rules[id]
		return n, ok
	}
	n, ok := p.ClusterRules[cookie&openflow.ObjectMask]
	return n, ok
}

// TracePolicy is the index as the trace flows need it.
func (p PolicyIndex) TracePolicy() pipeline.TracePolicy {
	tp := pipeline.TracePolicy{EgressRules: p.EgressRules, IngressRules: p.IngressRules, ClusterRules: p.ClusterTraceRules}
	for port := range p.EgressIsolation {
		tp.EgressIsolated = append(tp.EgressIsolated, port)
	}
	for port := range p.IngressIsolation {
		tp.IngressIsolated = append(tp.IngressIsolated, port)
	}
	return tp
}

// SetPolicyIndex records the NetworkPolicy reconciler's last full pass for packet traces and wakes
// the subscribers of PolicyIndexChanges.
func (s *State) SetPolicyIndex(p PolicyIndex) {
	s.mu.Lock()
	s.policyIndex = &p
	subs := s.policySubscribers
	s.mu.Unlock()
	subs.wake()
}

// PolicyIndex returns the last index SetPolicyIndex recorded (empty before the first).
func (s *State) PolicyIndex() PolicyIndex {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.policyIndex == nil {
		return NewPolicyIndex()
	}
	return *s.policyIndex
}

// PolicyIndexChanges returns a channel that receives a value whenever SetPolicyIndex is called;
// wake-ups are coalesced.
func (s *State) PolicyIndexChanges() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.policySubscribers.add()
}
