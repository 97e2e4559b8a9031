package nodenetwork

import (
	"net/netip"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/internal/pipeline"
)

// TestPeers: SetPeers replaces every route's peers, SetRoutePeers one route's; each wakes PeerChanges
// only when what it records changed, and Peers returns the union in order (node name, then CIDR).
func TestPeers(t *testing.T) {
	g := NewWithT(t)
	s := NewState()
	changes := s.PeerChanges()
	woke := func() bool {
		select {
		case <-changes:
			return true
		default:
			return false
		}
	}
	peer := func(node, cidr string, vni uint32) Peer {
		return Peer{NodeName: node, Route: pipeline.RemoteRoute{CIDR: netip.MustParsePrefix(cidr), Tunnel: true, NodeIP: netip.MustParseAddr("192.0.2.1"), VNI: vni}}
	}
	a, b, c := peer("node-a", "10.244.1.0/24", 4096), peer("node-b", "10.244.2.0/24", 4096), peer("node-c", "10.244.3.0/24", 4096)

	g.Expect(s.Peers()).To(BeEmpty())
	s.SetPeers(map[string][]Peer{"node-b": {b}, "node-a": {a}, "none": nil})
	g.Expect(woke()).To(BeTrue(), "the first record")
	g.Expect(s.Peers()).To(Equal([]Peer{a, b}))
	s.SetPeers(map[string][]Peer{"node-a": {a}, "node-b": {b}})
	g.Expect(woke()).To(BeFalse(), "the same peers again")

	// A route's status written (its peers unchanged) records nothing new and wakes nobody.
	s.SetRoutePeers("node-a", []Peer{a})
	g.Expect(woke()).To(BeFalse(), "one route's same peers")
	s.SetRoutePeers("gone", nil)
	g.Expect(woke()).To(BeFalse(), "no peers for a route that had none")

	s.SetRoutePeers("node-c", []Peer{c})
	g.Expect(woke()).To(BeTrue(), "a route added")
	g.Expect(s.Peers()).To(Equal([]Peer{a, b, c}))

	moved := peer("node-a", "10.244.1.0/24", 4097)
	s.SetRoutePeers("node-a", []Peer{moved})
	g.Expect(woke()).To(BeTrue(), "a route's VNI changed")
	g.Expect(s.Peers()).To(Equal([]Peer{moved, b, c}))

	s.SetRoutePeers("node-b", nil)
	g.Expect(woke()).To(BeTrue(), "a route withdrawn")
	g.Expect(s.Peers()).To(Equal([]Peer{moved, c}))

	// The record is a copy: the caller's slice may be reused.
	mine := []Peer{b}
	s.SetRoutePeers("node-b", mine)
	g.Expect(woke()).To(BeTrue())
	mine[0] = a
	g.Expect(s.Peers()).To(Equal([]Peer{moved, b, c}))

	s.SetPeers(map[string][]Peer{"node-c": {c}})
	g.Expect(woke()).To(BeTrue(), "a full pass that withdrew two routes")
	g.Expect(s.Peers()).To(Equal([]Peer{c}))
}
