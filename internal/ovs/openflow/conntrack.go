package openflow

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"antrea.io/libOpenflow/openflow15"
)

// errFlushZone0 refuses what would flush every zone on Windows (see pipeline.RuleFlushZone0).
var errFlushZone0 = errors.New("a conntrack flush of zone 0 flushes every zone on Windows")

// FlushConntrackZone deletes every conntrack entry of zone (Nicira NXT_CT_FLUSH_ZONE, which OVS
// turns into a datapath flush of that zone: ct_dpif_flush with a zone and no tuple) and returns
// once the switch has done it. It is the whole zone or nothing: a flush of one connection is what
// OVS's Windows datapath gets wrong (see pipeline.ConntrackFlush). Zone 0 is refused.
//
// It goes over the bridge's bundle connection, whose replies are read in order, followed by a
// barrier: the barrier's reply means the flush was carried out, and an error before it that it
// was refused.
func (b *Bridge) FlushConntrackZone(ctx context.Context, zone uint16) error {
	if zone == 0 {
		return errFlushZone0
	}
	if err := b.onBundleConn(ctx, func(ctx context.Context, c *bundleConn) error { return c.flushZone(ctx, zone) }); err != nil {
		return fmt.Errorf("flushing conntrack zone %d: %w", zone, err)
	}
	return nil
}

// flushZone sends the flush and a barrier, and waits for the barrier's reply.
func (c *bundleConn) flushZone(ctx context.Context, zone uint16) error {
	stop := context.AfterFunc(ctx, c.close)
	defer func() {
		if !stop() {
			c.dead = true // closed by ctx
		}
	}()
	tx := &bundleTx{c: c, w: bufio.NewWriterSize(c.conn, 64)}
	c.wmu.Lock()
	tx.locked = true
	defer tx.unlock()
	msg := openflow15.NewNXTVendorHeader(openflow15.Type_CtFlushZone)
	msg.VendorData = &ctZoneID{zone: zone}
	if err := tx.write(msg); err != nil {
		return marked{err, errBundleLost}
	}
	if err := tx.write(openflow15.NewBarrierRequest()); err != nil {
		return marked{err, errBundleLost}
	}
	refused, err := tx.flushAndAwait(ctx, c.xid)
	if err != nil {
		return marked{err, errBundleLost}
	}
	if len(refused) > 0 {
		return marked{errors.New(refused[0].String()), errBundleRejected}
	}
	return nil
}

// ctZoneID is the body of NXT_CT_FLUSH_ZONE (struct nx_zone_id: 6 zero bytes and the zone).
type ctZoneID struct{ zone uint16 }

func (z *ctZoneID) Len() uint16 { return 8 }
func (z *ctZoneID) MarshalBinary() ([]byte, error) {
	b := make([]byte, 8)
	binary.BigEndian.PutUint16(b[6:], z.zone)
	return b, nil
}
func (z *ctZoneID) UnmarshalBinary(data []byte) error {
	if len(data) < 8 {
		return errors.New("short nx_zone_id")
	}
	z.zone = binary.BigEndian.Uint16(data[6:8])
	return nil
}
