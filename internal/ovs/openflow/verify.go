package openflow

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"antrea.io/libOpenflow/common"
	"antrea.io/libOpenflow/openflow15"
	"antrea.io/libOpenflow/util"
	"antrea.io/ofnet/ofctrl"
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

// countFlows counts the flows of tables on the switch by identity (table, priority, cookie). It
// dumps them over a connection of its own and reads only those three fields of each flow from the
// replies' bytes: decoded by libOpenflow (the match and the actions of each flow as a tree of
// objects), the dump of every table made a third of what an idle agent allocated, and most of its
// CPU (bench-scale, issue 64: some 100,000 flows every 10 s at 5,000 Nodes). The tables' requests
// go together and their replies are counted as they come; nothing of a reply is kept.
//
// The bundles that change the switch go over connections of their own too (bundleConn) and are
// answered before the cache records them, so this connection sees what the cache holds but for
// changes under way, which Verify leaves out (touched) and compare excludes (it holds b.mu).
func (b *Bridge) countFlows(ctx context.Context, tables []uint8) (map[uint8]map[flowID]int, error) {
	conn, err := ofctrl.DialUnixOrNamedPipe(b.opts.Address)
	if err != nil {
		return nil, fmt.Errorf("connecting to the switch to dump its flows: %w", err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	w := bufio.NewWriter(conn)
	hello, err := common.NewHello(openflow15.VERSION)
	if err != nil {
		return nil, err
	}
	hello.Header.Xid = 1
	if err := writeMessage(w, hello); err != nil {
		return nil, fmt.Errorf("saying hello to the switch: %w", err)
	}
	got := make(map[uint8]map[flowID]int, len(tables))
	pending := make(map[uint32]uint8, len(tables))
	for i, table := range tables {
		req := openflow15.NewFlowStatsRequest()
		req.TableId = table
		mp := &openflow15.MultipartRequest{Header: openflow15.NewOfp15Header(), Type: openflow15.MultipartType_FlowDesc, Body: []util.Message{req}}
		mp.Header.Type = openflow15.Type_MultiPartRequest
		mp.Xid = uint32(2 + i)
		if err := writeMessage(w, mp); err != nil {
			return nil, fmt.Errorf("requesting the flows of table %d: %w", table, err)
		}
		got[table] = map[flowID]int{}
		pending[mp.Xid] = table
	}
	// A switch that reads nothing for dumpReplyTimeout is stuck: the writes (the requests, and the
	// answers to its echo requests) give up then too.
	_ = conn.SetWriteDeadline(time.Now().Add(dumpReplyTimeout))
	if err := w.Flush(); err != nil {
		return nil, fmt.Errorf("requesting the switch's flows: %w", err)
	}
	r := bufio.NewReaderSize(conn, 64<<10)
	var body []byte
	for len(pending) > 0 {
		// No reply for dumpReplyTimeout: the switch is stuck or gone (a restart closes the
		// connection, which ends the read at once).
		_ = conn.SetReadDeadline(time.Now().Add(dumpReplyTimeout))
		var hdr [8]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return nil, dumpReadError(ctx, err)
		}
		typ, length, xid := hdr[1], binary.BigEndian.Uint16(hdr[2:4]), binary.BigEndian.Uint32(hdr[4:8])
		if length < 8 {
			return nil, fmt.Errorf("dumping the switch's flows: invalid OpenFlow message length %d", length)
		}
		body = slices.Grow(body[:0], int(length)-8)[:length-8]
		if _, err := io.ReadFull(r, body); err != nil {
			return nil, dumpReadError(ctx, err)
		}
		table, ours := pending[xid]
		switch typ {
		case openflow15.Type_EchoRequest:
			_ = conn.SetWriteDeadline(time.Now().Add(dumpReplyTimeout))
			reply := binary.BigEndian.AppendUint32([]byte{openflow15.VERSION, openflow15.Type_EchoReply, hdr[2], hdr[3]}, xid)
			if _, err := conn.Write(append(reply, body...)); err != nil {
				return nil, fmt.Errorf("answering the switch's echo: %w", err)
			}
		case openflow15.Type_Error:
			if ours {
				e := parseError(xid, body)
				return nil, fmt.Errorf("the switch refused the dump of table %d: %s", table, e.String())
			}
		case openflow15.Type_MultiPartReply:
			if !ours {
				continue
			}
			more, err := countReply(body, got[table])
			if err != nil {
				return nil, fmt.Errorf("dumping table %d: %w", table, err)
			}
			if !more {
				delete(pending, xid)
			}
		}
	}
	return got, nil
}

// dumpReplyTimeout is how long countFlows waits for the switch's next message.
const dumpReplyTimeout = 10 * time.Second

// dumpReadError says why reading a dump's replies failed: ctx ended (which closes the connection),
// the switch sent nothing for dumpReplyTimeout, or the connection went (ovs-vswitchd stopped).
func dumpReadError(ctx context.Context, err error) error {
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("dumping the switch's flows: %w", ctx.Err())
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("dumping the switch's flows: no reply in %v", dumpReplyTimeout)
	default:
		return fmt.Errorf("dumping the switch's flows: %w (%v)", errDisconnected, err)
	}
}

// flowDescHead is the part of an OpenFlow 1.5 flow description (ofp_flow_desc) before its match:
// length (2), pad (2), table_id (1), pad (1), priority (2), idle_timeout (2), hard_timeout (2),
// flags (2), importance (2), cookie (8).
const flowDescHead = 24

// countReply counts the flows of one multipart reply to a flow dump (body is the message after its
// OpenFlow header) into count by identity, and reports whether more replies follow
// (OFPMPF_REPLY_MORE). A reply that is not a flow description, or whose descriptions do not tile
// it, is an error: nothing of it is counted.
func countReply(body []byte, count map[flowID]int) (more bool, err error) {
	if len(body) < 8 {
		return false, fmt.Errorf("multipart reply of %d bytes", len(body))
	}
	if typ := binary.BigEndian.Uint16(body[0:2]); typ != openflow15.MultipartType_FlowDesc {
		return false, fmt.Errorf("multipart reply of type %d to a flow dump", typ)
	}
	more = binary.BigEndian.Uint16(body[2:4])&openflow15.OFPMPF_REPLY_MORE != 0
	for p := body[8:]; len(p) > 0; {
		if len(p) < flowDescHead {
			return false, fmt.Errorf("flow description cut short: %d bytes left", len(p))
		}
		n := int(binary.BigEndian.Uint16(p[0:2]))
		if n < flowDescHead || n > len(p) {
			return false, fmt.Errorf("flow description of length %d with %d bytes left", n, len(p))
		}
		p = p[n:]
	}
	for p := body[8:]; len(p) > 0; {
		count[flowID{p[4], binary.BigEndian.Uint16(p[6:8]), binary.BigEndian.Uint64(p[16:24])}]++
		p = p[binary.BigEndian.Uint16(p[0:2]):]
	}
	return more, nil
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
	got, dumpErr := b.countFlows(ctx, snap.tables)
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
	got, err := b.countFlows(ctx, snap.tables)
	if err != nil {
		return nil, nil, err
	}
	for _, table := range snap.tables {
		d, m := snap.check(b.flows, table, got[table], nil)
		diffs = append(diffs, d...)
		missing = append(missing, m...)
	}
	sortDifferences(diffs)
	return diffs, missing, nil
}
