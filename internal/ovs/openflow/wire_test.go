package openflow

import (
	"net"
	"net/netip"
	"testing"

	"antrea.io/libOpenflow/openflow15"
	. "github.com/onsi/gomega"
)

// wireFlows use every match field and action, masked and exact, in and out of ARP flows.
func wireFlows() []Flow {
	mac, _ := net.ParseMAC("0a:58:0a:00:00:05")
	table := uint8(31)
	ip := netip.MustParseAddr("10.0.1.1")
	return []Flow{
		{Table: 0, Priority: 200, Cookie: 1, Match: []MatchField{InPort(1)}, Actions: []Action{SetReg(0, 0, 15, 0), GotoTable(10)}},
		{Table: 0, Priority: 190, Match: []MatchField{TunDst(ip), InPort(5), TunID(4096)}, Actions: []Action{SetReg(3, 0, 31, 7), SetReg(0, 17, 17, 1), Normal()}},
		{Table: 0, Priority: 180, Match: []MatchField{EthSrc(mac), EthDst(mac), Reg(0, 0, 15, 2), Reg(1, 0, 31, 9)}, Actions: []Action{Drop()}},
		{Table: 10, Match: []MatchField{IPv4(), NwSrc(netip.MustParsePrefix("10.0.0.0/24")), NwDst(netip.MustParsePrefix("10.1.0.5/32"))},
			Actions: []Action{Output(3), Output(PortLocal), Output(PortInPort), ToGroup(4)}},
		{Table: 10, Priority: 5, Match: []MatchField{IPv4(), NwSrc(netip.MustParsePrefix("0.0.0.0/0")), NwDst(netip.MustParsePrefix("10.2.0.0/16"))}},
		{Table: 12, Priority: 5, Match: []MatchField{EthType(0x86dd)}, Actions: []Action{GotoTable(20)}},
		{Table: 20, Priority: 190, Match: []MatchField{ARP(), ARPTPA(ip), ARPOp(1), NwSrc(netip.MustParsePrefix("10.0.0.0/8"))},
			Actions: []Action{Move(FieldEthSrc, FieldEthDst), SetEthSrc(mac), SetARPOp(2), Move(FieldARPSha, FieldARPTha), SetARPSha(mac),
				Move(FieldARPSpa, FieldARPTpa), SetARPSpa(ip), Output(PortInPort)}},
		{Table: 30, Match: []MatchField{IPv4()}, Actions: []Action{CT(CTAction{Table: &table, Zone: 65520, NAT: true})}},
		{Table: 31, Match: []MatchField{CTMark(0x40, 0xff), IPv4(), CTState(CTTrk|CTEst, CTNew), CTZone(65520), CTMark(0x1, 0xffffffff)},
			Actions: []Action{SetEthDst(mac), SetTunDst(ip), SetTunID(0x1000), SetCTMark(0x40, 0), GotoTable(40)}},
		{Table: 105, Match: []MatchField{IPv4(), CTState(CTNew|CTTrk, 0), TunDst(netip.MustParsePrefix("192.168.0.0/16").Addr())},
			Actions: []Action{CT(CTAction{Commit: true, Table: &table, Zone: 65520, SNAT: ip, Exec: []Action{SetCTMark(0x40, 0xff)}}), OutputReg(3, 0, 31), OutputReg(2, 0, 15)}},
		{Table: 110, Priority: 0, Actions: []Action{Normal()}},
		{Table: 111, Priority: 3, Match: []MatchField{IPv4()}, Actions: []Action{ToController(128), GotoTable(112)}},
		{Table: 40, Match: []MatchField{IPv4(), IPProto(ProtoTCP), NwDst(netip.MustParsePrefix("10.96.0.1/32")), TpDst(ProtoTCP, 443)},
			Actions: []Action{CT(CTAction{Commit: true, Table: &table, Zone: 65520, DNAT: netip.MustParseAddrPort("10.0.1.5:6443"),
				Exec: []Action{SetCTMark(0x10, 0x10), MoveBits(FieldEthSrc, 0, FieldCTLabel, 0, 48)}})}},
		{Table: 31, Match: []MatchField{TpDst(ProtoUDP, 53), IPProto(ProtoUDP), IPv4()}, Actions: []Action{MoveBits(FieldCTLabel, 0, FieldEthDst, 0, 48), Output(1)}},
		{Table: 50, Priority: 200, Match: []MatchField{IPv4(), IPProto(ProtoTCP), TpDstMasked(ProtoTCP, 80, 0xfffc)},
			Actions: []Action{Conjunction(3, 3, 3), Conjunction(9, 2, 3)}},
		{Table: 50, Priority: 200, Match: []MatchField{IPv4(), IPProto(ProtoUDP), TpDstMasked(ProtoUDP, 0x1000, 0xf000)}, Actions: []Action{Conjunction(3, 1, 2)}},
		{Table: 50, Priority: 190, Match: []MatchField{ConjID(3), IPv4()}, Actions: []Action{GotoTable(61)}},
		{Table: 30, Priority: 7, Match: []MatchField{ICMPType(11), IPProto(ProtoICMP), IPv4()}, Actions: []Action{DecTTL(), Meter(3), SetPktMark(1), CTClear(), CheckPktLarger(1400, 0, 18)}},
		{Table: 31, Priority: 7, Match: []MatchField{IPv6()}, Actions: []Action{SetIPv6Dst(netip.MustParseAddr("fd00::1")), Move(FieldIPv6Src, FieldIPv6Dst),
			Learn(LearnSpec{Table: 40, Priority: 1, IdleTimeout: 5, EthType: ethTypeIPv4, IPProto: ProtoUDP, Match: []Field{FieldIPSrc},
				Loads: []LearnLoad{{Src: FieldReg(2), Dst: FieldReg(3)}}, Output: &FieldInPort})}},
	}
}

// TestWireMatchesLibOpenflow proves the direct encoder writes exactly what libOpenflow marshals.
func TestWireMatchesLibOpenflow(t *testing.T) {
	for _, f := range wireFlows() {
		for _, cmd := range []uint8{openflow15.FC_ADD, openflow15.FC_DELETE_STRICT} {
			t.Run(f.String(), func(t *testing.T) {
				g := NewWithT(t)
				fm, err := f.flowMod(cmd, 0x0101000000000007)
				g.Expect(err).NotTo(HaveOccurred())
				fm.Xid = 42
				want, err := fm.MarshalBinary()
				g.Expect(err).NotTo(HaveOccurred())
				got, err := f.appendFlowMod([]byte{0xee}, cmd, 0x0101000000000007, 42)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(got[0]).To(Equal(byte(0xee)), "appends")
				g.Expect(got[1:]).To(Equal(want))
			})
		}
	}
}

// TestWireRefusesWhatLibOpenflowRefuses checks the errors of both encoders.
func TestWireRefusesWhatLibOpenflowRefuses(t *testing.T) {
	for _, f := range []Flow{
		{Actions: []Action{GotoTable(5), Output(1)}},
		{Match: []MatchField{IPv4(), NwDst(netip.MustParsePrefix("fd00::/64"))}},
		{Actions: []Action{SetTunDst(netip.MustParseAddr("fd00::1"))}},
	} {
		g := NewWithT(t)
		_, err := f.flowMod(openflow15.FC_ADD, 0)
		g.Expect(err).To(HaveOccurred(), f.String())
		_, err = f.appendFlowMod(nil, openflow15.FC_ADD, 0, 1)
		g.Expect(err).To(HaveOccurred(), f.String())
	}
}
