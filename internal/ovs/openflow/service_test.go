package openflow_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/internal/ovs/openflow"
)

// serviceFlows use what Services need: tp_dst, ct(nat(dst=ip:port)) in group buckets, and moves of
// part of ct_label.
func serviceGroupAndFlows() (openflow.Group, []openflow.Flow) {
	ep := netip.MustParseAddrPort("10.244.1.5:8080")
	group := openflow.Group{ID: 7, Buckets: []openflow.Bucket{{Weight: 100, Actions: []openflow.Action{
		openflow.CT(openflow.CTAction{Commit: true, Table: u8(70), Zone: 65520, DNAT: ep,
			Exec: []openflow.Action{openflow.SetCTMark(0x90, 0x90), openflow.MoveBits(openflow.FieldEthSrc, 0, openflow.FieldCTLabel, 0, 48)}}),
	}}}}
	flows := []openflow.Flow{
		{Table: 40, Priority: 200, Match: []openflow.MatchField{openflow.IPv4(), openflow.IPProto(openflow.ProtoTCP), openflow.CTState(openflow.CTNew|openflow.CTTrk, 0),
			openflow.NwDst(netip.MustParsePrefix("10.96.0.10/32")), openflow.TpDst(openflow.ProtoTCP, 80)},
			Actions: []openflow.Action{openflow.SetEthDst(vmac), openflow.ToGroup(7)}},
		{Table: 40, Priority: 200, Match: []openflow.MatchField{openflow.IPv4(), openflow.IPProto(openflow.ProtoUDP), openflow.NwDst(netip.MustParsePrefix("10.96.0.10/32")), openflow.TpDst(openflow.ProtoUDP, 53)},
			Actions: []openflow.Action{openflow.ToGroup(7)}},
		{Table: 31, Priority: 210, Match: []openflow.MatchField{openflow.IPv4(), openflow.CTState(openflow.CTRpl|openflow.CTTrk, 0), openflow.CTMark(0x80, 0x80)},
			Actions: []openflow.Action{openflow.MoveBits(openflow.FieldCTLabel, 0, openflow.FieldEthDst, 0, 48), openflow.Output(1)}},
	}
	return group, flows
}

func TestServiceFieldsRenderLikeOVS(t *testing.T) {
	g := NewWithT(t)
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	group, flows := serviceGroupAndFlows()
	_, err := e.br.SyncGroups(ctx, []openflow.Group{group})
	g.Expect(err).NotTo(HaveOccurred())
	groups, err := e.ovs.DumpGroups(bridge)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(groups).To(Equal([]string{group.String()}))
	_, err = e.br.Sync(ctx, 3, flows)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(dump(t, e.ovs)).To(Equal(rendered(e.br.Installed(3))))

	// A new connection (the agent restarted) knows none of the switch's groups: adding them again
	// replaces them rather than failing.
	e.br.Close()
	br2, err := openflow.Connect(ctx, openflow.Options{Bridge: bridge, Address: e.ovs.MgmtSocket(bridge), Rounds: e.db})
	g.Expect(err).NotTo(HaveOccurred())
	defer br2.Close()
	group.Buckets = append(group.Buckets, openflow.Bucket{Weight: 100, Actions: []openflow.Action{
		openflow.CT(openflow.CTAction{Commit: true, Table: u8(70), Zone: 65520, DNAT: netip.MustParseAddrPort("10.244.1.6:8080")})}})
	res, err := br2.SyncGroups(ctx, []openflow.Group{group})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Added).To(Equal(1))
	groups, err = e.ovs.DumpGroups(bridge)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(groups).To(Equal([]string{group.String()}))
}
