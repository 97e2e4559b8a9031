package openflow

import (
	"context"
	"encoding/binary"
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

// appendKey appends a compact binary identity of the group: equal keys mean equal String, but
// building one renders no text (a pass over thousands of unchanged Service groups costs little).
func (g *Group) appendKey(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, g.ID)
	for _, bk := range g.Buckets {
		b = binary.BigEndian.AppendUint16(b, bk.Weight)
		at := len(b)
		b = append(b, 0, 0, 0, 0) // the length of the bucket's actions key, set below
		b = (&Flow{Actions: bk.Actions}).appendActionsKey(b)
		binary.BigEndian.PutUint32(b[at:], uint32(len(b)-at-4))
	}
	return b
}

// SyncGroups makes the installed groups equal to desired in one bundle. Sync
// groups before the flows that refer to them. Only new, changed and deleted groups are sent. A
// group passed again with the very buckets (the same slice) it was installed with costs nothing
// to compare, any other a key comparison: the bridge keeps the desired groups' buckets, which the
// caller must not modify afterwards.
func (b *Bridge) SyncGroups(ctx context.Context, desired []Group) (SyncResult, error) {
	if err := b.waitConnected(ctx); err != nil {
		return SyncResult{}, fmt.Errorf("syncing groups on bridge %q: %w", b.opts.Bridge, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.groupPass++
	pass := b.groupPass
	var res SyncResult
	var msgs bundleMsgs
	changed := map[uint32]*groupState{} // new and modified groups, recorded once the switch has them
	kb := b.groupKeyBuf[:0]
	defer func() { b.groupKeyBuf = kb }()
	for i := range desired {
		g := &desired[i]
		cur, ok := b.groups[g.ID]
		if _, dup := changed[g.ID]; dup || ok && cur.seen == pass {
			return res, fmt.Errorf("syncing groups on bridge %q: duplicate group %d", b.opts.Bridge, g.ID)
		}
		if ok && sameBuckets(cur.group.Buckets, g.Buckets) {
			cur.seen = pass
			continue
		}
		kb = g.appendKey(kb[:0])
		if ok && cur.key == string(kb) {
			cur.group = *g // the next pass may pass these buckets again
			cur.seen = pass
			continue
		}
		gs := &groupState{group: *g, key: string(kb), seen: pass}
		changed[g.ID] = gs
		if !ok {
			// Add or replace: after a restart of the agent the switch still has the groups the
			// previous connection installed, which this one does not know.
			res.Added++
			msgs = append(msgs, bundleMsg{group: &gs.group, groupCmd: groupAddOrMod})
		} else {
			res.Modified++
			msgs = append(msgs, bundleMsg{group: &gs.group, groupCmd: openflow15.OFPGC_MODIFY})
		}
	}
	var deleted []uint32
	for id, gs := range b.groups {
		if gs.seen != pass && changed[id] == nil {
			res.Deleted++
			deleted = append(deleted, id)
			msgs = append(msgs, bundleMsg{group: &Group{ID: id}, groupCmd: openflow15.OFPGC_DELETE})
		}
	}
	if err := b.sendBundle(ctx, msgs); err != nil {
		return SyncResult{}, fmt.Errorf("syncing groups on bridge %q: %w", b.opts.Bridge, err)
	}
	for id, gs := range changed {
		b.groups[id] = gs
	}
	for _, id := range deleted {
		delete(b.groups, id)
	}
	return res, nil
}

// sameBuckets tells whether a and b are the same slice (not merely equal ones).
func sameBuckets(a, b []Bucket) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}
