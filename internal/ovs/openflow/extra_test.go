package openflow_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/internal/ovs/openflow"
)

// TestExtraActionsInstallAsRendered installs the protocol matches and the actions only the Windows
// profile's checks use (ct_clear, check_pkt_larger, meters, pkt_mark and IPv6 sets, dec_ttl,
// learn) through a bundle and compares what OVS prints with what the package renders: their
// encoding and their text are both what OVS means by them.
func TestExtraActionsInstallAsRendered(t *testing.T) {
	g := NewWithT(t)
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e.ovs.MustOfctl(t, "-O", "OpenFlow15", "add-meter", bridge, "meter=7,pktps,band=type=drop,rate=100")

	ip := openflow.IPv4()
	flows := []openflow.Flow{
		{Table: 30, Priority: 200, Match: []openflow.MatchField{ip, openflow.IPProto(openflow.ProtoTCP)}, Actions: []openflow.Action{openflow.CTClear(), openflow.GotoTable(31)}},
		{Table: 30, Priority: 200, Match: []openflow.MatchField{ip, openflow.IPProto(openflow.ProtoUDP)}, Actions: []openflow.Action{openflow.DecTTL(), openflow.Output(1)}},
		{Table: 30, Priority: 200, Match: []openflow.MatchField{openflow.IPProto(openflow.ProtoICMP), ip, openflow.ICMPType(3), openflow.NwDst(netip.MustParsePrefix("192.168.1.1/32"))},
			Actions: []openflow.Action{openflow.Output(openflow.PortLocal)}},
		{Table: 30, Priority: 190, Match: []openflow.MatchField{ip, openflow.IPProto(47)}, Actions: []openflow.Action{openflow.Meter(7), openflow.SetPktMark(0x10), openflow.Output(2)}},
		{Table: 30, Priority: 180, Match: []openflow.MatchField{ip}, Actions: []openflow.Action{openflow.CheckPktLarger(1400, 0, 18), openflow.GotoTable(31)}},
		{Table: 31, Priority: 200, Match: []openflow.MatchField{openflow.IPv6()},
			Actions: []openflow.Action{openflow.SetIPv6Dst(netip.MustParseAddr("fd00::1")), openflow.SetIPv6Src(netip.MustParseAddr("fd00::2")),
				openflow.Move(openflow.FieldIPv6Src, openflow.FieldIPv6Dst), openflow.DecTTL(), openflow.Output(1)}},
		{Table: 31, Priority: 100, Match: []openflow.MatchField{ip, openflow.IPProto(openflow.ProtoTCP)}, Actions: []openflow.Action{
			openflow.Learn(openflow.LearnSpec{Table: 40, Priority: 200, HardTimeout: 300, EthType: openflow.EthTypeIPv4, IPProto: openflow.ProtoTCP,
				Match: []openflow.Field{openflow.FieldIPSrc, openflow.FieldIPDst},
				Loads: []openflow.LearnLoad{{Src: openflow.FieldReg(2), Dst: openflow.FieldReg(1)}}}),
			openflow.Learn(openflow.LearnSpec{Table: 41, Priority: 0x8000, Match: []openflow.Field{openflow.FieldEthSrc}, Output: &openflow.FieldInPort}),
			openflow.Learn(openflow.LearnSpec{Table: 42, Priority: 200, HardTimeout: 10, DeleteLearned: true, Cookie: 0x9000000010005, EthType: openflow.EthTypeIPv4, IPProto: openflow.ProtoTCP,
				Match:      []openflow.Field{openflow.FieldIPSrc, openflow.FieldIPDst, openflow.FieldTCPDst},
				LoadValues: []openflow.LearnLoadValue{{Value: 0xa0a0018, Dst: openflow.FieldReg(3)}, {Value: 0x21f90, Dst: openflow.FieldReg(4)}}}),
			openflow.Resubmit(42),
			openflow.GotoTable(40)}},
	}
	_, err := e.br.Sync(ctx, 3, flows)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(dump(t, e.ovs)).To(Equal(rendered(e.br.Installed(3))))
}
