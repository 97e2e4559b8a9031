package openflow

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"antrea.io/libOpenflow/common"
	"antrea.io/libOpenflow/openflow15"
	"antrea.io/ofnet/ofctrl"
)

// Flow monitoring: the switch tells the bridge at once when one of its flows is deleted by someone
// else (`ovs-ofctl del-flows`, another controller), and the bridge puts it back from its cache,
// instead of waiting for its owner's next periodic Verify. OVS implements OpenFlow 1.4+ flow
// monitoring (OFPMP_FLOW_MONITOR) in ofproto, above the datapath, so it works the same with the
// Windows datapath (OVS 3.0 and later; an older switch answers with an error and the periodic
// pass alone repairs drift).
//
// The monitor has a connection of its own, read by hand like the bundle connections: only the
// header of each update is needed (table, priority, cookie), and a switch's events never wait
// behind ofctrl's handling of the main connection.

const (
	// monitorID names the bridge's one monitor on its connection.
	monitorID = 1
	// repairGather is how long the repair waits after the first removal it hears of, so that the
	// removals of one command (all flows deleted) are put back in one bundle.
	repairGather = 10 * time.Millisecond
	// flowRemovedByDelete is ofp_flow_removed_reason OFPRR_DELETE: a flow_mod deleted the flow.
	// Timeouts (our learned flows) and group or meter deletions are not drift the cache can undo.
	flowRemovedByDelete = 2
	// ownRemovalExpiry is how long the bridge expects the switch to report a deletion it sent: a
	// report that never comes (the flow was gone already) must not excuse a later removal by
	// someone else.
	ownRemovalExpiry = 10 * time.Second
)

// errMonitorUnsupported ends monitoring: the switch refused the monitor request.
var errMonitorUnsupported = errors.New("the switch does not support flow monitoring")

// flowID identifies the removed flows a repair puts back: the cache's flows with the same table,
// priority and cookie. Several flows may share one; putting back one that is still installed
// replaces it with itself.
type flowID struct {
	table    uint8
	priority uint16
	cookie   uint64
}

// repairQueue collects what the monitor heard until the repair runs.
type repairQueue struct {
	mu      sync.Mutex
	removed map[flowID]int
	// full asks for a comparison of every table: events may have been missed (the monitor was
	// not connected, or the switch paused it).
	full bool
	wake chan struct{}
}

func (q *repairQueue) add(id flowID) {
	q.mu.Lock()
	if q.removed == nil {
		q.removed = map[flowID]int{}
	}
	q.removed[id]++
	q.mu.Unlock()
	q.notify()
}

func (q *repairQueue) addFull() {
	q.mu.Lock()
	q.full = true
	q.mu.Unlock()
	q.notify()
}

func (q *repairQueue) notify() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *repairQueue) take() (map[flowID]int, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	removed, full := q.removed, q.full
	q.removed, q.full = nil, false
	return removed, full
}

// Repairs is the number of flows the bridge has put back after the switch reported them deleted by
// someone else (or found them missing after monitoring was interrupted).
func (b *Bridge) Repairs() uint64 { return b.repaired.Load() }

// watchFlows monitors the switch's flows for as long as the bridge lives, reconnecting when the
// connection fails; after a reconnection the flows are compared in full, since removals may have
// gone unheard.
func (b *Bridge) watchFlows() {
	defer b.wg.Done()
	for first := true; ; first = false {
		err := b.monitor(first)
		select {
		case <-b.closed:
			return
		default:
		}
		if errors.Is(err, errMonitorUnsupported) {
			b.log.Info("Flow monitoring is not available; flows removed by others are repaired by the periodic check only", "reason", err.Error())
			return
		}
		b.log.V(1).Info("Flow monitor connection ended; reconnecting", "error", err.Error())
		select {
		case <-b.closed:
			return
		case <-time.After(b.opts.RetryInterval):
		}
	}
}

// monitor runs one monitor connection until it fails or the bridge closes.
func (b *Bridge) monitor(first bool) error {
	conn, err := ofctrl.DialUnixOrNamedPipe(b.opts.Address)
	if err != nil {
		return fmt.Errorf("connecting to %q: %w", b.opts.Address, err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-b.closed:
		case <-stop:
		}
		_ = conn.Close()
	}()
	const helloXid, requestXid = 1, 2
	hello, err := common.NewHello(openflow15.VERSION)
	if err != nil {
		return err
	}
	hello.Header.Xid = helloXid
	data, err := hello.MarshalBinary()
	if err != nil {
		return err
	}
	if _, err := conn.Write(append(data, monitorRequest(requestXid)...)); err != nil {
		return fmt.Errorf("requesting flow monitoring: %w", err)
	}
	if !first {
		b.repairs.addFull()
	}
	return b.readMonitor(conn, requestXid)
}

// monitorRequest encodes an OFPMP_FLOW_MONITOR request for the removals of every flow of every
// table, without their instructions: ofp_multipart_request, then one ofp_flow_monitor_request
// with an empty OXM match.
func monitorRequest(xid uint32) []byte {
	b := make([]byte, 0, 40)
	b = append(b, openflow15.VERSION, openflow15.Type_MultiPartRequest, 0, 40)
	b = binary.BigEndian.AppendUint32(b, xid)
	b = binary.BigEndian.AppendUint16(b, openflow15.MultipartType_FlowMonitor)
	b = append(b, 0, 0, 0, 0, 0, 0) // flags, padding
	b = binary.BigEndian.AppendUint32(b, monitorID)
	b = binary.BigEndian.AppendUint32(b, openflow15.P_ANY)
	b = binary.BigEndian.AppendUint32(b, openflow15.OFPG_ANY)
	b = binary.BigEndian.AppendUint16(b, openflow15.FMF_REMOVED)
	b = append(b, openflow15.OFPTT_ALL, openflow15.FMC_ADD)
	b = append(b, 0, 1, 0, 4, 0, 0, 0, 0) // OFPMT_OXM match of length 4 (no field), padded to 8
	return b
}

// readMonitor reads the monitor connection: removals go to the repair queue; a pause of the
// monitor (the switch had too much to tell) asks for a full comparison once it resumes.
func (b *Bridge) readMonitor(conn net.Conn, requestXid uint32) error {
	r := bufio.NewReader(conn)
	var hdr [8]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return err
		}
		typ, length, xid := hdr[1], binary.BigEndian.Uint16(hdr[2:4]), binary.BigEndian.Uint32(hdr[4:8])
		if length < 8 {
			return fmt.Errorf("invalid OpenFlow message length %d", length)
		}
		body := make([]byte, length-8)
		if _, err := io.ReadFull(r, body); err != nil {
			return err
		}
		switch typ {
		case openflow15.Type_EchoRequest:
			reply := append([]byte{openflow15.VERSION, openflow15.Type_EchoReply, 0, 0, 0, 0, 0, 0}, body...)
			binary.BigEndian.PutUint16(reply[2:], uint16(len(reply)))
			binary.BigEndian.PutUint32(reply[4:], xid)
			if _, err := conn.Write(reply); err != nil {
				return err
			}
		case openflow15.Type_Error:
			if xid == requestXid {
				return fmt.Errorf("%w: %s", errMonitorUnsupported, parseError(xid, body).String())
			}
		case openflow15.Type_MultiPartReply:
			if len(body) >= 8 && binary.BigEndian.Uint16(body) == openflow15.MultipartType_FlowMonitor {
				b.flowUpdates(body[8:])
			}
		}
	}
}

// flowUpdates handles the ofp_flow_update_* records of one monitor reply.
func (b *Bridge) flowUpdates(body []byte) {
	for len(body) >= 4 {
		length, event := int(binary.BigEndian.Uint16(body)), binary.BigEndian.Uint16(body[2:])
		if length < 4 || length > len(body) {
			return
		}
		u := body[:length]
		body = body[length:]
		switch event {
		case openflow15.FME_REMOVED:
			// ofp_flow_update_full: length, event, table_id, reason, idle and hard timeouts,
			// priority, 4 zero bytes, cookie, match.
			if len(u) < 24 || u[5] != flowRemovedByDelete {
				continue
			}
			b.repairs.add(flowID{table: u[4], priority: binary.BigEndian.Uint16(u[10:]), cookie: binary.BigEndian.Uint64(u[16:])})
		case openflow15.FME_RESUMED:
			b.repairs.addFull()
		}
	}
}

// repairFlows puts back what the monitor reports removed, for as long as the bridge lives.
func (b *Bridge) repairFlows() {
	defer b.wg.Done()
	for {
		select {
		case <-b.closed:
			return
		case <-b.repairs.wake:
		}
		select {
		case <-b.closed:
			return
		case <-time.After(repairGather):
		}
		removed, full := b.repairs.take()
		if err := b.repair(removed, full); err != nil {
			// Whatever is still missing is found by the owners' periodic Verify; their next Sync
			// sends everything again.
			b.log.Error(err, "Putting back flows removed from the switch failed")
			b.Invalidate()
		}
	}
}

// expectRemoval records a deletion the bridge sent, whose report by the monitor is not drift. The
// caller holds b.mu.
func (b *Bridge) expectRemoval(c *cached) {
	if b.opts.NoFlowMonitor {
		return
	}
	if b.ownRemovals == nil {
		b.ownRemovals = map[flowID][]time.Time{}
	}
	id := c.id()
	b.ownRemovals[id] = append(b.ownRemovals[id], time.Now().Add(ownRemovalExpiry))
}

// othersRemovals returns the identities of which the monitor reported more removals than the
// bridge sent, and forgets the expectations it matched or that expired. The caller holds b.mu.
func (b *Bridge) othersRemovals(removed map[flowID]int) map[flowID]bool {
	now := time.Now()
	for id, expiries := range b.ownRemovals {
		live := expiries[:0]
		for _, e := range expiries {
			if e.After(now) {
				live = append(live, e)
			}
		}
		if len(live) == 0 {
			delete(b.ownRemovals, id)
		} else {
			b.ownRemovals[id] = live
		}
	}
	others := map[flowID]bool{}
	for id, n := range removed {
		own := min(n, len(b.ownRemovals[id]))
		if own > 0 {
			b.ownRemovals[id] = b.ownRemovals[id][own:]
			if len(b.ownRemovals[id]) == 0 {
				delete(b.ownRemovals, id)
			}
		}
		if n > own {
			others[id] = true
		}
	}
	return others
}

// repair reinstalls, in one bundle, the cached flows of the identities someone else removed, or
// every cached flow the switch lacks when full. Removals the bridge sent itself, and of flows no
// longer in the cache (earlier rounds), need nothing.
func (b *Bridge) repair(removed map[flowID]int, full bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.waitConnected(ctx); err != nil {
		return err
	}
	start := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	others := b.othersRemovals(removed)
	var missing []*cached
	if full {
		var err error
		if _, missing, err = b.compare(ctx); err != nil {
			return err
		}
	} else if len(others) > 0 {
		for _, c := range b.flows {
			if others[c.id()] {
				missing = append(missing, c)
			}
		}
	}
	if len(missing) == 0 {
		return nil
	}
	msgs := make(bundleMsgs, len(missing))
	for i, c := range missing {
		msgs[i] = bundleMsg{flow: c, cookie: c.cookie, command: openflow15.FC_ADD}
	}
	if err := b.sendBundle(ctx, msgs); err != nil {
		return fmt.Errorf("reinstalling %d flows: %w", len(missing), err)
	}
	b.repaired.Add(uint64(len(missing)))
	b.log.Info("Reinstalled flows removed from the switch by someone else", "flows", len(missing), "fullCheck", full,
		"took", time.Since(start).String())
	return nil
}
