package nodenetwork

import (
	"cmp"
	"maps"
	"slices"

	"github.com/winnet-io/winnet/internal/pipeline"
)

// Peer is a remote node's route as the remote route reconciler realised it (flows and host route
// installed): the egress reconciler carries a selected Pod's connections through the tunnel to the
// node holding its Egress (Route.NodeIP, VNI, DstMAC), and on the holder a remote selected Pod's
// replies back to the Pod's node (the Peer whose Route.CIDR holds the Pod's address).
type Peer struct {
	// NodeName is the RemoteSubnetRoute's spec.nodeName ("" for a route of no node).
	NodeName string
	Route    pipeline.RemoteRoute
}

func comparePeers(a, b Peer) int {
	return cmp.Or(cmp.Compare(a.NodeName, b.NodeName), a.Route.CIDR.Addr().Compare(b.Route.CIDR.Addr()), cmp.Compare(a.Route.CIDR.Bits(), b.Route.CIDR.Bits()))
}

func equalPeers(a, b Peer) bool {
	return a.NodeName == b.NodeName && a.Route.CIDR == b.Route.CIDR && a.Route.Tunnel == b.Route.Tunnel && a.Route.NodeIP == b.Route.NodeIP &&
		a.Route.VNI == b.Route.VNI && a.Route.DstMAC.String() == b.Route.DstMAC.String()
}

// SetPeers records every route the remote route reconciler realised, by RemoteSubnetRoute name, and,
// when they changed, wakes the subscribers of PeerChanges. It keeps its own copy.
func (s *State) SetPeers(byRoute map[string][]Peer) {
	next := make(map[string][]Peer, len(byRoute))
	for name, peers := range byRoute {
		if len(peers) > 0 {
			next[name] = slices.Clone(peers)
		}
	}
	s.mu.Lock()
	changed := s.peers == nil || !maps.EqualFunc(s.peers, next, func(a, b []Peer) bool { return slices.EqualFunc(a, b, equalPeers) })
	s.peers = next
	subs := s.peerSubscribers
	s.mu.Unlock()
	if changed {
		subs.wake()
	}
}

// SetRoutePeers records the realised routes of one RemoteSubnetRoute (none: it has no realised route
// now) and, when they changed, wakes the subscribers of PeerChanges. It costs that route's peers, not
// every route's: a cluster of 5,000 Nodes writes a RemoteSubnetRoute's status several times for each
// Node added, and each of those writes used to sort and compare every peer (bench-scale, issue 64).
func (s *State) SetRoutePeers(name string, peers []Peer) {
	s.mu.Lock()
	if s.peers == nil {
		s.peers = map[string][]Peer{}
	}
	old := s.peers[name]
	if slices.EqualFunc(old, peers, equalPeers) {
		s.mu.Unlock()
		return
	}
	if len(peers) == 0 {
		delete(s.peers, name)
	} else {
		s.peers[name] = slices.Clone(peers)
	}
	subs := s.peerSubscribers
	s.mu.Unlock()
	subs.wake()
}

// Peers returns the realised routes SetPeers and SetRoutePeers recorded, ordered by node name and
// CIDR (none before the first).
func (s *State) Peers() []Peer {
	s.mu.RLock()
	n := 0
	for _, p := range s.peers {
		n += len(p)
	}
	out := make([]Peer, 0, n)
	for _, p := range s.peers {
		out = append(out, p...)
	}
	s.mu.RUnlock()
	slices.SortFunc(out, comparePeers)
	return out
}

// PeerChanges returns a channel that receives a value whenever the realised routes change;
// wake-ups are coalesced.
func (s *State) PeerChanges() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peerSubscribers.add()
}
