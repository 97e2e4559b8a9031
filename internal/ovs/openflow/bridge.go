package openflow

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"antrea.io/libOpenflow/openflow15"
	"antrea.io/ofnet/ofctrl"
	"github.com/go-logr/logr"

	"github.com/winnet-io/winnet/internal/groupcommit"
)

// Cookie layout: | round (16) | category (8) | object id (40) |.
const (
	roundShift    = 48
	categoryShift = 40
	// RoundMask selects the round bits of a cookie.
	RoundMask uint64 = 0xffff << roundShift
	// CategoryMask selects the category bits of a cookie.
	CategoryMask uint64 = 0xff << categoryShift
	// ObjectMask selects the object id bits of a cookie.
	ObjectMask uint64 = 1<<categoryShift - 1

	// RoundExternalID is the bridge external_ids key holding the current round.
	RoundExternalID = "winnet-flow-round"
)

// MakeCookie composes a cookie.
func MakeCookie(round uint16, category uint8, object uint64) uint64 {
	return uint64(round)<<roundShift | uint64(category)<<categoryShift | object&ObjectMask
}

// CookieRound extracts the round of a cookie.
func CookieRound(c uint64) uint16 { return uint16(c >> roundShift) }

// CookieCategory extracts the category of a cookie.
func CookieCategory(c uint64) uint8 { return uint8(c >> categoryShift) }

// RoundStore persists the round in the bridge's external_ids; the ovsdb
// package's Client implements it.
type RoundStore interface {
	BridgeExternalIDs(ctx context.Context, bridge string) (map[string]string, error)
	SetBridgeExternalIDs(ctx context.Context, bridge string, ids map[string]string) (bool, error)
}

// Options configures a bridge connection.
type Options struct {
	// Bridge is the bridge name.
	Bridge string
	// Address is the bridge's management socket (Linux) or named pipe
	// (Windows); empty means the platform default for Bridge.
	Address string
	// Rounds persists the round; required.
	Rounds RoundStore
	// RetryInterval between connection attempts; default 100ms.
	RetryInterval time.Duration
	// ConnectTimeout bounds the first connection; default 10s.
	ConnectTimeout time.Duration
	// OnReplay is called after flows were replayed following a reconnection
	// (an ovs-vswitchd restart), with the new round.
	OnReplay func(round uint16)
	// Logger overrides the logger of the context given to Connect.
	Logger *logr.Logger
	// NoFlowMonitor turns off the flow monitor that puts back, at once, flows someone else
	// deleted from the switch (see monitor.go): drift is then found by Verify only.
	NoFlowMonitor bool
}

// cached is an installed flow. It is held as compactly as the Syncs allow: a node of a cluster of
// 5,000 Nodes installs 200,000 flows and more (bench-scale, issue 64). The match is kept only in the
// key, which encodes it whole (decodeMatch reads it back when the flow is sent or shown), and the
// actions only as Actions (their key is computed again when a Sync compares them).
type cached struct {
	key     string // Flow.appendMatchKey: table, priority and match
	actions []Action
	cookie  uint64 // the full cookie (round and category)
	// seen is the last Sync pass that desired the flow: it finds duplicates and leftovers
	// without building a map of the desired flows.
	seen     uint64
	category uint8
	// stale makes the next Sync send the flow again (Invalidate).
	stale bool
	// removed is set once the flow is deleted or replaced: a lastOrder entry is then a miss.
	removed bool
	// objectPos is the flow's position in its object's list (byObject), for its removal.
	objectPos int32
}

func (c *cached) table() uint8     { return c.key[0] }
func (c *cached) priority() uint16 { return uint16(c.key[1])<<8 | uint16(c.key[2]) }
func (c *cached) id() flowID       { return flowID{c.table(), c.priority(), c.cookie} }
func (c *cached) object() uint64   { return c.cookie & ObjectMask }

// flow returns the installed flow, its match decoded into match's storage (nil: a new slice of
// the match's length).
func (c *cached) flow(match []MatchField) Flow {
	if match == nil {
		match = make([]MatchField, 0, countMatch(c.key))
	}
	return Flow{Table: c.table(), Priority: c.priority(), Cookie: c.cookie, Match: decodeMatch(c.key, match[:0]), Actions: c.actions}
}

// flowSet holds installed flows by key.
type flowSet map[string]*cached

// flowIndex is a set of installed flows: a pointer is a smaller key than the flow's key (the
// indexes hold every flow once more).
type flowIndex map[*cached]struct{}

// groupState is an installed group: seen is the last SyncGroups pass that desired it.
type groupState struct {
	group Group
	seen  uint64
}

// Bridge is the OpenFlow connection to one bridge, with the installed-flow cache.
type Bridge struct {
	opts Options
	log  logr.Logger
	ctrl *ofctrl.Controller
	// unsplice stops the splice of the switch's address (splice); set once by Connect.
	unsplice func()

	connMu    sync.Mutex
	sw        *ofctrl.OFSwitch
	connected chan struct{} // closed while connected
	// down is closed when the connection in sw goes (one per connection): a request waiting for a
	// reply on it stops waiting then, instead of until its timeout while it holds mu.
	down     chan struct{}
	everConn bool
	connErr  chan error

	// frozen is set by Freeze: no change is sent to the switch any more.
	frozen atomic.Bool
	// previous is the round the bridge recorded before Connect advanced it (0: none); set once.
	previous uint16

	// packetIn are the handlers of packet-ins by cookie category (SetPacketInHandler).
	packetIn   packetInHandlers
	packetInMu packetInLock

	mu sync.Mutex // serialises Sync, SyncGroups, replay, Verify
	// syncs holds the Syncs waiting for mu; whoever takes mu next sends them (see sync).
	syncs groupcommit.Queue[*syncReq]
	// bundles counts the bundles the switch committed; bundleConns keeps their connection.
	bundles     atomic.Uint64
	bundleConns bundleConns
	round       uint16
	flows       flowSet
	byCategory  map[uint8]flowIndex
	// byObject indexes each category's flows by cookie object, for SyncObject; only categories
	// synced by object have it.
	// Each object's flows are a list (cached.objectPos), smaller than a map for the few flows an
	// object has (a Service's: 10,000 Services).
	byObject map[uint8]map[uint64][]*cached
	groups   map[uint32]*groupState
	// groupPass numbers SyncGroups passes for groupState.seen; groupKeyBuf and curGroupKeyBuf (an
	// installed group's) are reused for keys.
	groupPass      uint64
	groupKeyBuf    []byte
	curGroupKeyBuf []byte
	// lastOrder holds each category's flows in the order its last whole-category Sync desired
	// them: a Sync that desires the same flows in the same order (desired sets are computed
	// deterministically) finds each by position rather than by a lookup in the large flows map.
	lastOrder map[uint8][]*cached
	// pass numbers Syncs for cached.seen; keyBuf, actionsBuf and curActionsBuf (an installed
	// flow's) are reused to build keys.
	pass          uint64
	keyBuf        []byte
	actionsBuf    []byte
	curActionsBuf []byte

	statsMu sync.Mutex
	stats   map[uint32]chan *openflow15.MultipartReply

	// invalidations counts Invalidate calls.
	invalidations atomic.Uint64
	// verifyMu serialises Verify calls; touched collects, while one dumps the switch, the
	// identities of the flows changed meanwhile (guarded by mu; nil otherwise).
	verifyMu sync.Mutex
	touched  map[flowID]bool

	// repairs collects the flow monitor's reports for repairFlows; repaired counts the flows put
	// back (see monitor.go).
	repairs  repairQueue
	repaired atomic.Uint64
	// ownRemovals holds the deletions the bridge sent whose removal reports are still expected, with
	// when each expectation expires; guarded by mu.
	ownRemovals map[flowID][]time.Time

	replays  chan struct{}
	closed   chan struct{}
	closeOne sync.Once
	wg       sync.WaitGroup
}

var errNotConnected = errors.New("not connected to the switch")

// errDisconnected ends a request whose connection to the switch went before its reply came.
var errDisconnected = errors.New("the switch disconnected before it replied")

// Connect opens the OpenFlow connection, loads and advances the round, and
// waits for the switch. It reconnects forever afterwards; after every
// reconnection it replays all flows and groups in a new round and removes the
// previous round's.
func Connect(ctx context.Context, opts Options) (*Bridge, error) {
	log := logr.FromContextOrDiscard(ctx)
	if opts.Logger != nil {
		log = *opts.Logger
	}
	if opts.Rounds == nil {
		return nil, fmt.Errorf("connecting to bridge %q: Options.Rounds is required", opts.Bridge)
	}
	if opts.Address == "" {
		opts.Address = DefaultAddress(opts.Bridge)
	}
	if opts.RetryInterval == 0 {
		opts.RetryInterval = 100 * time.Millisecond
	}
	if opts.ConnectTimeout == 0 {
		opts.ConnectTimeout = 10 * time.Second
	}
	b := &Bridge{
		opts:       opts,
		log:        log.WithName("openflow").WithValues("bridge", opts.Bridge),
		connected:  make(chan struct{}),
		connErr:    make(chan error, 1),
		flows:      flowSet{},
		byCategory: map[uint8]flowIndex{},
		byObject:   map[uint8]map[uint64][]*cached{},
		lastOrder:  map[uint8][]*cached{},
		groups:     map[uint32]*groupState{},
		stats:      map[uint32]chan *openflow15.MultipartReply{},
		replays:    make(chan struct{}, 1),
		closed:     make(chan struct{}),
		repairs:    repairQueue{wake: make(chan struct{}, 1)},
		unsplice:   func() {},
	}
	previous, round, err := b.nextRound(ctx)
	if err != nil {
		return nil, err
	}
	b.previous, b.round = previous, round
	// Every connection to the switch (ofctrl's, the bundle and monitor connections) goes through
	// splice: on Windows a private pipe of the agent's, whose every connection is joined to OVS's
	// pipe only once its server proved to be SYSTEM or an administrator (splice_windows.go).
	address, unsplice, err := splice(ctx, b.log, opts.Address)
	if err != nil {
		return nil, fmt.Errorf("connecting to bridge %q at %q: %w", opts.Bridge, opts.Address, err)
	}
	b.opts.Address, b.unsplice = address, unsplice
	b.ctrl = ofctrl.NewController(&app{b})
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		if err := b.ctrl.Connect(b.opts.Address); err != nil {
			b.connErr <- err
		}
	}()
	b.log.V(1).Info("Connecting to switch", "address", opts.Address, "round", round)
	cctx, cancel := context.WithTimeout(ctx, opts.ConnectTimeout)
	defer cancel()
	if err := b.waitConnected(cctx); err != nil {
		b.Close()
		return nil, fmt.Errorf("connecting to bridge %q at %q: %w", opts.Bridge, opts.Address, err)
	}
	if !opts.NoFlowMonitor {
		b.wg.Add(2)
		go b.watchFlows()
		go b.repairFlows()
	}
	return b, nil
}

// nextRound reads the persisted round (0 if none), increments it and persists it. Rounds start at 1.
func (b *Bridge) nextRound(ctx context.Context) (prev, next uint16, err error) {
	ids, err := b.opts.Rounds.BridgeExternalIDs(ctx, b.opts.Bridge)
	if err != nil {
		return 0, 0, fmt.Errorf("reading flow round of bridge %q: %w", b.opts.Bridge, err)
	}
	if p, perr := strconv.ParseUint(ids[RoundExternalID], 10, 16); perr == nil {
		prev = uint16(p)
	}
	next = prev + 1
	if next == 0 {
		next = 1
	}
	if _, err := b.opts.Rounds.SetBridgeExternalIDs(ctx, b.opts.Bridge, map[string]string{RoundExternalID: strconv.Itoa(int(next))}); err != nil {
		return 0, 0, fmt.Errorf("persisting flow round of bridge %q: %w", b.opts.Bridge, err)
	}
	return prev, next, nil
}

// Round is the current cookie round.
func (b *Bridge) Round() uint16 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.round
}

// PreviousRound is the round the bridge recorded before Connect advanced it — the previous
// connection's, typically the previous agent's — or 0 if it recorded none. Flows of that round that
// this connection has not replaced are leftovers: delete them with DeleteRound once every owner has
// synced its flows. A replay after an ovs-vswitchd restart deletes its own previous round and does
// not change this one.
func (b *Bridge) PreviousRound() uint16 { return b.previous }

// Replays receives a value after each replay that followed a reconnection.
func (b *Bridge) Replays() <-chan struct{} { return b.replays }

// Close stops the connection.
func (b *Bridge) Close() {
	b.closeOne.Do(func() {
		close(b.closed)
		// Disconnect the switch too: ofctrl keys switches by DPID in a
		// process-wide map, and a stale entry would capture the next connection.
		b.connMu.Lock()
		sw := b.sw
		b.connMu.Unlock()
		if sw != nil {
			sw.Disconnect()
		}
		b.ctrl.Delete()
		b.bundleConns.close()
		b.wg.Wait()
		b.unsplice()
	})
}

func (b *Bridge) waitConnected(ctx context.Context) error {
	for {
		b.connMu.Lock()
		ch := b.connected
		sw := b.sw
		b.connMu.Unlock()
		if sw != nil {
			select {
			case <-ch:
				return nil
			default:
			}
		}
		select {
		case <-ch:
		case err := <-b.connErr:
			return err
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", errNotConnected, ctx.Err())
		case <-b.closed:
			return errNotConnected
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// currentSwitch returns the connected switch and a channel closed when that connection goes.
func (b *Bridge) currentSwitch() (*ofctrl.OFSwitch, <-chan struct{}, error) {
	b.connMu.Lock()
	defer b.connMu.Unlock()
	if b.sw == nil {
		return nil, nil, errNotConnected
	}
	return b.sw, b.down, nil
}

// switchUp is called by ofctrl when the handshake completed.
func (b *Bridge) switchUp(sw *ofctrl.OFSwitch) {
	// ofctrl gives every connection a random controller ID (NXT_SET_CONTROLLER_ID), and OVS sends
	// the packet-in of a flow's output to CONTROLLER only to connections with ID 0 (connmgr.c
	// connmgr_send_async_msg): without this, packet-ins (SetPacketInHandler) never arrive.
	if err := sw.Send(openflow15.NewSetControllerID(packetInControllerID)); err != nil {
		b.log.Error(err, "Setting the controller ID for packet-ins failed")
	}
	b.connMu.Lock()
	reconnect := b.everConn
	b.everConn = true
	b.sw = sw
	b.down = make(chan struct{})
	b.connMu.Unlock()
	if !reconnect {
		b.markConnected()
		return
	}
	b.log.Info("Switch reconnected, replaying flows")
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		// Hold back Sync callers until the replay is in.
		if err := b.replay(); err != nil {
			b.log.Error(err, "Replaying flows after reconnection failed")
		}
		b.markConnected()
	}()
}

func (b *Bridge) markConnected() {
	b.connMu.Lock()
	defer b.connMu.Unlock()
	select {
	case <-b.connected:
	default:
		close(b.connected)
	}
}

func (b *Bridge) switchDown() {
	b.connMu.Lock()
	defer b.connMu.Unlock()
	b.sw = nil
	if b.down != nil {
		close(b.down)
		b.down = nil
	}
	select {
	case <-b.connected:
		b.connected = make(chan struct{})
	default:
	}
	b.log.Info("Switch disconnected")
}

// replay installs every cached flow and group in a new round and deletes
// the previous round's flows, in one bundle.
func (b *Bridge) replay() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b.mu.Lock()
	defer b.mu.Unlock()
	old := b.round
	_, round, err := b.nextRound(ctx)
	if err != nil {
		return err
	}
	msgs := make([]bundleMsg, 0, 2+len(b.groups)+len(b.flows))
	// Groups first (flows refer to them); delete all to add without conflict.
	msgs = append(msgs, bundleMsg{group: &Group{ID: openflow15.OFPG_ALL}, groupCmd: openflow15.OFPGC_DELETE})
	for _, g := range b.groups {
		msgs = append(msgs, bundleMsg{group: &g.group, groupCmd: openflow15.OFPGC_ADD})
	}
	for _, c := range b.flows {
		msgs = append(msgs, bundleMsg{flow: c, cookie: MakeCookie(round, c.category, c.cookie), command: openflow15.FC_ADD})
	}
	msgs = append(msgs, bundleMsg{raw: deleteRound(old)})
	if err := b.sendBundle(ctx, bundleMsgs(msgs)); err != nil {
		return fmt.Errorf("replaying %d flows in round %d: %w", len(b.flows), round, err)
	}
	for _, c := range b.flows {
		c.cookie = MakeCookie(round, c.category, c.cookie)
	}
	b.round = round
	b.log.Info("Replayed flows", "flows", len(b.flows), "groups", len(b.groups), "round", round, "previousRound", old)
	if b.opts.OnReplay != nil {
		b.opts.OnReplay(round)
	}
	select {
	case b.replays <- struct{}{}:
	default:
	}
	return nil
}

// DeleteRound deletes every flow whose cookie carries the given round (for
// example the previous agent's round after the initial Syncs).
func (b *Bridge) DeleteRound(ctx context.Context, round uint16) error {
	if err := b.waitConnected(ctx); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if round == b.round {
		return fmt.Errorf("refusing to delete the current round %d", round)
	}
	return b.sendBundle(ctx, bundleMsgs{{raw: deleteRound(round)}})
}

// deleteRound is a flow_mod deleting every flow of a round.
func deleteRound(round uint16) *openflow15.FlowMod {
	del := openflow15.NewFlowMod()
	del.Command = openflow15.FC_DELETE
	del.TableId = openflow15.OFPTT_ALL
	del.Cookie = uint64(round) << roundShift
	del.CookieMask = RoundMask
	return del
}

// SyncResult reports what a Sync sent.
type SyncResult struct {
	Added, Modified, Deleted int
}

// Mods is the number of flow_mods sent.
func (r SyncResult) Mods() int { return r.Added + r.Modified + r.Deleted }

// Sync makes the flows of one category equal to desired: it computes the
// minimal add/modify/delete set against the cache and sends it as one atomic
// bundle. The category and current round are stamped into each cookie.
func (b *Bridge) Sync(ctx context.Context, category uint8, desired []Flow) (SyncResult, error) {
	req := &syncReq{category: category, desired: desired}
	b.sync(ctx, req)
	return req.res, req.err
}

// SyncObject makes the flows of one object of a category (the object part of their cookies) equal
// to desired, leaving the category's other objects alone: a change to one route or Pod costs the
// flows of that object, not a pass over the whole category. Every desired flow's cookie object
// must be object.
func (b *Bridge) SyncObject(ctx context.Context, category uint8, object uint64, desired []Flow) (SyncResult, error) {
	for i := range desired {
		if desired[i].Cookie&ObjectMask != object&ObjectMask {
			return SyncResult{}, fmt.Errorf("syncing object %#x of category %d: flow %q belongs to object %#x", object, category, desired[i].String(), desired[i].Cookie&ObjectMask)
		}
	}
	o := object & ObjectMask
	req := &syncReq{category: category, object: &o, desired: desired}
	b.sync(ctx, req)
	return req.res, req.err
}

// ObjectFlows is what one object of a flow category wants in the switch, its groups included
// (SyncObjectWithGroups).
type ObjectFlows struct {
	Category uint8
	Object   uint64
	// Flows are the object's flows; the object part of every cookie must be Object.
	Flows []Flow
	// Groups are the groups the object's flows use, and only this object's: the new and changed
	// ones are installed before the flows. The bridge keeps their buckets, which the caller must
	// not modify afterwards.
	Groups []Group
	// GoneGroups are groups the object used before and no longer does: they are deleted after
	// the flows that referred to them.
	GoneGroups []uint32
}

// SyncObjectWithGroups is SyncObject for an object that has groups of its own (a Service): its
// flow changes and its group changes go in one atomic bundle, new and changed groups first, then
// the flows, then the deletion of its gone groups, so that no flow ever refers to a missing group.
// Only what changed is sent: one endpoint added to a Service is one group_mod. It returns what
// was sent of the flows and of the groups.
func (b *Bridge) SyncObjectWithGroups(ctx context.Context, o ObjectFlows) (flows, groups SyncResult, err error) {
	for i := range o.Flows {
		if o.Flows[i].Cookie&ObjectMask != o.Object&ObjectMask {
			return SyncResult{}, SyncResult{}, fmt.Errorf("syncing object %#x of category %d: flow %q belongs to object %#x", o.Object, o.Category, o.Flows[i].String(), o.Flows[i].Cookie&ObjectMask)
		}
	}
	object := o.Object & ObjectMask
	req := &syncReq{category: o.Category, object: &object, desired: o.Flows, groups: o.Groups, goneGroups: o.GoneGroups}
	b.sync(ctx, req)
	return req.res, req.groupRes, req.err
}

// SyncObjects is SyncObject for several objects of a category, in one bundle: the flows of each
// object are made equal to its desired flows (none deletes them), the category's other objects are
// left alone. The incremental NetworkPolicy compiler sends the peer flows an address changed so.
func (b *Bridge) SyncObjects(ctx context.Context, category uint8, desired map[uint64][]Flow) (SyncResult, error) {
	var res SyncResult
	if len(desired) == 0 {
		return res, nil
	}
	reqs := make([]*syncReq, 0, len(desired))
	for object, flows := range desired {
		for i := range flows {
			if flows[i].Cookie&ObjectMask != object&ObjectMask {
				return res, fmt.Errorf("syncing object %#x of category %d: flow %q belongs to object %#x", object, category, flows[i].String(), flows[i].Cookie&ObjectMask)
			}
		}
		o := object & ObjectMask
		reqs = append(reqs, &syncReq{category: category, object: &o, desired: flows})
	}
	if err := b.waitConnected(ctx); err != nil {
		return res, fmt.Errorf("syncing category %d on bridge %q: %w", category, b.opts.Bridge, err)
	}
	b.syncs.DoAll(&b.mu, reqs, func(queue []*syncReq) { b.commitSyncs(ctx, queue) })
	for _, r := range reqs {
		if r.err != nil {
			return res, r.err
		}
		res.Added += r.res.Added
		res.Modified += r.res.Modified
		res.Deleted += r.res.Deleted
	}
	return res, nil
}

// flowChange is one flow_mod of a Sync: an add (no prev), a modification, or a delete (no next).
type flowChange struct {
	prev, next *cached
}

// flowChanges is the bundle of a Sync: adds and modifications are sent as adds that replace the
// installed flow, deletes as strict deletes.
type flowChanges []flowChange

func (fc flowChanges) len() int { return len(fc) }

func (fc flowChanges) msg(i int) bundleMsg {
	if c := fc[i]; c.next != nil {
		return bundleMsg{flow: c.next, cookie: c.next.cookie, command: openflow15.FC_ADD}
	}
	c := fc[i].prev
	return bundleMsg{flow: c, cookie: c.cookie, command: openflow15.FC_DELETE_STRICT}
}

// syncReq is a Sync, SyncObject or SyncObjectWithGroups waiting for the bundle that carries it,
// and then its result.
type syncReq struct {
	category uint8
	object   *uint64 // nil: the whole category
	desired  []Flow
	// groups and goneGroups are the object's groups (SyncObjectWithGroups).
	groups     []Group
	goneGroups []uint32
	res        SyncResult
	groupRes   SyncResult
	err        error
}

func (r *syncReq) finish(res SyncResult, err error) { r.res, r.err = res, err }

// changes computes the flow and group changes of the request; order is that of diff.
func (b *Bridge) changes(r *syncReq) (flowChanges, groupChanges, []*cached, error) {
	gc, err := b.diffObjectGroups(r.groups, r.goneGroups)
	if err != nil {
		return nil, groupChanges{}, nil, fmt.Errorf("syncing category %d on bridge %q: %w", r.category, b.opts.Bridge, err)
	}
	changes, order, err := b.diff(r.category, r.object, r.desired)
	if err != nil {
		return nil, groupChanges{}, nil, fmt.Errorf("syncing category %d on bridge %q: %w", r.category, b.opts.Bridge, err)
	}
	return changes, gc, order, nil
}

// bundleParts is a bundle made of several parts, sent one after the other.
type bundleParts []bundleSource

func (p bundleParts) len() int {
	n := 0
	for _, s := range p {
		n += s.len()
	}
	return n
}

func (p bundleParts) msg(i int) bundleMsg {
	for _, s := range p {
		if i < s.len() {
			return s.msg(i)
		}
		i -= s.len()
	}
	panic(fmt.Sprintf("bundle message %d out of range", i))
}

// sync implements Sync (object nil: the whole category) and SyncObject. Calls that arrive while
// the switch works on a bundle share the next one (group commit): the call queues its request,
// and whoever takes the bridge's lock next sends every queued request, so concurrent changes of
// many Pods or routes cost a few bundles, not one round trip each behind one another.
func (b *Bridge) sync(ctx context.Context, req *syncReq) {
	if err := b.waitConnected(ctx); err != nil {
		req.finish(SyncResult{}, fmt.Errorf("syncing category %d on bridge %q: %w", req.category, b.opts.Bridge, err))
		return
	}
	b.syncs.Do(&b.mu, req, func(queue []*syncReq) { b.commitSyncs(ctx, queue) })
}

// commitSyncs sends the queued requests, as few bundles as batchLen allows; the caller holds b.mu.
func (b *Bridge) commitSyncs(ctx context.Context, queue []*syncReq) {
	if trace := sendTraceFrom(ctx); trace != nil {
		trace.Locked = time.Now()
	}
	for len(queue) > 0 {
		n := batchLen(queue)
		b.syncBatch(ctx, queue[:n])
		queue = queue[n:]
	}
}

// batchLen is how many of the queued requests can share a bundle: requests that touch distinct
// flows. Each object's request touches that object's flows, a whole-category Sync every flow of its
// category; a request that touches what an earlier one in the batch touches starts the next bundle.
// So a flow owner's periodic whole-category Sync (usually with nothing to change) that arrives
// among many Pods' or Services' changes joins their bundle instead of splitting it in two.
func batchLen(queue []*syncReq) int {
	type key struct {
		category uint8
		object   uint64
	}
	objects := map[key]bool{}
	categories := map[uint8]bool{} // categories with a request in the batch
	whole := map[uint8]bool{}      // categories synced whole in the batch
	for i, r := range queue {
		if r.object == nil {
			if categories[r.category] {
				return i
			}
			categories[r.category], whole[r.category] = true, true
			continue
		}
		k := key{r.category, *r.object}
		if whole[r.category] || objects[k] {
			return i
		}
		categories[r.category], objects[k] = true, true
	}
	return len(queue)
}

// syncBatch sends the requests in one bundle; the caller holds b.mu. If the switch rejects the
// bundle, it changed nothing: each request is then sent on its own, so that only a bad one fails.
// The bundle is not bound to the context of the call that sends it, which carries other calls'
// changes too.
func (b *Bridge) syncBatch(ctx context.Context, batch []*syncReq) {
	if len(batch) == 1 {
		b.syncOne(ctx, batch[0])
		return
	}
	ctx = context.WithoutCancel(ctx)
	type part struct {
		req     *syncReq
		changes flowChanges
		groups  groupChanges
		order   []*cached // a whole-category Sync's order (see diff)
		res     SyncResult
	}
	parts := make([]part, 0, len(batch))
	// The groups of every object first, then every flow change, then the groups' deletions.
	var setGroups, deleteGroups bundleMsgs
	var all flowChanges
	for _, r := range batch {
		changes, gc, order, err := b.changes(r)
		if err != nil {
			r.finish(SyncResult{}, err)
			continue
		}
		parts = append(parts, part{req: r, changes: changes, groups: gc, order: order, res: countChanges(changes)})
		all = append(all, changes...)
		setGroups = append(setGroups, gc.setMsgs...)
		deleteGroups = append(deleteGroups, gc.deleteMsgs...)
	}
	if len(all)+len(setGroups)+len(deleteGroups) > 0 {
		b.log.V(4).Info("Syncing flows of several objects in one bundle", "objects", len(parts), "mods", len(all), "groupMods", len(setGroups)+len(deleteGroups))
		if err := b.sendBundle(ctx, bundleParts{setGroups, all, deleteGroups}); err != nil {
			for i := len(parts) - 1; i >= 0; i-- {
				b.forgetAdds(parts[i].changes)
			}
			b.log.V(1).Info("The switch rejected a bundle of several objects' flows; sending each on its own", "objects", len(parts), "error", err.Error())
			for _, p := range parts {
				b.syncOne(ctx, p.req)
			}
			return
		}
	}
	for _, p := range parts {
		b.applyAll(p.req.category, p.changes, p.res)
		b.applyGroups(p.groups)
		b.rememberOrder(p.req.category, p.order)
		p.req.groupRes = p.groups.res
		p.req.finish(p.res, nil)
	}
}

// applyAll records a category's installed changes in the cache.
func (b *Bridge) applyAll(category uint8, changes flowChanges, res SyncResult) {
	if len(changes) > 0 && b.byCategory[category] == nil {
		b.byCategory[category] = make(flowIndex, res.Added)
	}
	for _, c := range changes {
		b.apply(c)
	}
}

// countChanges counts the adds, modifications and deletes of a Sync.
func countChanges(changes flowChanges) SyncResult {
	var res SyncResult
	for _, c := range changes {
		switch {
		case c.prev == nil:
			res.Added++
		case c.next == nil:
			res.Deleted++
		default:
			res.Modified++
		}
	}
	return res
}

// syncOne sends one request in a bundle of its own and finishes it; the caller holds b.mu.
func (b *Bridge) syncOne(ctx context.Context, r *syncReq) {
	changes, gc, order, err := b.changes(r)
	if err != nil {
		r.finish(SyncResult{}, err)
		return
	}
	res := countChanges(changes)
	if len(changes) == 0 && gc.res.Mods() == 0 {
		b.rememberOrder(r.category, order)
		r.finish(res, nil)
		return
	}
	b.log.V(4).Info("Syncing flows", "category", r.category, "add", res.Added, "modify", res.Modified, "delete", res.Deleted, "groupMods", gc.res.Mods())
	if err := b.sendBundle(ctx, bundleParts{gc.setMsgs, changes, gc.deleteMsgs}); err != nil {
		b.forgetAdds(changes)
		r.finish(SyncResult{}, fmt.Errorf("syncing category %d on bridge %q: %w", r.category, b.opts.Bridge, err))
		return
	}
	b.applyAll(r.category, changes, res)
	b.applyGroups(gc)
	b.rememberOrder(r.category, order)
	r.groupRes = gc.res
	r.finish(res, nil)
}

// rememberOrder keeps the order of a whole-category Sync (order nil: SyncObject) for the next.
func (b *Bridge) rememberOrder(category uint8, order []*cached) {
	if order != nil {
		b.lastOrder[category] = order
	}
}

// diff computes the flow_mods that make the category (or one object of it) equal to desired, and
// for a whole category the resulting flows in desired's order. It renders no text: flows are
// identified by binary keys built in reused buffers, so a desired flow that is already installed
// costs a look at the flow in the same position last time (or a map lookup) and two key
// comparisons. New flows are entered in b.flows at once (to find duplicates among them);
// forgetAdds removes them if the bundle fails.
func (b *Bridge) diff(category uint8, object *uint64, desired []Flow) (flowChanges, []*cached, error) {
	b.pass++
	pass := b.pass
	if len(b.flows) == 0 {
		b.flows = make(flowSet, len(desired)) // the first Sync after start: no rehashing as it grows
	}
	var changes flowChanges
	var last, order []*cached
	if object == nil {
		last, order = b.lastOrder[category], make([]*cached, len(desired))
	}
	kept := 0 // installed flows of the category (or object) still desired
	kb, ab, cb := b.keyBuf[:0], b.actionsBuf[:0], b.curActionsBuf[:0]
	defer func() { b.keyBuf, b.actionsBuf, b.curActionsBuf = kb, ab, cb }()
	for i := range desired {
		f := &desired[i]
		cookie := MakeCookie(b.round, category, f.Cookie)
		kb = f.appendMatchKey(kb[:0])
		ab = f.appendActionsKey(ab[:0])
		var cur *cached
		if i < len(last) && !last[i].removed && last[i].key == string(kb) {
			cur = last[i]
		} else {
			cur = b.flows[string(kb)]
		}
		if cur != nil && cur.seen == pass {
			b.forgetAdds(changes)
			return nil, nil, fmt.Errorf("duplicate flow %q", f.String())
		}
		if cur != nil {
			cur.seen = pass
			if cur.category == category && (object == nil || cur.object() == *object) {
				kept++
			}
			next := cur
			changed := cur.stale || cur.category != category || cur.cookie != cookie
			if !changed {
				cb = appendActionsKey(cb[:0], cur.actions)
				changed = !bytes.Equal(cb, ab)
			}
			if changed {
				next = newCached(cur.key, f, cookie, category, pass)
				changes = append(changes, flowChange{prev: cur, next: next})
			}
			if order != nil {
				order[i] = next
			}
			continue
		}
		next := newCached(string(kb), f, cookie, category, pass)
		b.flows[next.key] = next
		changes = append(changes, flowChange{next: next})
		if order != nil {
			order[i] = next
		}
	}
	if object != nil {
		current := b.objectIndex(category)[*object]
		if kept == len(current) {
			return changes, order, nil // nothing to delete: skip the pass over the installed flows
		}
		for _, c := range current {
			if c.seen != pass {
				changes = append(changes, flowChange{prev: c})
			}
		}
		return changes, order, nil
	}
	current := b.byCategory[category]
	if kept == len(current) {
		return changes, order, nil // nothing to delete: skip the pass over the installed flows
	}
	for c := range current {
		if c.seen != pass {
			changes = append(changes, flowChange{prev: c})
		}
	}
	return changes, order, nil
}

func newCached(key string, f *Flow, cookie uint64, category uint8, pass uint64) *cached {
	c := &cached{key: key, actions: f.Actions, cookie: cookie, category: category, seen: pass}
	// The record keeps the actions as long as the flow is installed: not the spare capacity of a
	// slice built by append.
	if cap(f.Actions) > len(f.Actions) {
		c.actions = slices.Clone(f.Actions)
	}
	return c
}

// forgetAdds removes the flows diff entered for adds that were not installed.
func (b *Bridge) forgetAdds(changes flowChanges) {
	for _, c := range changes {
		if c.prev == nil {
			delete(b.flows, c.next.key)
		}
	}
}

// apply records an installed change in the cache and its indexes.
func (b *Bridge) apply(c flowChange) {
	if b.touched != nil {
		for _, f := range []*cached{c.prev, c.next} {
			if f != nil {
				b.touched[f.id()] = true
			}
		}
	}
	if c.prev != nil {
		c.prev.removed = true
		b.unindex(c.prev)
	}
	if c.next == nil {
		delete(b.flows, c.prev.key)
		b.expectRemoval(c.prev)
		return
	}
	if c.prev != nil {
		b.flows[c.next.key] = c.next // diff entered adds already
	}
	set := b.byCategory[c.next.category]
	if set == nil {
		set = flowIndex{}
		b.byCategory[c.next.category] = set
	}
	set[c.next] = struct{}{}
	if objects, ok := b.byObject[c.next.category]; ok {
		addToObject(objects, c.next)
	}
}

// addToObject appends c to its object's list.
func addToObject(objects map[uint64][]*cached, c *cached) {
	id := c.object()
	c.objectPos = int32(len(objects[id]))
	objects[id] = append(objects[id], c)
}

// unindex removes a flow from its category's indexes.
func (b *Bridge) unindex(c *cached) {
	delete(b.byCategory[c.category], c)
	objects, ok := b.byObject[c.category]
	if !ok {
		return
	}
	id := c.object()
	list := objects[id]
	i := int(c.objectPos)
	if i >= len(list) || list[i] != c {
		i = slices.Index(list, c) // never: objectPos is kept with the list
		if i < 0 {
			return
		}
	}
	last := len(list) - 1
	list[i] = list[last]
	list[i].objectPos = int32(i)
	list[last] = nil
	if last == 0 {
		delete(objects, id)
		return
	}
	objects[id] = list[:last]
}

// objectIndex returns the category's flows by cookie object, building the index on first use.
func (b *Bridge) objectIndex(category uint8) map[uint64][]*cached {
	if idx, ok := b.byObject[category]; ok {
		return idx
	}
	idx := map[uint64][]*cached{}
	for c := range b.byCategory[category] {
		addToObject(idx, c)
	}
	b.byObject[category] = idx
	return idx
}

// Invalidate makes the next Sync of every category send all of its flows again, as adds that replace
// what the switch has. Call it when Verify reports drift (a flow deleted or changed behind our back).
func (b *Bridge) Invalidate() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range b.flows {
		c.stale = true
	}
	b.invalidations.Add(1)
}

// Invalidations counts the calls of Invalidate. An owner that syncs its flows object by object
// (SyncObject sends only the stale flows of its object) notes the count at its last whole-category
// Sync, and syncs its whole category again when the count changed.
func (b *Bridge) Invalidations() uint64 { return b.invalidations.Load() }

// Queued is the number of Syncs waiting for the bundle after the one in flight.
func (b *Bridge) Queued() int { return b.syncs.Len() }

// Bundles is the number of bundles the switch committed.
func (b *Bridge) Bundles() uint64 { return b.bundles.Load() }

// Installed returns the flows of a category as installed (with full cookies).
func (b *Bridge) Installed(category uint8) []Flow {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]Flow, 0, len(b.byCategory[category]))
	for c := range b.byCategory[category] {
		out = append(out, c.flow(nil))
	}
	return out
}

// InstalledObject returns the flows of one cookie object of a category as installed (with full
// cookies). An owner that syncs its category object by object can take its unchanged objects' flows
// from here for a whole-category Sync instead of keeping a copy of them.
func (b *Bridge) InstalledObject(category uint8, object uint64) []Flow {
	b.mu.Lock()
	defer b.mu.Unlock()
	set := b.objectIndex(category)[object&ObjectMask]
	out := make([]Flow, 0, len(set))
	for _, c := range set {
		out = append(out, c.flow(nil))
	}
	return out
}

// Count returns how many flows of a category are installed: Installed's length without its copy
// (a node network pass counts every category's flows, 200,000 and more in a cluster of 5,000 Nodes).
func (b *Bridge) Count(category uint8) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.byCategory[category])
}

// app adapts Bridge to ofctrl.AppInterface.
type app struct{ b *Bridge }

var _ ofctrl.AppInterface = (*app)(nil)
var _ ofctrl.ConnectionRetryControl = (*app)(nil)

func (a *app) SwitchConnected(sw *ofctrl.OFSwitch)               { a.b.switchUp(sw) }
func (a *app) SwitchDisconnected(*ofctrl.OFSwitch)               { a.b.switchDown() }
func (a *app) PacketRcvd(_ *ofctrl.OFSwitch, p *ofctrl.PacketIn) { a.b.receivePacketIn(p) }
func (a *app) FlowGraphEnabledOnSwitch() bool                    { return false }
func (a *app) TLVMapEnabledOnSwitch() bool                       { return true }
func (a *app) PortStatusRcvd(*openflow15.PortStatus)             {}
func (a *app) MaxRetry() int                                     { return int(a.b.opts.ConnectTimeout / a.b.opts.RetryInterval) }
func (a *app) RetryInterval() time.Duration                      { return a.b.opts.RetryInterval }
func (a *app) MultipartReply(_ *ofctrl.OFSwitch, rep *openflow15.MultipartReply) {
	a.b.multipartReply(rep)
}
