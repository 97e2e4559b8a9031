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
	flow    *Flow
	cookie  uint64 // the cookie to send, which may differ from flow.Cookie (a replay's new round)
	command uint8

	group    *Group
	groupCmd int

	raw util.Message // a message built by the caller (delete by cookie)
}

// addTo encodes the message into the bundle.
func (m *bundleMsg) addTo(tx *bundleTx) error {
	switch {
	case m.flow != nil:
		return tx.addFlow(m.flow, m.command, m.cookie)
	case m.group != nil:
		gm, err := m.group.groupMod(m.groupCmd)
		if err != nil {
			return err
		}
		return tx.add(gm)
	case m.raw != nil:
		return tx.add(m.raw)
	}
	return errors.New("empty bundle message")
}

// String names the message in errors.
func (m *bundleMsg) String() string {
	switch {
	case m.flow != nil:
		f := *m.flow
		f.Cookie = m.cookie
		return fmt.Sprintf("flow %q", f.String())
	case m.group != nil:
		return fmt.Sprintf("group %q", m.group.String())
	}
	return fmt.Sprintf("message %T", m.raw)
}

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
// every message; otherwise the switch is left unchanged.
func (b *Bridge) sendBundle(ctx context.Context, src bundleSource) error {
	n := src.len()
	if n == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, bundleTimeout)
	defer cancel()
	tx, err := openBundle(ctx, b.opts.Address, min(maxWriteBuffer, 4096+256*n))
	if err != nil {
		return fmt.Errorf("opening bundle: %w", err)
	}
	defer tx.close()
	for i := range n {
		m := src.msg(i)
		if err := m.addTo(tx); err != nil {
			return fmt.Errorf("sending %s in a bundle of %d messages: %w", m.String(), n, err)
		}
	}
	err = tx.commit(ctx, func(i int) string {
		m := src.msg(i)
		return m.String()
	})
	if err == nil {
		b.bundles.Add(1)
	}
	return err
}

// bundleTx is one atomic bundle on a connection of its own to the bridge's management socket. The
// connection carries nothing else, so the switch's answers arrive in request order: every error
// for an added message has been read once the reply to the close request is in, and the count
// of rejected messages is exact. Closing the connection discards an uncommitted bundle.
//
// Messages are buffered into large writes, and encoding the next messages overlaps with the
// switch decoding the previous ones.
type bundleTx struct {
	conn  net.Conn
	w     *bufio.Writer
	stop  func() bool
	xid   uint32
	first uint32 // xid of the first added message
	n     int    // messages added
	in    *replyQueue
}

const bundleID = 1

// openBundle dials the bridge, says hello and opens a bundle, without waiting for answers.
func openBundle(ctx context.Context, address string, bufferSize int) (*bundleTx, error) {
	conn, err := ofctrl.DialUnixOrNamedPipe(address)
	if err != nil {
		return nil, fmt.Errorf("connecting to %q: %w", address, err)
	}
	tx := &bundleTx{
		conn: conn,
		w:    bufio.NewWriterSize(conn, bufferSize),
		in:   newReplyQueue(),
	}
	// Cancelling the context unblocks reads and writes.
	tx.stop = context.AfterFunc(ctx, func() { _ = conn.Close() })
	go tx.in.read(conn)
	hello, err := common.NewHello(openflow15.VERSION)
	if err != nil {
		tx.close()
		return nil, err
	}
	if err := tx.write(hello); err != nil {
		tx.close()
		return nil, err
	}
	if _, err := tx.control(openflow15.BCT_OPEN_REQUEST); err != nil {
		tx.close()
		return nil, err
	}
	tx.first = tx.xid + 1
	return tx, nil
}

// write sends a message with the next xid.
func (tx *bundleTx) write(m util.Message) error {
	tx.xid++
	if err := setXid(m, tx.xid); err != nil {
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
	return tx.xid, nil
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
func (tx *bundleTx) addFlow(f *Flow, command uint8, cookie uint64) error {
	tx.xid++
	b := tx.w.AvailableBuffer()
	b = append(b, openflow15.VERSION, openflow15.Type_BundleAddMessage, 0, 0) // length set below
	b = binary.BigEndian.AppendUint32(b, tx.xid)
	b = binary.BigEndian.AppendUint32(b, bundleID)
	b = binary.BigEndian.AppendUint16(b, 0) // padding
	b = binary.BigEndian.AppendUint16(b, openflow15.OFPBCT_ATOMIC)
	b, err := f.appendFlowMod(b, command, cookie, tx.xid)
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
// the i-th added message in errors. After a failure the switch is left unchanged.
func (tx *bundleTx) commit(ctx context.Context, describe func(i int) string) error {
	closeXid, err := tx.control(openflow15.BCT_CLOSE_REQUEST)
	if err != nil {
		return err
	}
	if err := tx.w.Flush(); err != nil {
		return fmt.Errorf("writing to the switch: %w", err)
	}
	rejected, err := tx.in.await(ctx, closeXid)
	if err != nil {
		return fmt.Errorf("closing bundle of %d messages: %w", tx.n, err)
	}
	if len(rejected) > 0 {
		err := fmt.Errorf("switch rejected %d of %d bundle messages, bundle discarded: %s", len(rejected), tx.n, tx.explain(rejected, describe))
		if derr := tx.discard(ctx); derr != nil {
			// Closing the connection discards the bundle all the same.
			return fmt.Errorf("%w (discarding: %w)", err, derr)
		}
		return err
	}
	commitXid, err := tx.control(openflow15.BCT_COMMIT_REQUEST)
	if err != nil {
		return err
	}
	if err := tx.w.Flush(); err != nil {
		return fmt.Errorf("writing to the switch: %w", err)
	}
	rejected, err = tx.in.await(ctx, commitXid)
	if err != nil {
		return fmt.Errorf("committing bundle of %d messages: %w", tx.n, err)
	}
	if len(rejected) > 0 {
		return fmt.Errorf("switch refused to commit the bundle of %d messages, nothing applied: %s", tx.n, tx.explain(rejected, describe))
	}
	return nil
}

// discard drops the closed bundle and waits for the switch to confirm.
func (tx *bundleTx) discard(ctx context.Context) error {
	xid, err := tx.control(openflow15.BCT_DISCARD_REQUEST)
	if err != nil {
		return err
	}
	if err := tx.w.Flush(); err != nil {
		return fmt.Errorf("writing to the switch: %w", err)
	}
	refused, err := tx.in.await(ctx, xid)
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
			what = describe(i)
		}
		parts = append(parts, what+": "+e.String())
	}
	if len(rejected) > maxReportedErrors {
		parts = append(parts, fmt.Sprintf("and %d more", len(rejected)-maxReportedErrors))
	}
	return strings.Join(parts, "; ")
}

// close drops the connection, which discards the bundle if it was not committed.
func (tx *bundleTx) close() {
	tx.stop()
	_ = tx.conn.Close()
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

// read parses messages until the connection fails or is closed.
func (q *replyQueue) read(conn net.Conn) {
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
		case openflow15.Type_BundleControl:
			q.push(xid, nil)
		}
		// Hello and anything else are ignored; the management socket sends no echo requests.
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
		if done {
			q.errs = nil
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
