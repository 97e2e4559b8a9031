package openflow_test

import (
	"context"
	"net/netip"
	"slices"
	"strings"
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

// TestSyncObjectWithGroups: an object's groups and flows change in one bundle that touches nothing
// of the other objects: one endpoint added to a Service's group is one group_mod and no flow_mod; a
// group the object no longer uses is deleted after the flow that referred to it (in the same
// bundle, which the switch would refuse in the other order); the switch then holds exactly the
// desired groups and flows, and a whole-category pass after it finds nothing to do.
func TestSyncObjectWithGroups(t *testing.T) {
	g := NewWithT(t)
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const category = 7
	group := func(id uint32, endpoints ...string) openflow.Group {
		gr := openflow.Group{ID: id}
		for _, ep := range endpoints {
			gr.Buckets = append(gr.Buckets, openflow.Bucket{Weight: 100, Actions: []openflow.Action{
				openflow.CT(openflow.CTAction{Commit: true, Table: u8(45), Zone: 65520, DNAT: netip.MustParseAddrPort(ep)})}})
		}
		return gr
	}
	toGroup := func(object uint64, vip string, id uint32) openflow.Flow {
		return openflow.Flow{Table: 40, Priority: 200, Cookie: object,
			Match:   []openflow.MatchField{openflow.IPv4(), openflow.NwDst(netip.MustParsePrefix(vip))},
			Actions: []openflow.Action{openflow.ToGroup(id)}}
	}
	sync := func(o openflow.ObjectFlows) (openflow.SyncResult, openflow.SyncResult) {
		t.Helper()
		flows, groups, err := e.br.SyncObjectWithGroups(ctx, o)
		g.Expect(err).NotTo(HaveOccurred())
		return flows, groups
	}
	web := openflow.ObjectFlows{Category: category, Object: 1,
		Groups: []openflow.Group{group(1, "10.244.1.5:8080"), group(2, "10.244.1.6:8080")},
		Flows:  []openflow.Flow{toGroup(1, "10.96.0.10/32", 1), toGroup(1, "10.96.0.11/32", 2)}}
	db := openflow.ObjectFlows{Category: category, Object: 2,
		Groups: []openflow.Group{group(3, "10.244.1.7:5432")}, Flows: []openflow.Flow{toGroup(2, "10.96.0.12/32", 3)}}
	flows, groups := sync(web)
	g.Expect(flows).To(Equal(openflow.SyncResult{Added: 2}))
	g.Expect(groups).To(Equal(openflow.SyncResult{Added: 2}))
	sync(db)

	bundles := e.br.Bundles()
	web.Groups = []openflow.Group{group(1, "10.244.1.5:8080", "10.244.1.9:8080"), web.Groups[1]}
	flows, groups = sync(web)
	g.Expect(flows.Mods()).To(Equal(0))
	g.Expect(groups).To(Equal(openflow.SyncResult{Modified: 1}), "one endpoint added: one group_mod")
	g.Expect(e.br.Bundles()).To(Equal(bundles+1), "in one bundle")

	// Group 2 and its flow go (deleting a group deletes the flows that refer to it: it goes last).
	web.Groups, web.Flows, web.GoneGroups = web.Groups[:1], web.Flows[:1], []uint32{2}
	flows, groups = sync(web)
	g.Expect(flows).To(Equal(openflow.SyncResult{Deleted: 1}))
	g.Expect(groups).To(Equal(openflow.SyncResult{Deleted: 1}))
	g.Expect(e.br.Bundles()).To(Equal(bundles+2), "in one bundle")

	dumped, err := e.ovs.DumpGroups(bridge)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(dumped).To(ConsistOf(web.Groups[0].String(), db.Groups[0].String()))
	g.Expect(dump(t, e.ovs)).To(Equal(rendered(e.br.Installed(category))))
	g.Expect(e.br.Installed(category)).To(HaveLen(2))
	g.Expect(e.br.Count(category)).To(Equal(2))

	res, err := e.br.Sync(ctx, category, append(slices.Clone(web.Flows), db.Flows...))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Mods()).To(Equal(0), "a whole-category pass sees what the objects installed")
	res, err = e.br.SyncGroups(ctx, []openflow.Group{web.Groups[0], db.Groups[0]})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Mods()).To(Equal(0))

	_, _, err = e.br.SyncObjectWithGroups(ctx, openflow.ObjectFlows{Category: category, Object: 2, Groups: db.Groups, GoneGroups: []uint32{3}})
	g.Expect(err).To(MatchError(ContainSubstring("desired and gone")))
}

// TestSyncGroupsOfThousandsOfBuckets: a group too large for one OpenFlow message (1,000 DNAT buckets,
// about 100 KB) is added, shrunk and grown in one bundle of a group_mod and insert_buckets, and the
// switch holds exactly its buckets; an invalid bucket past the first message is reported as the
// group's and leaves the switch unchanged. (ovs-vswitchd cannot describe a group over 64 KB: the
// length of its OFPST_GROUP_DESC entry wraps; its bucket counters fit.)
func TestSyncGroupsOfThousandsOfBuckets(t *testing.T) {
	g := NewWithT(t)
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	group := func(id uint32, n, port int) openflow.Group {
		gr := openflow.Group{ID: id}
		for i := range n {
			ep := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 244, byte(1 + i/250), byte(2 + i%250)}), uint16(port+i))
			gr.Buckets = append(gr.Buckets, openflow.Bucket{Weight: 100, Actions: []openflow.Action{
				openflow.CT(openflow.CTAction{Commit: true, Table: u8(45), Zone: 65520, DNAT: ep, Exec: []openflow.Action{openflow.SetCTMark(0x10, 0x10)}})}})
		}
		return gr
	}
	// buckets counts the buckets of a group in its statistics.
	buckets := func(id string) int {
		out, err := e.ovs.Ofctl("-O", "OpenFlow15", "dump-group-stats", bridge, "group_id="+id)
		g.Expect(err).NotTo(HaveOccurred())
		return strings.Count(out, ":packet_count=")
	}
	small := group(2, 3, 8080)

	big := group(1, 1000, 10000)
	start := time.Now()
	res, err := e.br.SyncGroups(ctx, []openflow.Group{big, small})
	g.Expect(err).NotTo(HaveOccurred())
	t.Logf("a group of 1,000 DNAT buckets added in %v", time.Since(start))
	g.Expect(res).To(Equal(openflow.SyncResult{Added: 2}))
	g.Expect(buckets("1")).To(Equal(1000))
	g.Expect(buckets("2")).To(Equal(3))

	// Shrunk to a size ovs-ofctl can print: the inserted buckets are gone, the others replaced.
	big = group(1, 300, 20000)
	res, err = e.br.SyncGroups(ctx, []openflow.Group{big, small})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res).To(Equal(openflow.SyncResult{Modified: 1}))
	dumped, err := e.ovs.DumpGroups(bridge)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(dumped).To(ConsistOf(big.String(), small.String()))

	big = group(1, 1500, 30000)
	res, err = e.br.SyncGroups(ctx, []openflow.Group{big, small})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res).To(Equal(openflow.SyncResult{Modified: 1}))
	g.Expect(buckets("1")).To(Equal(1500))

	bad := group(1, 1000, 40000)
	bad.Buckets[999].Actions = []openflow.Action{openflow.GotoTable(3)} // not an action a bucket may hold
	_, err = e.br.SyncGroups(ctx, []openflow.Group{group(2, 4, 8080), bad})
	g.Expect(err).To(MatchError(ContainSubstring("group \"group_id=1,")), "the rejected message is named after its group")
	g.Expect(buckets("1")).To(Equal(1500))
	g.Expect(buckets("2")).To(Equal(3), "the other group of the bundle is unchanged too")
}
