package openflow

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
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

// maxGroupModLen bounds the encoded length of one group_mod: an OpenFlow message's length is 16
// bits, and a bundle add wraps the group_mod in 16 more bytes. A group with more buckets than fit
// (about 500 DNAT buckets) is sent as several messages (groupMods).
const maxGroupModLen = 60000

// groupMods encodes the group as group_mods with the given command: one message, or, when its
// buckets do not fit in one, the command with the first buckets followed by OFPGC_INSERT_BUCKET
// messages appending the others (OpenFlow 1.5), which the bundle applies at once.
func (g Group) groupMods(command int) ([]util.Message, error) {
	var out []util.Message
	og := &ofctrl.Group{ID: g.ID, GroupType: ofctrl.GroupSelect}
	cmd := command
	length := 0
	flush := func() {
		msg := og.GetBundleMessage(cmd).GetMessage()
		if gm, ok := msg.(*openflow15.GroupMod); ok {
			switch cmd {
			case groupAddOrMod:
				// OVS checks the command bucket id of its extension commands: all buckets.
				gm.CommandBucketId = openflow15.OFPG_BUCKET_ALL
			case openflow15.OFPGC_INSERT_BUCKET:
				gm.CommandBucketId = openflow15.OFPG_BUCKET_LAST
			}
		}
		out = append(out, msg)
		og.Buckets, length, cmd = nil, 0, openflow15.OFPGC_INSERT_BUCKET
	}
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
		if length+int(bucket.Len()) > maxGroupModLen && len(og.Buckets) > 0 {
			flush()
		}
		og.Buckets = append(og.Buckets, bucket)
		length += int(bucket.Len())
	}
	flush()
	return out, nil
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
	gc := groupChanges{set: map[uint32]*groupState{}}
	for i := range desired {
		g := &desired[i]
		if cur, ok := b.groups[g.ID]; gc.set[g.ID] != nil || ok && cur.seen == pass {
			return SyncResult{}, fmt.Errorf("syncing groups on bridge %q: duplicate group %d", b.opts.Bridge, g.ID)
		}
		b.diffGroup(g, pass, &gc)
	}
	for id, gs := range b.groups {
		if gs.seen != pass && gc.set[id] == nil {
			gc.delete(id)
		}
	}
	if err := b.sendBundle(ctx, append(gc.setMsgs, gc.deleteMsgs...)); err != nil {
		return SyncResult{}, fmt.Errorf("syncing groups on bridge %q: %w", b.opts.Bridge, err)
	}
	b.applyGroups(gc)
	return gc.res, nil
}

// InstallGroups installs the new and changed groups of desired in one bundle and deletes none:
// install groups before the flows that refer to them, then SyncGroups the same groups once no flow
// refers to the others. It returns what was sent.
func (b *Bridge) InstallGroups(ctx context.Context, desired []Group) (SyncResult, error) {
	if err := b.waitConnected(ctx); err != nil {
		return SyncResult{}, fmt.Errorf("installing groups on bridge %q: %w", b.opts.Bridge, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	gc, err := b.diffObjectGroups(desired, nil)
	if err != nil {
		return SyncResult{}, fmt.Errorf("installing groups on bridge %q: %w", b.opts.Bridge, err)
	}
	if err := b.sendBundle(ctx, gc.setMsgs); err != nil {
		return SyncResult{}, fmt.Errorf("installing groups on bridge %q: %w", b.opts.Bridge, err)
	}
	b.applyGroups(gc)
	return gc.res, nil
}

// groupChanges are the group_mods that install new and changed groups (setMsgs, sent before the
// flows that refer to them) and delete groups (deleteMsgs, sent after the flows that referred to
// them), and what to record once the switch has them.
type groupChanges struct {
	set                 map[uint32]*groupState
	deleted             []uint32
	setMsgs, deleteMsgs bundleMsgs
	res                 SyncResult
}

// diffGroup adds to gc what installs g, if the switch does not have it already, and marks the
// installed group seen in pass.
func (b *Bridge) diffGroup(g *Group, pass uint64, gc *groupChanges) {
	cur, ok := b.groups[g.ID]
	if ok && sameBuckets(cur.group.Buckets, g.Buckets) {
		cur.seen = pass
		return
	}
	if ok {
		// The installed group's key is computed again rather than kept: 10,000 Services' groups
		// of five buckets each would keep about 3 MB of keys (bench-scale, issue 64).
		b.groupKeyBuf = g.appendKey(b.groupKeyBuf[:0])
		b.curGroupKeyBuf = cur.group.appendKey(b.curGroupKeyBuf[:0])
		if bytes.Equal(b.groupKeyBuf, b.curGroupKeyBuf) {
			cur.group = *g // the next pass may pass these buckets again
			cur.seen = pass
			return
		}
	}
	gs := &groupState{group: *g, seen: pass}
	gc.set[g.ID] = gs
	if !ok {
		// Add or replace: after a restart of the agent the switch still has the groups the
		// previous connection installed, which this one does not know.
		gc.res.Added++
		gc.setMsgs = append(gc.setMsgs, bundleMsg{group: &gs.group, groupCmd: groupAddOrMod})
		return
	}
	gc.res.Modified++
	gc.setMsgs = append(gc.setMsgs, bundleMsg{group: &gs.group, groupCmd: openflow15.OFPGC_MODIFY})
}

// delete adds the deletion of an installed group.
func (gc *groupChanges) delete(id uint32) {
	gc.res.Deleted++
	gc.deleted = append(gc.deleted, id)
	gc.deleteMsgs = append(gc.deleteMsgs, bundleMsg{group: &Group{ID: id}, groupCmd: openflow15.OFPGC_DELETE})
}

// applyGroups records installed group changes.
func (b *Bridge) applyGroups(gc groupChanges) {
	for id, gs := range gc.set {
		b.groups[id] = gs
	}
	for _, id := range gc.deleted {
		delete(b.groups, id)
	}
}

// diffObjectGroups computes the group changes of a SyncObjectWithGroups (or InstallGroups): the
// desired groups, and the deletion of those of the gone groups the switch has.
func (b *Bridge) diffObjectGroups(desired []Group, gone []uint32) (groupChanges, error) {
	b.groupPass++
	gc := groupChanges{set: map[uint32]*groupState{}}
	for i := range desired {
		g := &desired[i]
		if gc.set[g.ID] != nil || slices.Contains(gone, g.ID) {
			return groupChanges{}, fmt.Errorf("group %d is desired twice, or desired and gone", g.ID)
		}
		b.diffGroup(g, b.groupPass, &gc)
	}
	for _, id := range gone {
		if _, ok := b.groups[id]; ok {
			gc.delete(id)
		}
	}
	return gc, nil
}

// sameBuckets tells whether a and b are the same slice (not merely equal ones).
func sameBuckets(a, b []Bucket) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}
