package openflow

import (
	"context"
	"net/netip"

	"antrea.io/libOpenflow/openflow15"
)

// FlowStat is one installed flow's identity and counters, as a flow-stats reply gives them.
type FlowStat struct {
	Table    uint8
	Priority uint16
	Cookie   uint64
	Packets  uint64
	Bytes    uint64
	// TunSrc is the tunnel source the flow matches exactly, when it matches one.
	TunSrc netip.Addr
}

// FlowStats returns the flows of table whose cookie equals cookie under cookieMask (every flow of
// the table with mask 0), with their packet and byte counters: flows learned by ovs-vswitchd too, which the
// bridge's cache never holds.
func (b *Bridge) FlowStats(ctx context.Context, table uint8, cookie, cookieMask uint64) ([]FlowStat, error) {
	if err := b.waitConnected(ctx); err != nil {
		return nil, err
	}
	descs, err := b.flowStats(ctx, table, cookie, cookieMask)
	if err != nil {
		return nil, err
	}
	out := make([]FlowStat, 0, len(descs))
	for _, fd := range descs {
		s := FlowStat{Table: fd.TableId, Priority: fd.Priority, Cookie: fd.Cookie}
		for _, f := range fd.Stats.Fields {
			if c, ok := f.(*openflow15.PBCountStatField); ok {
				switch c.Header.Field {
				case openflow15.XST_OFB_PACKET_COUNT:
					s.Packets = c.Count
				case openflow15.XST_OFB_BYTE_COUNT:
					s.Bytes = c.Count
				}
			}
		}
		for _, m := range fd.Match.Fields {
			if v, ok := m.Value.(*openflow15.TunnelIpv4SrcField); ok && m.Mask == nil {
				if a, ok := netip.AddrFromSlice(v.TunnelIpv4Src.To4()); ok {
					s.TunSrc = a
				}
			}
		}
		out = append(out, s)
	}
	return out, nil
}
