package networkpolicy

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/internal/pipeline"
)

// The incremental compiler: a Pod's change applied without a pass over every policy.
//
// A remote Pod changing its labels or its address (or coming and going) changes which peer sets it
// is in, and nothing else of the node's policy: a peer set is one list of peers in one namespace
// (a rule's `from` or `to`), resolved once per pass, and every rule it feeds allows its addresses.
// The path from a Pod event to the flows:
//
//  1. The Pod watch queues the Pod (Reconciler.podChanged) and the podChanges request.
//  2. Reconcile, with nothing else pending, reads each queued Pod from the cache (applyPods).
//  3. peerIndex.podChanged compares the sets the Pod is in now (peerSet.selects) with the sets it
//     was in, and counts the addresses each set gains or loses (several Pods, or a Pod and an
//     ipBlock, can give a set the same address).
//  4. For an address a set gained or lost, the rules of that set gain or lose their conjunction on
//     the address's peer clause flow (peerIndex.clauses), which is built again from what is left
//     (pipeline.PolicyPeerFlow, the builder the full pass uses).
//  5. The changed peer flows, one cookie object each, go in one bundle (openflow.Bridge.SyncObjects).
//
// What this cannot express makes it return errFullPass, and the full pass (Compute) runs: a Pod
// attached on this node (it may be a policy's target), a set that becomes empty or stops being
// empty (its rules appear or go), and named ports of egress rules (they resolve on each
// destination Pod). Policies, namespaces and attachments always take the full pass, and so does the
// periodic resync, which stays the safety net.

// errFullPass says a change needs the full pass.
var errFullPass = errors.New("the change needs a full pass")

// peerIndex is what the last full pass resolved, kept for the Pods' changes that follow it.
type peerIndex struct {
	// namespaces are the namespaces' labels the pass saw (their changes take the full pass).
	namespaces map[string]map[string]string
	// local are the Pods attached on this node in that pass.
	local map[types.NamespacedName]bool
	sets  []*peerSet
	// clauses holds, for every peer clause flow, the conjunctions of the rules that have its peer.
	clauses map[peerClause][]pipeline.PeerConjunction
	// namedEgressAll: an egress rule with named ports and no peers resolves them on every Pod.
	namedEgressAll bool
}

// peerClause identifies a peer clause flow: a direction and an address.
type peerClause struct {
	dir    pipeline.PolicyDirection
	prefix netip.Prefix
}

// peerSet is one list of peers of a policy's namespace, resolved.
type peerSet struct {
	selectors peerSelectorList
	// members are the Pods the selectors select, with their addresses as /32 prefixes.
	members map[types.NamespacedName][]netip.Prefix
	// count is how many members and ipBlock prefixes give each address: its keys are the set's
	// addresses, as the rules it feeds have them.
	count map[netip.Prefix]int
	// rules are the conjunctions on the peer flows of the rules the set feeds, by direction.
	rules []setRule
	// namedEgress: an egress rule with named ports uses the set; its Pods resolve the names.
	namedEgress bool
}

type setRule struct {
	dir  pipeline.PolicyDirection
	conj pipeline.PeerConjunction
}

// newPeerIndex indexes what Compute resolved: every peer set of the pass (m.peers) and the peer
// clauses of the final, merged rules.
func newPeerIndex(in Inputs, m *memo, rules []compiledRule) *peerIndex {
	clauses := 0
	for _, r := range rules {
		clauses += len(r.Peers)
	}
	x := &peerIndex{
		namespaces:     in.Namespaces,
		local:          make(map[types.NamespacedName]bool, len(in.Local)),
		clauses:        make(map[peerClause][]pipeline.PeerConjunction, clauses),
		namedEgressAll: m.namedEgressAll,
	}
	for _, lp := range in.Local {
		x.local[lp.Key] = true
	}
	byKey := map[string]*peerSet{}
	for k, r := range m.peers {
		ns, peers := m.peerSpecs[k].ns, m.peerSpecs[k].peers
		s := &peerSet{selectors: peerSelectors(ns, peers), members: make(map[types.NamespacedName][]netip.Prefix, len(r.pods)),
			count: make(map[netip.Prefix]int, len(r.blocks)+len(r.pods)), namedEgress: m.namedEgress[k]}
		for _, b := range r.blocks {
			s.count[b.Masked()]++
		}
		for _, p := range r.pods {
			ps := hostPrefixes(p.IPs)
			s.members[types.NamespacedName{Namespace: p.Namespace, Name: p.Name}] = ps
			for _, pf := range ps {
				s.count[pf]++
			}
		}
		byKey[k] = s
		x.sets = append(x.sets, s)
	}
	for _, r := range rules {
		conj, ok := r.PeerClause()
		if !ok {
			continue
		}
		// Every rule's conjunctions are on its peers' flows, a flow rebuilt has them all; only a
		// rule of a set changes with it.
		for _, p := range r.Peers {
			x.addConj(peerClause{r.Direction, p.Masked()}, conj)
		}
		if r.set != "" {
			byKey[r.set].rules = append(byKey[r.set].rules, setRule{dir: r.Direction, conj: conj})
		}
	}
	return x
}

func (x *peerIndex) addConj(c peerClause, conj pipeline.PeerConjunction) {
	if !slices.Contains(x.clauses[c], conj) {
		x.clauses[c] = append(x.clauses[c], conj)
	}
}

func (x *peerIndex) removeConj(c peerClause, conj pipeline.PeerConjunction) {
	conjs := slices.DeleteFunc(x.clauses[c], func(o pipeline.PeerConjunction) bool { return o == conj })
	if len(conjs) == 0 {
		delete(x.clauses, c)
		return
	}
	x.clauses[c] = conjs
}

// podChanged applies the change of Pod key, now info (nil: gone, or no longer taking part), and
// returns the peer clauses whose flows changed. On errFullPass the index is left half-changed and
// must be dropped.
func (x *peerIndex) podChanged(key types.NamespacedName, info *PodInfo) ([]peerClause, error) {
	if x.local[key] {
		return nil, fmt.Errorf("pod %s is attached on this node: %w", key, errFullPass)
	}
	if x.namedEgressAll {
		return nil, fmt.Errorf("an egress rule resolves named ports on every Pod: %w", errFullPass)
	}
	var now []netip.Prefix
	if info != nil {
		if _, ok := x.namespaces[info.Namespace]; !ok {
			// A namespace created since the pass (its creation took no pass): its labels are
			// not known here.
			return nil, fmt.Errorf("pod %s is in a namespace the last pass did not see: %w", key, errFullPass)
		}
		now = hostPrefixes(info.IPs)
	}
	var changed []peerClause
	for _, s := range x.sets {
		was, wasMember := s.members[key]
		isMember := info != nil && s.selectors.match(info, x.namespaces)
		if s.namedEgress && (wasMember || isMember) {
			// Its named ports may have changed, or it may have joined or left a group.
			return nil, fmt.Errorf("pod %s is a destination of an egress rule with named ports: %w", key, errFullPass)
		}
		var is []netip.Prefix
		if isMember {
			is = append([]netip.Prefix{}, now...) // not nil: a member without an address is a member
		}
		if wasMember == isMember && slices.Equal(was, is) {
			continue
		}
		gained, lost := s.setMember(key, is)
		if before := len(s.count) - len(gained) + len(lost); len(s.count) == 0 || before == 0 {
			return nil, fmt.Errorf("a peer set of pod %s became empty or stopped being empty: %w", key, errFullPass)
		}
		for _, r := range s.rules {
			for _, p := range gained {
				x.addConj(peerClause{r.dir, p}, r.conj)
				changed = append(changed, peerClause{r.dir, p})
			}
			for _, p := range lost {
				x.removeConj(peerClause{r.dir, p}, r.conj)
				changed = append(changed, peerClause{r.dir, p})
			}
		}
	}
	return changed, nil
}

// setMember makes Pod key a member with addresses is (nil: not a member) and returns the
// addresses the set gained and lost.
func (s *peerSet) setMember(key types.NamespacedName, is []netip.Prefix) (gained, lost []netip.Prefix) {
	for _, p := range s.members[key] {
		if s.count[p]--; s.count[p] == 0 {
			delete(s.count, p)
			lost = append(lost, p)
		}
	}
	if is == nil {
		delete(s.members, key)
	} else {
		s.members[key] = is
	}
	for _, p := range is {
		if s.count[p]++; s.count[p] == 1 {
			if i := slices.Index(lost, p); i >= 0 {
				lost = slices.Delete(lost, i, i+1) // lost and found again: no change
			} else {
				gained = append(gained, p)
			}
		}
	}
	return gained, lost
}

// flows are the peer clauses' flows by cookie object: the flow of a clause no rule has any more is
// none, which deletes it.
func (x *peerIndex) flows(clauses []peerClause) map[uint64][]openflow.Flow {
	out := map[uint64][]openflow.Flow{}
	for _, c := range clauses {
		obj := pipeline.PolicyPeerObject(c.dir, c.prefix)
		conjs := x.clauses[c]
		if len(conjs) == 0 {
			out[obj] = nil
			continue
		}
		out[obj] = []openflow.Flow{pipeline.PolicyPeerFlow(c.dir, c.prefix, conjs)}
	}
	return out
}

// peerSpec is what a peer set was resolved from.
type peerSpec struct {
	ns    string
	peers []networkingv1.NetworkPolicyPeer
}

// stale returns the Pods whose place in the peer sets differs from what the peer watches hold now
// (pods), with the resource version found ("" for a member no watch holds any more): a member whose
// addresses or selection changed, a Pod a set should have and lacks, a member gone. It is the
// periodic check's proof that the
// incremental path missed nothing: every Pod event applies its Pod, so a Pod found here is a change
// that was lost. checked holds the resource versions found consistent since the index was built; a
// Pod checked at the same version is not matched again (the index changes only by applying events),
// so after the first check the cost is the Pods changed since.
func (x *peerIndex) stale(pods []*corev1.Pod, checked map[types.NamespacedName]string) map[types.NamespacedName]string {
	held := make(map[types.NamespacedName]bool, len(pods))
	out := map[types.NamespacedName]string{}
	for _, p := range pods {
		key := types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
		held[key] = true
		if x.local[key] || checked[key] == p.ResourceVersion {
			continue
		}
		var now []netip.Prefix
		info, ok := podInfo(p)
		if ok {
			if _, known := x.namespaces[info.Namespace]; !known {
				continue // its namespace came after the pass: its creation takes a full pass
			}
			now = hostPrefixes(info.IPs)
		}
		consistent := true
		for _, s := range x.sets {
			was, wasMember := s.members[key]
			isMember := ok && s.selectors.match(&info, x.namespaces)
			if wasMember != isMember || (isMember && !slices.Equal(was, now)) {
				consistent = false
				break
			}
		}
		if consistent {
			checked[key] = p.ResourceVersion
			continue
		}
		out[key] = p.ResourceVersion
	}
	for _, s := range x.sets {
		for key := range s.members {
			if !held[key] && !x.local[key] {
				out[key] = ""
			}
		}
	}
	for key := range checked {
		if !held[key] {
			delete(checked, key)
		}
	}
	return out
}
