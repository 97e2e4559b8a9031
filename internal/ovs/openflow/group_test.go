package openflow_test

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/internal/ovs/openflow"
)

// TestSyncGroupsSendsOnlyChanges: a pass over the same groups sends nothing; a changed endpoint, a
// changed weight, buckets regrouped with the same actions, a new and a removed group are each one
// group_mod, and the switch then holds exactly the desired groups.
func TestSyncGroupsSendsOnlyChanges(t *testing.T) {
	g := NewWithT(t)
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dnat := func(ep string) openflow.Action {
		return openflow.CT(openflow.CTAction{Commit: true, Table: u8(45), Zone: 65520, DNAT: netip.MustParseAddrPort(ep),
			Exec: []openflow.Action{openflow.SetCTMark(0x10, 0x10)}})
	}
	bucket := func(w uint16, actions ...openflow.Action) openflow.Bucket {
		return openflow.Bucket{Weight: w, Actions: actions}
	}
	groups := []openflow.Group{
		{ID: 1, Buckets: []openflow.Bucket{bucket(100, dnat("10.244.1.5:8080")), bucket(100, dnat("10.244.1.6:8080"))}},
		{ID: 2, Buckets: []openflow.Bucket{bucket(100, dnat("10.244.1.7:8080"))}},
		{ID: 3, Buckets: []openflow.Bucket{bucket(100, openflow.Output(1), openflow.Output(2)), bucket(100, openflow.Output(3))}},
		{ID: 4, Buckets: []openflow.Bucket{bucket(100, dnat("10.244.1.8:8080"))}},
	}
	res, err := e.br.SyncGroups(ctx, groups)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res).To(Equal(openflow.SyncResult{Added: 4}))

	res, err = e.br.SyncGroups(ctx, slices.Clone(groups))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Mods()).To(Equal(0), "the same groups again: nothing sent")

	next := []openflow.Group{
		{ID: 1, Buckets: []openflow.Bucket{bucket(100, dnat("10.244.1.5:8080")), bucket(100, dnat("10.244.1.9:8080"))}},
		{ID: 2, Buckets: []openflow.Bucket{bucket(50, dnat("10.244.1.7:8080"))}},
		{ID: 3, Buckets: []openflow.Bucket{bucket(100, openflow.Output(1)), bucket(100, openflow.Output(2), openflow.Output(3))}},
		{ID: 5, Buckets: []openflow.Bucket{bucket(100, dnat("10.244.1.10:8080"))}},
	}
	res, err = e.br.SyncGroups(ctx, next)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res).To(Equal(openflow.SyncResult{Added: 1, Modified: 3, Deleted: 1}))
	dumped, err := e.ovs.DumpGroups(bridge)
	g.Expect(err).NotTo(HaveOccurred())
	var want []string
	for _, gr := range next {
		want = append(want, gr.String())
	}
	g.Expect(dumped).To(ConsistOf(want))

	_, err = e.br.SyncGroups(ctx, []openflow.Group{next[0], next[0]})
	g.Expect(err).To(MatchError(ContainSubstring("duplicate group 1")))
}
