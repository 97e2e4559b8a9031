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

// countTable counts one table's flows on the switch by identity (table, priority, cookie), as the
// replies come: a dump of every table at 5,000 Nodes is some 100,000 flows, which libOpenflow
// decodes into trees of objects; kept until the comparison, they made the heap of a verification
// (every 10 s) larger than what the agent holds (bench-scale, issue 64).
func (b *Bridge) countTable(ctx context.Context, table uint8) (map[flowID]int, error) {
	count := map[flowID]int{}
	err := b.eachFlow(ctx, table, 0, 0, func(fd *openflow15.FlowDesc) {
		count[flowID{table, fd.Priority, fd.Cookie}]++
	})
	return count, err
}

// eachFlow requests the flows of one table whose cookie equals cookie under cookieMask and calls
// visit with each as its multipart reply arrives; nothing of a reply is kept once visited.
func (b *Bridge) eachFlow(ctx context.Context, table uint8, cookie, cookieMask uint64, visit func(*openflow15.FlowDesc)) error {
	sw, down, err := b.currentSwitch()
	if err != nil {
		return err
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
		return fmt.Errorf("requesting flows of table %d: %w", table, err)
	}
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for {
		select {
		case rep := <-ch:
			for _, m := range rep.Body {
				if fd, ok := m.(*openflow15.FlowDesc); ok {
					visit(fd)
				}
			}
			if rep.Flags&openflow15.OFPMPF_REPLY_MORE == 0 {
				return nil
			}
		case <-ctx.Done():
			return fmt.Errorf("dumping table %d: %w", table, ctx.Err())
		case <-down:
			// The switch went (ovs-vswitchd restarted): no reply will come on this connection, and
			// the replay on the next one waits for mu, which our caller holds.
			return fmt.Errorf("dumping table %d: %w", table, errDisconnected)
		case <-timeout.C:
			return fmt.Errorf("dumping table %d: no complete reply", table)
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
	got := make(map[uint8]map[flowID]int, len(snap.tables))
	var dumpErr error
	for _, table := range snap.tables {
		count, err := b.countTable(ctx, table)
		if err != nil {
			dumpErr = err
			break
		}
		got[table] = count
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
		d, _ := snap.check(b.flows, table, got[table], touched)
		diffs = append(diffs, d...)
	}
	sortDifferences(diffs)
	return diffs, nil
}

// flowSnapshot counts the installed-flow cache's flows by table and identity, for a comparison with
// the switch. It holds counts, not the flows: the flows of an identity the switch lacks are looked up
// in the cache when found (rarely).
type flowSnapshot struct {
	byTable    map[uint8]map[flowID]int
	categories map[uint8]bool
	tables     []uint8
}

// snapshot counts the cache's flows by table and identity; the caller holds b.mu.
func (b *Bridge) snapshot() flowSnapshot {
	s := flowSnapshot{byTable: map[uint8]map[flowID]int{}, categories: map[uint8]bool{}}
	for _, c := range b.flows {
		t := s.byTable[c.table()]
		if t == nil {
			t = map[flowID]int{}
			s.byTable[c.table()] = t
		}
		t[c.id()]++
		s.categories[c.category] = true
	}
	for t := range s.byTable {
		s.tables = append(s.tables, t)
	}
	slices.Sort(s.tables)
	return s
}

// check compares one table's flows on the switch (counted by identity) with the snapshot, leaving
// out the identities in skip; it also returns the cached flows of the identities the switch has
// fewer of than the cache (all of them: which one of several flows with the same cookie is missing
// is not known from the counts), found in flows, the cache, whose flows of those identities did not
// change since the snapshot (a changed identity is in skip, or the caller held b.mu throughout).
// The caller holds b.mu (missing flows are rendered).
func (s flowSnapshot) check(flows flowSet, table uint8, got map[flowID]int, skip map[flowID]bool) ([]Difference, []*cached) {
	var diffs []Difference
	want := s.byTable[table]
	for k, n := range got {
		if k.cookie == 0 || !s.categories[CookieCategory(k.cookie)] || skip[k] {
			continue
		}
		for range n - want[k] {
			diffs = append(diffs, Difference{Kind: Unexpected, Flow: fmt.Sprintf("cookie=%#x, table=%d, priority=%d", k.cookie, table, k.priority)})
		}
	}
	short := map[flowID]int{} // identity -> how many of its flows the switch has
	for k, w := range want {
		if n := got[k]; n < w && !skip[k] {
			short[k] = n
		}
	}
	if len(short) == 0 {
		return diffs, nil
	}
	// Which of several flows with the same cookie is missing is not known from the counts; report
	// the candidates. Only these are rendered.
	byID := map[flowID][]*cached{}
	for _, c := range flows {
		k := c.id()
		if _, ok := short[k]; ok {
			byID[k] = append(byID[k], c)
		}
	}
	var missing []*cached
	for k, cs := range byID {
		missing = append(missing, cs...)
		texts := make([]string, len(cs))
		for i, c := range cs {
			f := c.flow(nil)
			texts[i] = f.String()
		}
		slices.Sort(texts)
		for _, t := range texts[min(short[k], len(texts)):] {
			diffs = append(diffs, Difference{Kind: Missing, Flow: t})
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
		got, err := b.countTable(ctx, table)
		if err != nil {
			return nil, nil, err
		}
		d, m := snap.check(b.flows, table, got, nil)
		diffs = append(diffs, d...)
		missing = append(missing, m...)
	}
	sortDifferences(diffs)
	return diffs, missing, nil
}
