package openflow

import (
	"context"
	"fmt"
	"strings"

	"antrea.io/libOpenflow/openflow15"
	"antrea.io/libOpenflow/util"
	"antrea.io/ofnet/ofctrl"
)

// Bucket is one bucket of a select group.
type Bucket struct {
	Weight  uint16
	Actions []Action
}

// Group is a select group (load balancing over buckets).
type Group struct {
	ID      uint32
	Buckets []Bucket
}

// String renders the group as `ovs-ofctl -O OpenFlow15 dump-groups` prints it.
func (g Group) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "group_id=%d,type=select", g.ID)
	for i, bk := range g.Buckets {
		f := Flow{Actions: bk.Actions}
		fmt.Fprintf(&b, ",bucket=bucket_id:%d,weight:%d,actions=%s", i, bk.Weight, f.ActionsString())
	}
	return b.String()
}

// groupMod encodes the group as a group_mod with the given command.
func (g Group) groupMod(command int) (util.Message, error) {
	og := &ofctrl.Group{ID: g.ID, GroupType: ofctrl.GroupSelect}
	for i, bk := range g.Buckets {
		bucket := openflow15.NewBucket(uint32(i))
		bucket.AddProperty(openflow15.NewGroupBucketPropWeight(bk.Weight))
		for _, a := range bk.Actions {
			act, err := a.encode()
			if err != nil {
				return nil, fmt.Errorf("encoding action %q of bucket %d: %w", a.text(), i, err)
			}
			if act != nil {
				bucket.AddAction(act)
			}
		}
		og.Buckets = append(og.Buckets, bucket)
	}
	msg := og.GetBundleMessage(command).GetMessage()
	if gm, ok := msg.(*openflow15.GroupMod); ok && command == groupAddOrMod {
		// OVS checks the command bucket id of its extension commands: all buckets.
		gm.CommandBucketId = openflow15.OFPG_BUCKET_ALL
	}
	return msg, nil
}

// SyncGroups makes the installed groups equal to desired in one bundle. Sync
// groups before the flows that refer to them.
func (b *Bridge) SyncGroups(ctx context.Context, desired []Group) (SyncResult, error) {
	if err := b.waitConnected(ctx); err != nil {
		return SyncResult{}, fmt.Errorf("syncing groups on bridge %q: %w", b.opts.Bridge, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var res SyncResult
	var msgs bundleMsgs
	want := map[uint32]*groupState{}
	for i := range desired {
		g := &desired[i]
		gs := &groupState{group: *g, text: g.String()}
		if _, dup := want[g.ID]; dup {
			return res, fmt.Errorf("syncing groups on bridge %q: duplicate group %d", b.opts.Bridge, g.ID)
		}
		want[g.ID] = gs
		cur, ok := b.groups[g.ID]
		switch {
		case !ok:
			// Add or replace: after a restart of the agent the switch still has the groups the
			// previous connection installed, which this one does not know.
			res.Added++
			msgs = append(msgs, bundleMsg{group: &gs.group, groupCmd: groupAddOrMod})
		case cur.text != gs.text:
			res.Modified++
			msgs = append(msgs, bundleMsg{group: &gs.group, groupCmd: openflow15.OFPGC_MODIFY})
		}
	}
	for id := range b.groups {
		if _, ok := want[id]; !ok {
			res.Deleted++
			msgs = append(msgs, bundleMsg{group: &Group{ID: id}, groupCmd: openflow15.OFPGC_DELETE})
		}
	}
	if err := b.sendBundle(ctx, msgs); err != nil {
		return SyncResult{}, fmt.Errorf("syncing groups on bridge %q: %w", b.opts.Bridge, err)
	}
	b.groups = want
	return res, nil
}
