package openflow

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"antrea.io/libOpenflow/common"
	"antrea.io/libOpenflow/openflow15"
	"antrea.io/libOpenflow/util"
	"antrea.io/ofnet/ofctrl"
)

const (
	// bundleTimeout bounds one bundle transaction when the caller's context has no earlier deadline.
	bundleTimeout = 2 * time.Minute
	// maxWriteBuffer batches encoded messages into few writes; a small bundle gets a buffer
	// of about its size.
	maxWriteBuffer = 256 << 10
	// maxReportedErrors bounds how many rejected messages an error names.
	maxReportedErrors = 3
)

// bundleMsg is one message of a bundle, encoded only when it is written so that encoding overlaps
// with the switch's processing of the messages before it. Flows are encoded directly (wire.go),
// groups and other messages by libOpenflow.
type bundleMsg struct {
	flow    *cached
	cookie  uint64 // the cookie to send, which may differ from the flow's (a replay's new round)
	command uint8

	group    *Group
	groupCmd int

	raw util.Message // a message built by the caller (delete by cookie)
}

// addTo encodes the message into the bundle.
func (m *bundleMsg) addTo(tx *bundleTx) error {
	switch {
	case m.flow != nil:
		return tx.addFlow(m)
	case m.group != nil:
		gms, err := m.group.groupMods(m.groupCmd)
		if err != nil {
			return err
		}
		for _, gm := range gms {
			if err := tx.add(gm); err != nil {
				return err
			}
		}
		return nil
	case m.raw != nil:
		return tx.add(m.raw)
	}
	return errors.New("empty bundle message")
}

// appendFlowMod appends the flow message's flow_mod, its match decoded from the cache's key (on the
// stack, for a match of up to maxInlineMatch fields).
func (m *bundleMsg) appendFlowMod(b []byte, xid uint32) ([]byte, error) {
	var match [maxInlineMatch]MatchField
	f := m.flow.flow(match[:0])
	return f.appendFlowMod(b, m.command, m.cookie, xid)
}

// String names the message in errors.
func (m *bundleMsg) String() string {
	switch {
	case m.flow != nil:
		f := m.flow.flow(nil)
		f.Cookie = m.cookie
		return fmt.Sprintf("flow %q", f.String())
	case m.group != nil:
		text := m.group.String()
		if len(text) > maxGroupText {
			// A group of a thousand buckets would make an error of 100 KB.
			text = fmt.Sprintf("%s... (%d buckets)", text[:maxGroupText], len(m.group.Buckets))
		}
		return fmt.Sprintf("group %q", text)
	}
	return fmt.Sprintf("message %T", m.raw)
}

// maxGroupText is how much of a group's text an error names.
const maxGroupText = 1000

// bundleSource yields the messages of a bundle; each is built only when it is sent.
type bundleSource interface {
	len() int
	msg(i int) bundleMsg
}

// bundleMsgs is a bundle built in advance.
type bundleMsgs []bundleMsg

func (m bundleMsgs) len() int            { return len(m) }
func (m bundleMsgs) msg(i int) bundleMsg { return m[i] }

// sendBundle sends the messages as one atomic bundle and commits it only if the switch accepted
// every message; otherwise the switch is left unchanged. It uses the bridge's idle bundle
// connection when there is one: a new connection costs the switch a main-loop iteration to accept
// before it reads the bundle, and under load an iteration can take tens of milliseconds. If a
// reused connection turns out to be dead before the bundle was committed (ovs-vswitchd restarted
// while it was idle), the bundle is sent once more on a new one.
func (b *Bridge) sendBundle(ctx context.Context, src bundleSource) error {
	n := src.len()
	if n == 0 {
		return nil
	}
	err := b.onBundleConn(ctx, func(ctx context.Context, c *bundleConn) error {
		return c.send(ctx, src, min(maxWriteBuffer, 4096+256*n))
	})
	if err == nil {
		b.bundles.Add(1)
	}
	return err
}

// onBundleConn runs send, bounded by bundleTimeout, on the bridge's idle bundle connection, or a
// new one, and keeps the connection for the next caller unless it failed. A reused connection
// that turns out to be dead (errBundleLost: ovs-vswitchd restarted while it was idle) is replaced
// and send runs once more; a rejection (errBundleRejected) leaves the connection clean.
func (b *Bridge) onBundleConn(ctx context.Context, send func(context.Context, *bundleConn) error) error {
	if b.frozen.Load() {
		return ErrFrozen
	}
	ctx, cancel := context.WithTimeout(ctx, bundleTimeout)
	defer cancel()
	for attempt := 1; ; attempt++ {
		var c *bundleConn
		if attempt == 1 {
			c = b.bundleConns.take()
		}
		if c == nil {
			var err error
			if c, err = dialBundleConn(b.opts.Address); err != nil {
				return fmt.Errorf("opening bundle: %w", err)
			}
			b.bundleConns.dials.Add(1)
		}
		err := send(ctx, c)
		switch {
		case err == nil:
			b.bundleConns.put(c)
			return nil
		case errors.Is(err, errBundleLost) && c.reused && attempt == 1:
			c.close()
			b.log.V(1).Info("The idle bundle connection was closed by the switch; sending again on a new one", "error", err.Error())
			continue
		case errors.Is(err, errBundleRejected):
			b.bundleConns.put(c) // what was sent was discarded: the connection is clean
		default:
			c.close()
		}
		return err
	}
}

// Freeze stops every change to the switch: from then on each Sync, group change, round deletion, replay
// and conntrack flush fails with ErrFrozen and sends nothing. A bundle under way when it is called is
// finished. The agent freezes its bridge first when it is told to stop, before its reconcilers and the
// informers they read stop: what a pass computes from caches being torn down (a peer set that looks
// empty) must never reach the switch, which keeps forwarding with what it has until the next agent
// takes over.
func (b *Bridge) Freeze() { b.frozen.Store(true) }

// ErrFrozen is the error of every change to a frozen bridge (Freeze).
var ErrFrozen = errors.New("the bridge is frozen: the agent is stopping and changes nothing on the switch")

// errBundleLost marks a bundle whose connection failed before it was committed; errBundleRejected
// one the switch rejected and that was discarded.
var (
	errBundleLost     = errors.New("connection lost before commit")
	errBundleRejected = errors.New("bundle rejected")
)

// bundleConns keeps the bridge's idle bundle connection for the next bundle.
type bundleConns struct {
	dials  atomic.Uint64 // connections opened
	mu     sync.Mutex
	idle   *bundleConn
	closed bool
}

// take returns the idle connection, or nil if there is none or it is known to be dead.
func (p *bundleConns) take() *bundleConn {
	p.mu.Lock()
	c := p.idle
	p.idle = nil
	p.mu.Unlock()
	if c != nil && c.in.failed() {
		c.close()
		return nil
	}
	if c != nil {
		c.reused = true
	}
	return c
}

// put keeps c for the next bundle, closing the connection it replaces.
func (p *bundleConns) put(c *bundleConn) {
	p.mu.Lock()
	old := p.idle
	if p.closed || c.dead {
		old = c
	} else {
		p.idle = c
	}
	p.mu.Unlock()
	if old != nil {
		old.close()
	}
}

// close closes the idle connection; later connections are closed when put back.
func (p *bundleConns) close() {
	p.mu.Lock()
	c := p.idle
	p.idle, p.closed = nil, true
	p.mu.Unlock()
	if c != nil {
		c.close()
	}
}

// bundleConn is a connection to the bridge's management socket that carries bundles only, one at
// a time, so the switch's answers arrive in request order: every error for an added message has
// been read once the reply to the close request is in, and the count of rejected messages is
// exact. Closing the connection discards an uncommitted bundle.
type bundleConn struct {
	conn   net.Conn
	in     *replyQueue
	wmu    sync.Mutex // held while a bundle writes, and to answer an echo request
	xid    uint32
	reused bool // it carried an earlier bundle
	dead   bool // closed by a cancelled context
}

// dialBundleConn dials the bridge and says hello, without waiting for the answer.
func dialBundleConn(address string) (*bundleConn, error) {
	conn, err := ofctrl.DialUnixOrNamedPipe(address)
	if err != nil {
		return nil, fmt.Errorf("connecting to %q: %w", address, err)
	}
	c := &bundleConn{conn: conn, in: newReplyQueue()}
	go c.in.read(conn, c.echo)
	hello, err := common.NewHello(openflow15.VERSION)
	if err == nil {
		c.xid++
		hello.Header.Xid = c.xid
		var data []byte
		if data, err = hello.MarshalBinary(); err == nil {
			_, err = conn.Write(data)
		}
	}
	if err != nil {
		c.close()
		return nil, fmt.Errorf("saying hello to %q: %w", address, err)
	}
	return c, nil
}

// echo answers the switch's echo request (sent when a connection has been idle for its probe
// interval) with its xid and body, from a goroutine of its own: a bundle may hold the writer.
func (c *bundleConn) echo(xid uint32, body []byte) {
	reply := make([]byte, 8, 8+len(body))
	reply[0], reply[1] = openflow15.VERSION, openflow15.Type_EchoReply
	binary.BigEndian.PutUint16(reply[2:], uint16(8+len(body)))
	binary.BigEndian.PutUint32(reply[4:], xid)
	reply = append(reply, body...)
	go func() {
		c.wmu.Lock()
		defer c.wmu.Unlock()
		_, _ = c.conn.Write(reply)
	}()
}

func (c *bundleConn) close() { _ = c.conn.Close() }

// send runs one bundle on the connection: open, the messages, close, and commit if the switch
// accepted every message. Cancelling ctx closes the connection.
func (c *bundleConn) send(ctx context.Context, src bundleSource, bufferSize int) error {
	stop := context.AfterFunc(ctx, c.close)
	err := c.run(ctx, src, bufferSize)
	if !stop() {
		c.dead = true // closed by ctx
	}
	return err
}

// run is send without the cancellation. Errors before the commit request are marked errBundleLost.
func (c *bundleConn) run(ctx context.Context, src bundleSource, bufferSize int) error {
	if src.len() == 1 {
		if m := src.msg(0); m.flow != nil {
			return c.runOne(ctx, m)
		}
	}
	tx := &bundleTx{c: c, w: bufio.NewWriterSize(c.conn, bufferSize)}
	c.wmu.Lock()
	tx.locked = true
	defer tx.unlock()
	if _, err := tx.control(openflow15.BCT_OPEN_REQUEST); err != nil {
		return marked{err, errBundleLost}
	}
	tx.first = c.xid + 1
	n := src.len()
	for i := range n {
		m := src.msg(i)
		before := tx.n
		err := m.addTo(tx)
		if extra := tx.n - before - 1; extra > 0 {
			tx.extra = append(tx.extra, extraMsgs{after: before, n: extra})
		}
		if err != nil {
			return marked{fmt.Errorf("sending %s in a bundle of %d messages: %w", m.String(), n, err), errBundleLost}
		}
	}
	return tx.commit(ctx, func(i int) string {
		m := src.msg(i)
		return m.String()
	})
}

// runOne sends a change of one flow_mod as the flow_mod itself and a barrier, not in a bundle. The
// switch applies a single flow_mod whole or rejects it whole, so it is as atomic as a bundle of
// one, and it costs one round trip to the switch instead of two (the bundle's close, then its
// commit): one address joining a NetworkPolicy peer set is one flow_mod. Errors are marked as
// run's are: errBundleLost when the connection failed, errBundleRejected when the switch refused
// the flow_mod (and changed nothing).
func (c *bundleConn) runOne(ctx context.Context, m bundleMsg) error {
	tx := &bundleTx{c: c, w: bufio.NewWriterSize(c.conn, 1024)}
	c.wmu.Lock()
	tx.locked = true
	defer tx.unlock()
	c.xid++
	b, err := m.appendFlowMod(tx.w.AvailableBuffer(), c.xid)
	if err == nil && len(b) > 0xffff {
		err = fmt.Errorf("flow_mod of %d bytes is too long", len(b))
	}
	if err == nil {
		_, err = tx.w.Write(b)
	}
	if err == nil {
		err = tx.write(openflow15.NewBarrierRequest())
	}
	if err != nil {
		return marked{fmt.Errorf("sending %s: %w", m.String(), err), errBundleLost}
	}
	rejected, err := tx.flushAndAwait(ctx, c.xid)
	if err != nil {
		return marked{fmt.Errorf("sending %s: %w", m.String(), err), errBundleLost}
	}
	if len(rejected) > 0 {
		return marked{fmt.Errorf("switch rejected %s: %s", m.String(), rejected[0].String()), errBundleRejected}
	}
	return nil
}

// SendTrace records when a change of flows went to the switch, for latency measurements (like
// net/http/httptrace): a Sync given a context WithSendTrace fills it in when it sends the change
// itself (a change that shares another call's bundle leaves it empty).
type SendTrace struct {
	// Locked is when the bridge's lock was taken and the bundle began to be built; Written when
	// its last request was written (the commit, or the barrier after a lone flow_mod); Answered
	// when the switch's answer to it was read.
	Locked, Written, Answered time.Time
}

type sendTraceKey struct{}

// WithSendTrace returns a context whose Syncs fill in trace.
func WithSendTrace(ctx context.Context, trace *SendTrace) context.Context {
	return context.WithValue(ctx, sendTraceKey{}, trace)
}

func sendTraceFrom(ctx context.Context) *SendTrace {
	t, _ := ctx.Value(sendTraceKey{}).(*SendTrace)
	return t
}

// bundleTx is one atomic bundle on a bundle connection. Messages are buffered into large writes,
// and encoding the next messages overlaps with the switch decoding the previous ones.
type bundleTx struct {
	c      *bundleConn
	w      *bufio.Writer
	locked bool   // holds c.wmu
	first  uint32 // xid of the first added message
	n      int    // messages added
	// extra records the source messages sent as several (a large group's insert_buckets), so that
	// a rejected message is named after its source (source).
	extra []extraMsgs
}

// extraMsgs: the n messages added after the first `after` ones continue the message before them.
type extraMsgs struct{ after, n int }

// source is the index of the source message the i-th added message belongs to.
func (tx *bundleTx) source(i int) int {
	src := i
	for _, e := range tx.extra {
		switch {
		case i > e.after+e.n:
			src -= e.n
		case i > e.after:
			src -= i - e.after
		}
	}
	return src
}

const bundleID = 1

func (tx *bundleTx) unlock() {
	if tx.locked {
		tx.locked = false
		tx.c.wmu.Unlock()
	}
}

// flushAndAwait sends what is buffered and waits, without holding the writer, for the answer to
// the control request xid; it returns the errors received before it (and for xid itself).
func (tx *bundleTx) flushAndAwait(ctx context.Context, xid uint32) ([]ofError, error) {
	if err := tx.w.Flush(); err != nil {
		return nil, fmt.Errorf("writing to the switch: %w", err)
	}
	trace := sendTraceFrom(ctx)
	if trace != nil {
		trace.Written = time.Now()
	}
	tx.unlock()
	errs, err := tx.c.in.await(ctx, xid)
	if trace != nil {
		trace.Answered = time.Now()
	}
	if err == nil {
		tx.c.wmu.Lock()
		tx.locked = true
	}
	return errs, err
}

// write sends a message with the next xid.
func (tx *bundleTx) write(m util.Message) error {
	tx.c.xid++
	if err := setXid(m, tx.c.xid); err != nil {
		return err
	}
	data, err := m.MarshalBinary()
	if err != nil {
		return fmt.Errorf("encoding %T: %w", m, err)
	}
	if _, err := tx.w.Write(data); err != nil {
		return fmt.Errorf("writing to the switch: %w", err)
	}
	return nil
}

// setXid stamps xid into a message's header, and into the message a bundle add carries (the
// specification requires the same xid inside).
func setXid(m util.Message, xid uint32) error {
	switch h := m.(type) {
	case *common.Hello:
		h.Header.Xid = xid
	case *openflow15.BundleCtrl:
		h.Header.Xid = xid
	case *openflow15.BndleAdd:
		h.Header.Xid = xid
		return setXid(h.Message, xid)
	case *openflow15.FlowMod:
		h.Header.Xid = xid
	case *openflow15.GroupMod:
		h.Header.Xid = xid
	case *openflow15.VendorHeader:
		h.Header.Xid = xid
	case *common.Header: // a barrier request
		h.Xid = xid
	default:
		return fmt.Errorf("no xid for message %T", m)
	}
	return nil
}

// control sends a bundle control request and returns its xid.
func (tx *bundleTx) control(typ uint16) (uint32, error) {
	if err := tx.write(openflow15.NewBundleCtrl(bundleID, typ, openflow15.OFPBCT_ATOMIC)); err != nil {
		return 0, err
	}
	return tx.c.xid, nil
}

// add appends a message to the bundle.
func (tx *bundleTx) add(m util.Message) error {
	add := openflow15.NewBndleAdd(bundleID, openflow15.OFPBCT_ATOMIC)
	add.Message = m
	if err := tx.write(add); err != nil {
		return err
	}
	tx.n++
	return nil
}

// addFlow appends a flow_mod to the bundle, encoded straight into the write buffer.
func (tx *bundleTx) addFlow(m *bundleMsg) error {
	tx.c.xid++
	xid := tx.c.xid
	b := tx.w.AvailableBuffer()
	b = append(b, openflow15.VERSION, openflow15.Type_BundleAddMessage, 0, 0) // length set below
	b = binary.BigEndian.AppendUint32(b, xid)
	b = binary.BigEndian.AppendUint32(b, bundleID)
	b = binary.BigEndian.AppendUint16(b, 0) // padding
	b = binary.BigEndian.AppendUint16(b, openflow15.OFPBCT_ATOMIC)
	b, err := m.appendFlowMod(b, xid)
	if err != nil {
		return err
	}
	if len(b) > 0xffff {
		return fmt.Errorf("flow_mod of %d bytes is too long", len(b))
	}
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	if _, err := tx.w.Write(b); err != nil {
		return fmt.Errorf("writing to the switch: %w", err)
	}
	tx.n++
	return nil
}

// commit closes the bundle and commits it unless the switch rejected a message; describe names
// the i-th added message in errors. After a failure the switch is left unchanged. Errors are
// marked errBundleLost when nothing was committed because the connection failed, and
// errBundleRejected when the switch rejected the bundle and the connection is clean.
func (tx *bundleTx) commit(ctx context.Context, describe func(i int) string) error {
	closeXid, err := tx.control(openflow15.BCT_CLOSE_REQUEST)
	if err != nil {
		return err
	}
	rejected, err := tx.flushAndAwait(ctx, closeXid)
	if err != nil {
		return marked{fmt.Errorf("closing bundle of %d messages: %w", tx.n, err), errBundleLost}
	}
	if len(rejected) > 0 {
		err := fmt.Errorf("switch rejected %d of %d bundle messages, bundle discarded: %s", len(rejected), tx.n, tx.explain(rejected, describe))
		if derr := tx.discard(ctx); derr != nil {
			// Closing the connection discards the bundle all the same.
			return fmt.Errorf("%w (discarding: %w)", err, derr)
		}
		return marked{err, errBundleRejected}
	}
	commitXid, err := tx.control(openflow15.BCT_COMMIT_REQUEST)
	if err != nil {
		return err
	}
	rejected, err = tx.flushAndAwait(ctx, commitXid)
	if err != nil {
		return fmt.Errorf("committing bundle of %d messages: %w", tx.n, err)
	}
	if len(rejected) > 0 {
		return marked{fmt.Errorf("switch refused to commit the bundle of %d messages, nothing applied: %s", tx.n, tx.explain(rejected, describe)), errBundleRejected}
	}
	return nil
}

// marked is err, in which errors.Is also finds mark.
type marked struct{ err, mark error }

func (m marked) Error() string   { return m.err.Error() }
func (m marked) Unwrap() []error { return []error{m.err, m.mark} }

// discard drops the closed bundle and waits for the switch to confirm.
func (tx *bundleTx) discard(ctx context.Context) error {
	xid, err := tx.control(openflow15.BCT_DISCARD_REQUEST)
	if err != nil {
		return err
	}
	refused, err := tx.flushAndAwait(ctx, xid)
	if err != nil {
		return err
	}
	if len(refused) > 0 {
		return errors.New(refused[0].String())
	}
	return nil
}

// explain names the first rejected messages and the switch's reasons.
func (tx *bundleTx) explain(rejected []ofError, describe func(i int) string) string {
	var parts []string
	for _, e := range rejected[:min(len(rejected), maxReportedErrors)] {
		what := "control request"
		if i := int(e.xid) - int(tx.first); e.xid >= tx.first && i < tx.n {
			what = describe(tx.source(i))
		}
		parts = append(parts, what+": "+e.String())
	}
	if len(rejected) > maxReportedErrors {
		parts = append(parts, fmt.Sprintf("and %d more", len(rejected)-maxReportedErrors))
	}
	return strings.Join(parts, "; ")
}

// ofError is an OpenFlow error message from the switch.
type ofError struct {
	xid          uint32
	typ, code    uint16
	experimenter uint32
}

func (e ofError) String() string {
	if e.typ == openflow15.ET_BUNDLE_FAILED {
		// OpenFlow 1.5 numbers the codes of OpenFlow 1.3's ONF bundle extension from 0.
		if err := openflow15.ParseBundleError(openflow15.BEC_UNKNOWN + e.code); err != nil {
			return err.Error()
		}
	}
	return ofctrl.GetErrorMessage(e.typ, e.code, e.experimenter)
}

// replyQueue collects what the switch answers on a bundle connection. Its reader never blocks on
// the consumer: the switch stops reading a connection whose replies pile up, and the consumer may
// still be writing.
type replyQueue struct {
	mu       sync.Mutex
	errs     []ofError
	answered map[uint32]bool // xids answered by a reply or an error
	err      error           // why reading stopped
	notify   chan struct{}
}

func newReplyQueue() *replyQueue {
	return &replyQueue{answered: map[uint32]bool{}, notify: make(chan struct{}, 1)}
}

// read parses messages until the connection fails or is closed, handing echo requests to echo.
func (q *replyQueue) read(conn net.Conn, echo func(xid uint32, body []byte)) {
	r := bufio.NewReader(conn)
	var hdr [8]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			q.fail(err)
			return
		}
		typ, length, xid := hdr[1], binary.BigEndian.Uint16(hdr[2:4]), binary.BigEndian.Uint32(hdr[4:8])
		if length < 8 {
			q.fail(fmt.Errorf("invalid OpenFlow message length %d", length))
			return
		}
		body := make([]byte, length-8)
		if _, err := io.ReadFull(r, body); err != nil {
			q.fail(err)
			return
		}
		switch typ {
		case openflow15.Type_Error:
			e := parseError(xid, body)
			q.push(xid, &e)
		case openflow15.Type_BundleControl, openflow15.Type_BarrierReply:
			q.push(xid, nil)
		case openflow15.Type_EchoRequest:
			echo(xid, body)
		}
		// Hello and anything else are ignored.
	}
}

func parseError(xid uint32, body []byte) ofError {
	e := ofError{xid: xid}
	if len(body) >= 4 {
		e.typ, e.code = binary.BigEndian.Uint16(body[0:2]), binary.BigEndian.Uint16(body[2:4])
	}
	if e.typ == 0xffff && len(body) >= 8 {
		e.experimenter = binary.BigEndian.Uint32(body[4:8])
	}
	return e
}

// push records the answer to xid: a bundle control reply, or an error.
func (q *replyQueue) push(xid uint32, e *ofError) {
	q.mu.Lock()
	q.answered[xid] = true
	if e != nil {
		q.errs = append(q.errs, *e)
	}
	q.mu.Unlock()
	q.wake()
}

// failed reports whether reading stopped: the connection is dead.
func (q *replyQueue) failed() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.err != nil
}

func (q *replyQueue) fail(err error) {
	q.mu.Lock()
	if q.err == nil {
		q.err = err
	}
	q.mu.Unlock()
	q.wake()
}

func (q *replyQueue) wake() {
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

// await waits for the answer to the control request xid and returns the errors received before
// it (and the error for xid itself), consuming them.
func (q *replyQueue) await(ctx context.Context, xid uint32) ([]ofError, error) {
	for {
		q.mu.Lock()
		done := q.answered[xid]
		errs, rerr := q.errs, q.err
		if done { // answers come in order: nothing is pending before xid
			q.errs, q.answered = nil, map[uint32]bool{}
		}
		q.mu.Unlock()
		if done {
			return errs, nil
		}
		if rerr != nil {
			return nil, fmt.Errorf("reading from the switch: %w", rerr)
		}
		select {
		case <-q.notify:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
