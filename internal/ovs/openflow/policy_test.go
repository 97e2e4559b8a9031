package openflow_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/internal/ovs/openflow"
)

// TestPolicyFieldsRenderLikeOVS installs conjunctive flows and masked port matches through the
// bundle path and compares what OVS prints with what the flows render.
func TestPolicyFieldsRenderLikeOVS(t *testing.T) {
	g := NewWithT(t)
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	flows := []openflow.Flow{
		{Table: 50, Priority: 200, Match: []openflow.MatchField{openflow.InPort(10)},
			Actions: []openflow.Action{openflow.Conjunction(2, 1, 3), openflow.Conjunction(7, 1, 3)}},
		{Table: 50, Priority: 200, Match: []openflow.MatchField{openflow.IPv4(), openflow.NwDst(netip.MustParsePrefix("10.0.0.0/16"))},
			Actions: []openflow.Action{openflow.Conjunction(2, 2, 3)}},
		{Table: 50, Priority: 200, Match: []openflow.MatchField{openflow.IPv4(), openflow.IPProto(openflow.ProtoTCP), openflow.TpDstMasked(openflow.ProtoTCP, 80, 0xfffc)},
			Actions: []openflow.Action{openflow.Conjunction(2, 3, 3)}},
		{Table: 50, Priority: 200, Match: []openflow.MatchField{openflow.IPv4(), openflow.IPProto(openflow.ProtoUDP), openflow.TpDstMasked(openflow.ProtoUDP, 53, 0xffff)},
			Actions: []openflow.Action{openflow.Conjunction(7, 3, 3)}},
		{Table: 50, Priority: 190, Match: []openflow.MatchField{openflow.ConjID(2), openflow.IPv4()},
			Actions: []openflow.Action{openflow.GotoTable(61)}},
	}
	_, err := e.br.Sync(ctx, 3, flows)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(dump(t, e.ovs)).To(Equal(rendered(e.br.Installed(3))))
	g.Expect(dump(t, e.ovs)).To(ContainElement(ContainSubstring("tcp,tp_dst=0x50/0xfffc actions=conjunction(2,3/3)")))
}
