package nodenetwork

import (
	"cmp"
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

// SetPeers records the routes the remote route reconciler realised and, when they changed, wakes
// the subscribers of PeerChanges.
func (s *State) SetPeers(peers []Peer) {
	peers = slices.Clone(peers)
	slices.SortFunc(peers, comparePeers)
	s.mu.Lock()
	changed := s.peers == nil || !slices.EqualFunc(*s.peers, peers, equalPeers)
	s.peers = &peers
	subs := s.peerSubscribers
	s.mu.Unlock()
	if !changed {
		return
	}
	subs.wake()
}

// Peers returns the routes SetPeers recorded last (none before the first).
func (s *State) Peers() []Peer {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.peers == nil {
		return nil
	}
	return slices.Clone(*s.peers)
}

// PeerChanges returns a channel that receives a value whenever the realised routes change;
// wake-ups are coalesced.
func (s *State) PeerChanges() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peerSubscribers.add()
}
