package nodenetwork

import (
	"cmp"
	"net/netip"
	"slices"
)

// HeldEgress is an Egress whose flows the node's egress reconciler installed: packet traces report a
// selected Pod's packet with the Egress's id (pipeline.EgressField) and name it by this.
type HeldEgress struct {
	ID   uint32
	Name string
	IP   netip.Addr
}

// SetHeldEgresses records the Egresses the egress reconciler installed and, when they changed, wakes
// the subscribers of HeldEgressChanges.
func (s *State) SetHeldEgresses(held []HeldEgress) {
	held = slices.Clone(held)
	slices.SortFunc(held, func(a, b HeldEgress) int { return cmp.Compare(a.ID, b.ID) })
	s.mu.Lock()
	changed := !slices.Equal(s.heldEgresses, held)
	s.heldEgresses = held
	subs := s.heldEgressSubscribers
	s.mu.Unlock()
	if !changed {
		return
	}
	subs.wake()
}

// HeldEgresses returns what SetHeldEgresses recorded last, by id (none before the first).
func (s *State) HeldEgresses() []HeldEgress {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Clone(s.heldEgresses)
}

// HeldEgressChanges returns a channel that receives a value whenever the held Egresses change;
// wake-ups are coalesced.
func (s *State) HeldEgressChanges() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.heldEgressSubscribers.add()
}
