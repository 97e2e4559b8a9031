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
		// set_field actions are keyed by their field, not their text: every pair of these keys
		// alike exactly when the texts are alike (the masked and exact ct_mark of all ones too).
		{Table: 20, Actions: []Action{SetReg(0, 0, 15, 1)}},
		{Table: 20, Actions: []Action{SetReg(0, 0, 15, 2)}},
		{Table: 20, Actions: []Action{SetReg(0, 0, 31, 1)}},
		{Table: 20, Actions: []Action{SetReg(1, 0, 15, 1)}},
		{Table: 20, Actions: []Action{SetReg(1, 16, 31, 1)}},
		{Table: 20, Actions: []Action{SetCTMark(0x10, 0x10)}},
		{Table: 20, Actions: []Action{SetCTMark(0x10, 0xffffffff)}},
		{Table: 20, Actions: []Action{SetCTMark(0x10, 0)}},
		{Table: 20, Actions: []Action{SetEthSrc(podMACForKeys)}},
		{Table: 20, Actions: []Action{SetEthSrc(net.HardwareAddr{0x0a, 0x58, 0x0a, 0, 0, 6})}},
		{Table: 20, Actions: []Action{SetEthDst(podMACForKeys)}},
		{Table: 20, Actions: []Action{SetARPSha(podMACForKeys)}},
		{Table: 20, Actions: []Action{SetARPSpa(netip.MustParseAddr("10.0.0.1"))}},
		{Table: 20, Actions: []Action{SetNwDst(netip.MustParseAddr("10.0.0.1"))}},
		{Table: 20, Actions: []Action{SetTunDst(netip.MustParseAddr("10.0.0.1"))}},
		{Table: 20, Actions: []Action{SetTunDst(netip.MustParseAddr("10.0.0.2"))}},
		{Table: 20, Actions: []Action{SetTunID(5)}},
		{Table: 20, Actions: []Action{SetTunID(6)}},
		{Table: 20, Actions: []Action{SetARPOp(2)}},
		{Table: 20, Actions: []Action{SetTpDst(ProtoTCP, 80)}},
		{Table: 20, Actions: []Action{SetTpDst(ProtoUDP, 80)}},
		{Table: 20, Actions: []Action{SetPktMark(1)}},
		{Table: 20, Actions: []Action{SetPktMark(1), SetReg(0, 0, 15, 1)}},
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

// TestMatchKeyDecodes: the installed-flow cache keeps a flow's match only in its key, so the key
// must give back every field whole, of every kind: the same fields, the same key, text and wire
// match.
func TestMatchKeyDecodes(t *testing.T) {
	g := NewWithT(t)
	ip := netip.MustParseAddr("10.0.1.1")
	flows := append(wireFlows(),
		Flow{Table: 7, Priority: 65535, Match: []MatchField{InPort(0xfffffffe), EthSrc(podMACForKeys), EthDst(podMACForKeys), ARP(), ARPTPA(ip), ARPSHA(podMACForKeys), ARPOp(2)}},
		Flow{Table: 8, Priority: 1, Match: []MatchField{IPv4(), IPProto(ProtoICMP), ICMPType(8), IPDSCP(46), TunSrc(ip), TunID(1 << 40), CTZone(65535)}},
		Flow{Table: 9, Match: []MatchField{IPv4(), IPProto(ProtoUDP), TpSrc(ProtoUDP, 65535), TpDst(ProtoUDP, 0), CTLabel32(64, 0xdeadbeef), ConjID(1 << 31)}},
		Flow{Table: 9, Match: []MatchField{RegMasked(15, 0xffffffff, 0x8000_0001), Reg(2, 3, 9, 100), CTState(CTTrk|CTEst, CTNew), CTMark(0xffffffff, 0)}},
		Flow{Table: 250, Match: []MatchField{IPv6(), NwDst(netip.MustParsePrefix("fd00:10::/64")), NwSrc(netip.MustParsePrefix("::/0"))}},
		Flow{Table: 251, Match: []MatchField{IPv4(), NwSrc(netip.MustParsePrefix("0.0.0.0/0")), NwDst(netip.MustParsePrefix("255.255.255.255/32"))}},
		Flow{Table: 252, Priority: 300},
	)
	for _, f := range flows {
		key := string(f.appendMatchKey(nil))
		g.Expect(countMatch(key)).To(Equal(len(f.Match)), "fields of %q", f.String())
		got := Flow{Table: key[0], Priority: uint16(key[1])<<8 | uint16(key[2]), Match: decodeMatch(key, nil)}
		g.Expect(got.Table).To(Equal(f.Table))
		g.Expect(got.Priority).To(Equal(f.Priority))
		g.Expect(got.Match).To(ConsistOf(f.Match), "fields of %q", f.String())
		g.Expect(string(got.appendMatchKey(nil))).To(Equal(key))
		g.Expect(got.MatchString()).To(Equal(f.MatchString()))
		want, wantErr := f.appendMatch(nil)
		wire, err := got.appendMatch(nil)
		g.Expect(err == nil).To(Equal(wantErr == nil))
		g.Expect(wire).To(Equal(want), "wire match of %q", f.String())
	}
}
