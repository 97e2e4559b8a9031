package openflow

import (
	"net"
	"net/netip"
	"testing"

	. "github.com/onsi/gomega"
)

var podMACForKeys, _ = net.ParseMAC("0a:58:0a:00:00:05")

// TestKeysIdentifyLikeText checks that the binary keys Sync diffs with agree with the text OVS
// prints: two flows have equal match keys exactly when table, priority and match text are equal,
// and equal actions keys exactly when their actions text is equal.
func TestKeysIdentifyLikeText(t *testing.T) {
	g := NewWithT(t)
	flows := wireFlows()
	variants := []Flow{
		// The same match as wireFlows()[3] in another order, with other actions.
		{Table: 10, Match: []MatchField{NwDst(netip.MustParsePrefix("10.1.0.5/32")), NwSrc(netip.MustParsePrefix("10.0.0.0/24")), IPv4()},
			Actions: []Action{Output(3), Drop(), Output(PortLocal), Output(PortInPort), ToGroup(4)}},
		// Another priority, table, prefix length, register bit, port.
		{Table: 10, Priority: 1, Match: []MatchField{IPv4(), NwSrc(netip.MustParsePrefix("10.0.0.0/24")), NwDst(netip.MustParsePrefix("10.1.0.5/32"))}},
		{Table: 11, Match: []MatchField{IPv4(), NwSrc(netip.MustParsePrefix("10.0.0.0/24")), NwDst(netip.MustParsePrefix("10.1.0.5/32"))}},
		{Table: 10, Match: []MatchField{IPv4(), NwSrc(netip.MustParsePrefix("10.0.0.0/25")), NwDst(netip.MustParsePrefix("10.1.0.5/32"))}},
		{Table: 0, Priority: 180, Match: []MatchField{EthSrc(podMACForKeys), EthDst(podMACForKeys), Reg(0, 0, 15, 3), Reg(1, 0, 31, 9)}, Actions: []Action{Output(3), Output(4)}},
		{Table: 0, Priority: 200, Match: []MatchField{InPort(2)}, Actions: []Action{SetReg(0, 0, 15, 1), GotoTable(10)}},
		// No action at all is the same as Drop.
		{Table: 110, Priority: 1},
		{Table: 110, Priority: 2, Actions: []Action{Drop()}},
	}
	flows = append(flows, variants...)
	for i := range flows {
		for j := range flows {
			a, b := &flows[i], &flows[j]
			sameMatch := a.Table == b.Table && a.MatchString() == b.MatchString()
			g.Expect(string(a.appendMatchKey(nil)) == string(b.appendMatchKey(nil))).To(Equal(sameMatch), "match of %q and %q", a.String(), b.String())
			sameActions := a.ActionsString() == b.ActionsString()
			g.Expect(string(a.appendActionsKey(nil)) == string(b.appendActionsKey(nil))).To(Equal(sameActions), "actions of %q and %q", a.String(), b.String())
		}
	}
}
