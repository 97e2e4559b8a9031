package openflow

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"time"

	"antrea.io/libOpenflow/openflow15"
	"antrea.io/ofnet/ofctrl"
	"github.com/go-logr/logr"
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
}

type cached struct {
	flow     Flow // with the full cookie
	category uint8
	actions  string
}

type groupState struct {
	group Group
	text  string
}

// Bridge is the OpenFlow connection to one bridge, with the installed-flow cache.
type Bridge struct {
	opts Options
	log  logr.Logger
	ctrl *ofctrl.Controller

	connMu    sync.Mutex
	sw        *ofctrl.OFSwitch
	connected chan struct{} // closed while connected
	everConn  bool
	connErr   chan error

	mu         sync.Mutex // serialises Sync, SyncGroups, replay, Verify
	round      uint16
	flows      map[flowKey]*cached
	byCategory map[uint8]map[flowKey]struct{}
	// byObject indexes each category's flows by cookie object, for SyncObject.
	byObject map[uint8]map[uint64]map[flowKey]struct{}
	groups   map[uint32]*groupState

	statsMu sync.Mutex
	stats   map[uint32]chan *openflow15.MultipartReply

	replays  chan struct{}
	closed   chan struct{}
	closeOne sync.Once
	wg       sync.WaitGroup
}

var errNotConnected = errors.New("not connected to the switch")

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
		flows:      map[flowKey]*cached{},
		byCategory: map[uint8]map[flowKey]struct{}{},
		byObject:   map[uint8]map[uint64]map[flowKey]struct{}{},
		groups:     map[uint32]*groupState{},
		stats:      map[uint32]chan *openflow15.MultipartReply{},
		replays:    make(chan struct{}, 1),
		closed:     make(chan struct{}),
	}
	round, err := b.nextRound(ctx)
	if err != nil {
		return nil, err
	}
	b.round = round
	b.ctrl = ofctrl.NewController(&app{b})
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		if err := b.ctrl.Connect(opts.Address); err != nil {
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
	return b, nil
}

// nextRound reads the persisted round, increments it and persists it.
func (b *Bridge) nextRound(ctx context.Context) (uint16, error) {
	ids, err := b.opts.Rounds.BridgeExternalIDs(ctx, b.opts.Bridge)
	if err != nil {
		return 0, fmt.Errorf("reading flow round of bridge %q: %w", b.opts.Bridge, err)
	}
	var prev uint64
	if s, ok := ids[RoundExternalID]; ok {
		if prev, err = strconv.ParseUint(s, 10, 16); err != nil {
			prev = 0
		}
	}
	next := uint16(prev + 1)
	if next == 0 {
		next = 1
	}
	if _, err := b.opts.Rounds.SetBridgeExternalIDs(ctx, b.opts.Bridge, map[string]string{RoundExternalID: strconv.Itoa(int(next))}); err != nil {
		return 0, fmt.Errorf("persisting flow round of bridge %q: %w", b.opts.Bridge, err)
	}
	return next, nil
}

// Round is the current cookie round.
func (b *Bridge) Round() uint16 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.round
}

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
		b.wg.Wait()
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

func (b *Bridge) currentSwitch() (*ofctrl.OFSwitch, error) {
	b.connMu.Lock()
	defer b.connMu.Unlock()
	if b.sw == nil {
		return nil, errNotConnected
	}
	return b.sw, nil
}

// switchUp is called by ofctrl when the handshake completed.
func (b *Bridge) switchUp(sw *ofctrl.OFSwitch) {
	b.connMu.Lock()
	reconnect := b.everConn
	b.everConn = true
	b.sw = sw
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
	round, err := b.nextRound(ctx)
	if err != nil {
		return err
	}
	var msgs []bundleMsg
	// Groups first (flows refer to them); delete all to add without conflict.
	msgs = append(msgs, bundleMsg{group: &ofctrl.Group{ID: openflow15.OFPG_ALL}, groupCmd: openflow15.OFPGC_DELETE})
	for _, g := range b.groups {
		msgs = append(msgs, bundleMsg{group: g.group.ofGroup(), groupCmd: openflow15.OFPGC_ADD})
	}
	newCookies := make(map[flowKey]uint64, len(b.flows))
	for k, c := range b.flows {
		f := c.flow
		f.Cookie = MakeCookie(round, c.category, f.Cookie)
		fm, err := f.FlowMod(openflow15.FC_ADD)
		if err != nil {
			return err
		}
		msgs = append(msgs, bundleMsg{flow: fm})
		newCookies[k] = f.Cookie
	}
	del := openflow15.NewFlowMod()
	del.Command = openflow15.FC_DELETE
	del.TableId = openflow15.OFPTT_ALL
	del.Cookie = uint64(old) << roundShift
	del.CookieMask = RoundMask
	msgs = append(msgs, bundleMsg{flow: del})
	if err := b.sendBundle(ctx, msgs); err != nil {
		return fmt.Errorf("replaying %d flows in round %d: %w", len(b.flows), round, err)
	}
	for k, c := range newCookies {
		b.flows[k].flow.Cookie = c
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
	del := openflow15.NewFlowMod()
	del.Command = openflow15.FC_DELETE
	del.TableId = openflow15.OFPTT_ALL
	del.Cookie = uint64(round) << roundShift
	del.CookieMask = RoundMask
	return b.sendBundle(ctx, []bundleMsg{{flow: del}})
}

type bundleMsg struct {
	flow     *openflow15.FlowMod
	group    *ofctrl.Group
	groupCmd int
}

// sendBundle sends the messages as one atomic bundle. An add the switch
// rejects is only reported asynchronously, so the count Complete returns is
// compared with what was sent and the bundle is discarded on a mismatch: the
// switch is then left unchanged.
func (b *Bridge) sendBundle(ctx context.Context, msgs []bundleMsg) error {
	if len(msgs) == 0 {
		return nil
	}
	sw, err := b.currentSwitch()
	if err != nil {
		return err
	}
	tx := sw.NewTransaction(ofctrl.Atomic)
	if err := tx.Begin(); err != nil {
		return fmt.Errorf("opening bundle: %w", err)
	}
	for _, m := range msgs {
		if m.flow != nil {
			err = tx.AddFlow(m.flow)
		} else {
			err = tx.AddMessage(m.group.GetBundleMessage(m.groupCmd))
		}
		if err != nil {
			break
		}
		if ctx.Err() != nil {
			err = ctx.Err()
			break
		}
	}
	n, cerr := tx.Complete()
	if err == nil && cerr == nil {
		// ofctrl parses inbound messages on parallel goroutines, so the
		// close reply can overtake an error for an earlier add. OVS answers in
		// order: once the reply to a later request has been handled, the error
		// was read before it and only its goroutine may still be pending. Two
		// round trips give that goroutine a full extra round trip to deliver;
		// then count again.
		for range 2 {
			if err = b.roundTrip(ctx); err != nil {
				break
			}
			runtime.Gosched()
		}
		if err == nil {
			n, cerr = tx.Complete()
		}
	}
	if err == nil {
		err = cerr
	}
	if err != nil {
		if cerr == nil {
			_ = tx.Abort()
		}
		return fmt.Errorf("sending bundle of %d messages: %w", len(msgs), err)
	}
	if n != len(msgs) {
		if aerr := tx.Abort(); aerr != nil {
			return fmt.Errorf("switch rejected %d of %d bundle messages; discarding the bundle failed: %w", len(msgs)-n, len(msgs), aerr)
		}
		return fmt.Errorf("switch rejected %d of %d bundle messages; bundle discarded", len(msgs)-n, len(msgs))
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("committing bundle of %d messages: %w", len(msgs), err)
	}
	return nil
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
	return b.sync(ctx, category, nil, desired)
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
	return b.sync(ctx, category, &o, desired)
}

// sync implements Sync (object nil: the whole category) and SyncObject.
func (b *Bridge) sync(ctx context.Context, category uint8, object *uint64, desired []Flow) (SyncResult, error) {
	if err := b.waitConnected(ctx); err != nil {
		return SyncResult{}, fmt.Errorf("syncing category %d on bridge %q: %w", category, b.opts.Bridge, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var res SyncResult
	want := make(map[flowKey]*cached, len(desired))
	msgs := make([]bundleMsg, 0, 16)
	for i := range desired {
		f := desired[i]
		f.Cookie = MakeCookie(b.round, category, f.Cookie)
		k := f.key()
		if _, dup := want[k]; dup {
			return res, fmt.Errorf("syncing category %d on bridge %q: duplicate flow %q", category, b.opts.Bridge, f.String())
		}
		c := &cached{flow: f, category: category, actions: f.ActionsString()}
		want[k] = c
		if cur, ok := b.flows[k]; ok && cur.category == category && cur.flow.Cookie == f.Cookie && cur.actions == c.actions {
			continue
		}
		fm, err := f.FlowMod(openflow15.FC_ADD)
		if err != nil {
			return SyncResult{}, fmt.Errorf("syncing category %d on bridge %q: flow %q: %w", category, b.opts.Bridge, f.String(), err)
		}
		if _, ok := b.flows[k]; ok {
			res.Modified++
		} else {
			res.Added++
		}
		msgs = append(msgs, bundleMsg{flow: fm})
	}
	var gone []flowKey
	current := b.byCategory[category]
	if object != nil {
		current = b.objectIndex(category)[*object]
	}
	for k := range current {
		if _, ok := want[k]; ok {
			continue
		}
		f := b.flows[k].flow
		fm, err := f.FlowMod(openflow15.FC_DELETE_STRICT)
		if err != nil {
			return SyncResult{}, err
		}
		msgs = append(msgs, bundleMsg{flow: fm})
		gone = append(gone, k)
		res.Deleted++
	}
	if len(msgs) == 0 {
		return res, nil
	}
	b.log.V(4).Info("Syncing flows", "category", category, "add", res.Added, "modify", res.Modified, "delete", res.Deleted)
	if err := b.sendBundle(ctx, msgs); err != nil {
		return SyncResult{}, fmt.Errorf("syncing category %d on bridge %q: %w", category, b.opts.Bridge, err)
	}
	set := b.byCategory[category]
	if object == nil || set == nil {
		set = make(map[flowKey]struct{}, len(want))
	}
	// The per-object index exists only for categories synced by object; a whole-category Sync of
	// such a category rebuilds it.
	objects, indexed := b.byObject[category]
	if indexed && object == nil {
		objects = map[uint64]map[flowKey]struct{}{}
		b.byObject[category] = objects
	}
	for _, k := range gone {
		if indexed {
			delete(objects[b.flows[k].flow.Cookie&ObjectMask], k)
		}
		delete(b.flows, k)
		delete(set, k)
	}
	for k, c := range want {
		if prev, ok := b.flows[k]; ok {
			if idx, ok := b.byObject[prev.category]; ok {
				delete(idx[prev.flow.Cookie&ObjectMask], k)
			}
			if prev.category != category {
				delete(b.byCategory[prev.category], k)
			}
		}
		b.flows[k] = c
		set[k] = struct{}{}
		if indexed {
			id := c.flow.Cookie & ObjectMask
			if objects[id] == nil {
				objects[id] = map[flowKey]struct{}{}
			}
			objects[id][k] = struct{}{}
		}
	}
	b.byCategory[category] = set
	return res, nil
}

// objectIndex returns the category's flows by cookie object, building the index on first use.
func (b *Bridge) objectIndex(category uint8) map[uint64]map[flowKey]struct{} {
	if idx, ok := b.byObject[category]; ok {
		return idx
	}
	idx := map[uint64]map[flowKey]struct{}{}
	for k := range b.byCategory[category] {
		id := b.flows[k].flow.Cookie & ObjectMask
		if idx[id] == nil {
			idx[id] = map[flowKey]struct{}{}
		}
		idx[id][k] = struct{}{}
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
		c.actions = ""
	}
}

// Installed returns the flows of a category as installed (with full cookies).
func (b *Bridge) Installed(category uint8) []Flow {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]Flow, 0, len(b.byCategory[category]))
	for k := range b.byCategory[category] {
		out = append(out, b.flows[k].flow)
	}
	return out
}

// app adapts Bridge to ofctrl.AppInterface.
type app struct{ b *Bridge }

var _ ofctrl.AppInterface = (*app)(nil)
var _ ofctrl.ConnectionRetryControl = (*app)(nil)

func (a *app) SwitchConnected(sw *ofctrl.OFSwitch)           { a.b.switchUp(sw) }
func (a *app) SwitchDisconnected(*ofctrl.OFSwitch)           { a.b.switchDown() }
func (a *app) PacketRcvd(*ofctrl.OFSwitch, *ofctrl.PacketIn) {}
func (a *app) FlowGraphEnabledOnSwitch() bool                { return false }
func (a *app) TLVMapEnabledOnSwitch() bool                   { return true }
func (a *app) PortStatusRcvd(*openflow15.PortStatus)         {}
func (a *app) MaxRetry() int                                 { return int(a.b.opts.ConnectTimeout / a.b.opts.RetryInterval) }
func (a *app) RetryInterval() time.Duration                  { return a.b.opts.RetryInterval }
func (a *app) MultipartReply(_ *ofctrl.OFSwitch, rep *openflow15.MultipartReply) {
	a.b.multipartReply(rep)
}
