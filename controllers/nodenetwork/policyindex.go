package nodenetwork

import (
	"fmt"

	"k8s.io/apimachinery/pkg/types"

	"github.com/winnet-io/winnet/internal/pipeline"
)

// PolicyRuleName names the NetworkPolicy rule behind a conjunction id.
type PolicyRuleName struct {
	Policy types.NamespacedName
	Egress bool
	Index  int
}

// Rule is the rule as a PacketTrace names it: "ingress[0]", "egress[1]".
func (n PolicyRuleName) Rule() string {
	if n.Egress {
		return fmt.Sprintf("egress[%d]", n.Index)
	}
	return fmt.Sprintf("ingress[%d]", n.Index)
}

// PolicyIndex is what the NetworkPolicy reconciler's last full pass realised, by the names a packet
// trace reports: the rule of each conjunction id, and the policies that isolate each local Pod port
// in each direction.
type PolicyIndex struct {
	Rules                             map[uint32]PolicyRuleName
	EgressRules, IngressRules         []uint32
	EgressIsolation, IngressIsolation map[uint32][]types.NamespacedName
}

// NewPolicyIndex returns an empty index.
func NewPolicyIndex() PolicyIndex {
	return PolicyIndex{Rules: map[uint32]PolicyRuleName{}, EgressIsolation: map[uint32][]types.NamespacedName{},
		IngressIsolation: map[uint32][]types.NamespacedName{}}
}

// TracePolicy is the index as the trace flows need it.
func (p PolicyIndex) TracePolicy() pipeline.TracePolicy {
	tp := pipeline.TracePolicy{EgressRules: p.EgressRules, IngressRules: p.IngressRules}
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
	for _, c := range subs {
		select {
		case c <- struct{}{}:
		default:
		}
	}
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
	c := make(chan struct{}, 1)
	s.policySubscribers = append(s.policySubscribers, c)
	return c
}
