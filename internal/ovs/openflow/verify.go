package openflow

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"antrea.io/libOpenflow/openflow15"
	"antrea.io/libOpenflow/util"
)

// DifferenceKind says how the switch differs from the desired flows.
type DifferenceKind string

const (
	// Missing: desired but not installed.
	Missing DifferenceKind = "missing"
	// Unexpected: installed with one of our cookies' categories but not desired.
	Unexpected DifferenceKind = "unexpected"
	// Mismatch: installed with another cookie or other actions.
	Mismatch DifferenceKind = "mismatch" // reserved: contents are not compared yet
)

// Difference is one flow that differs.
type Difference struct {
	Kind DifferenceKind
	// Flow is the desired flow's text, or table/priority/cookie of an unexpected one.
	Flow string
}

var statsXid atomic.Uint32

func init() { statsXid.Store(0x7000000) }

func (b *Bridge) multipartReply(rep *openflow15.MultipartReply) {
	b.statsMu.Lock()
	ch := b.stats[rep.Xid]
	b.statsMu.Unlock()
	if ch != nil {
		ch <- rep
	}
}

// dumpTable requests the flows of one table, following multipart replies.
func (b *Bridge) dumpTable(ctx context.Context, table uint8) ([]*openflow15.FlowDesc, error) {
	return b.flowStats(ctx, table, 0, 0)
}

// flowStats requests the flows of one table, following multipart replies.
func (b *Bridge) flowStats(ctx context.Context, table uint8, cookie, cookieMask uint64) ([]*openflow15.FlowDesc, error) {
	sw, down, err := b.currentSwitch()
	if err != nil {
		return nil, err
	}
	req := openflow15.NewFlowStatsRequest()
	req.TableId = table
	req.Cookie = cookie
	req.CookieMask = cookieMask
	mp := &openflow15.MultipartRequest{}
	mp.Header = openflow15.NewOfp15Header()
	mp.Header.Type = openflow15.Type_MultiPartRequest
	mp.Type = openflow15.MultipartType_FlowDesc
	mp.Xid = statsXid.Add(1)
	mp.Body = []util.Message{req}
	ch := make(chan *openflow15.MultipartReply, 64)
	b.statsMu.Lock()
	b.stats[mp.Xid] = ch
	b.statsMu.Unlock()
	defer func() {
		b.statsMu.Lock()
		delete(b.stats, mp.Xid)
		b.statsMu.Unlock()
	}()
	if err := sw.Send(mp); err != nil {
		return nil, fmt.Errorf("requesting flows of table %d: %w", table, err)
	}
	var out []*openflow15.FlowDesc
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for {
		select {
		case rep := <-ch:
			for _, m := range rep.Body {
				if fd, ok := m.(*openflow15.FlowDesc); ok {
					out = append(out, fd)
				}
			}
			if rep.Flags&openflow15.OFPMPF_REPLY_MORE == 0 {
				return out, nil
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("dumping table %d: %w", table, ctx.Err())
		case <-down:
			// The switch went (ovs-vswitchd restarted): no reply will come on this connection, and
			// the replay on the next one waits for mu, which our caller holds.
			return nil, fmt.Errorf("dumping table %d: %w", table, errDisconnected)
		case <-timeout.C:
			return nil, fmt.Errorf("dumping table %d: no complete reply", table)
		}
	}
}

// Verify compares the switch's flows, table by table for the tables we use,
// with the desired flows of every category and returns the differences.
//
// Flows are compared by table, priority and cookie (which carries category,
// object and round), counted: this finds missing flows, flows left from
// another round and unexpected flows of our categories. It does not compare
// match and action contents, because OVS re-encodes them (registers come back
// as OXM packet registers) and libOpenflow does not decode every field back.
//
// The switch is dumped without holding the bridge's lock, so that Syncs go on meanwhile (at 10,000
// Services the dump takes tens of milliseconds, hundreds on a loaded machine): the flows whose
// identity a Sync changed during the dump are left out of the comparison, since the dump may have
// seen them before or after the change; the next Verify compares them.
func (b *Bridge) Verify(ctx context.Context) ([]Difference, error) {
	if err := b.waitConnected(ctx); err != nil {
		return nil, err
	}
	b.verifyMu.Lock()
	defer b.verifyMu.Unlock()
	b.mu.Lock()
	snap := b.snapshot()
	round := b.round
	b.touched = map[flowID]bool{}
	b.mu.Unlock()
	got := make(map[uint8][]*openflow15.FlowDesc, len(snap.tables))
	var dumpErr error
	for _, table := range snap.tables {
		fds, err := b.dumpTable(ctx, table)
		if err != nil {
			dumpErr = err
			break
		}
		got[table] = fds
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	touched := b.touched
	b.touched = nil
	if dumpErr != nil {
		return nil, dumpErr
	}
	if b.round != round {
		return nil, nil // replayed in a new round meanwhile: every cookie changed; compare next time
	}
	var diffs []Difference
	for _, table := range snap.tables {
		d, _ := snap.check(table, got[table], touched)
		diffs = append(diffs, d...)
	}
	sortDifferences(diffs)
	return diffs, nil
}

// flowSnapshot is the installed-flow cache by table and identity, for a comparison with the switch.
type flowSnapshot struct {
	byTable    map[uint8]map[flowID][]*cached
	categories map[uint8]bool
	tables     []uint8
}

// snapshot takes the cache's flows by table and identity; the caller holds b.mu.
func (b *Bridge) snapshot() flowSnapshot {
	s := flowSnapshot{byTable: map[uint8]map[flowID][]*cached{}, categories: map[uint8]bool{}}
	for _, c := range b.flows {
		t := s.byTable[c.flow.Table]
		if t == nil {
			t = map[flowID][]*cached{}
			s.byTable[c.flow.Table] = t
		}
		k := flowID{c.flow.Table, c.flow.Priority, c.flow.Cookie}
		t[k] = append(t[k], c)
		s.categories[c.category] = true
	}
	for t := range s.byTable {
		s.tables = append(s.tables, t)
	}
	slices.Sort(s.tables)
	return s
}

// check compares one table's dumped flows with the snapshot, leaving out the identities in skip;
// it also returns the cached flows of the identities the switch has fewer of than the cache (all of
// them: which one of several flows with the same cookie is missing is not known from the counts).
// The caller holds b.mu (missing flows are rendered).
func (s flowSnapshot) check(table uint8, got []*openflow15.FlowDesc, skip map[flowID]bool) ([]Difference, []*cached) {
	var diffs []Difference
	var missing []*cached
	count := map[flowID]int{}
	for _, fd := range got {
		k := flowID{table, fd.Priority, fd.Cookie}
		count[k]++
		if count[k] > len(s.byTable[table][k]) && fd.Cookie != 0 && s.categories[CookieCategory(fd.Cookie)] && !skip[k] {
			diffs = append(diffs, Difference{Kind: Unexpected, Flow: fmt.Sprintf("cookie=%#x, table=%d, priority=%d", fd.Cookie, table, fd.Priority)})
		}
	}
	for k, want := range s.byTable[table] {
		if n := count[k]; n < len(want) && !skip[k] {
			// Which of several flows with the same cookie is missing is not known from the
			// counts; report the candidates. Only these are rendered.
			missing = append(missing, want...)
			texts := make([]string, len(want))
			for i, c := range want {
				texts[i] = c.flow.String()
			}
			slices.Sort(texts)
			for _, t := range texts[n:] {
				diffs = append(diffs, Difference{Kind: Missing, Flow: t})
			}
		}
	}
	return diffs, missing
}

func sortDifferences(diffs []Difference) {
	slices.SortFunc(diffs, func(a, b Difference) int { return strings.Compare(string(a.Kind)+a.Flow, string(b.Kind)+b.Flow) })
}

// compare is Verify under the bridge's lock (for the flow monitor's repair); it also returns the
// cached flows of the identities the switch has fewer of than the cache. The caller holds b.mu.
func (b *Bridge) compare(ctx context.Context) ([]Difference, []*cached, error) {
	snap := b.snapshot()
	var diffs []Difference
	var missing []*cached
	for _, table := range snap.tables {
		got, err := b.dumpTable(ctx, table)
		if err != nil {
			return nil, nil, err
		}
		d, m := snap.check(table, got, nil)
		diffs = append(diffs, d...)
		missing = append(missing, m...)
	}
	sortDifferences(diffs)
	return diffs, missing, nil
}
