package openflow

import (
	"context"
	"encoding/binary"
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
	// InPort is the port the flow matches, 0 when it matches none.
	InPort uint32
	// Regs are the registers (NXM_NX_REG0..15) the flow matches exactly, by index.
	Regs map[int]uint32
}

// FlowStats returns the flows of table whose cookie equals cookie under cookieMask (every flow of
// the table with mask 0), with their packet and byte counters: flows learned by ovs-vswitchd too, which the
// bridge's cache never holds.
func (b *Bridge) FlowStats(ctx context.Context, table uint8, cookie, cookieMask uint64) ([]FlowStat, error) {
	if err := b.waitConnected(ctx); err != nil {
		return nil, err
	}
	var out []FlowStat
	err := b.eachFlow(ctx, table, cookie, cookieMask, func(fd *openflow15.FlowDesc) {
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
			switch v := m.Value.(type) {
			case *openflow15.TunnelIpv4SrcField:
				if a, ok := netip.AddrFromSlice(v.TunnelIpv4Src.To4()); ok && m.Mask == nil {
					s.TunSrc = a
				}
			case *openflow15.InPortField:
				s.InPort = v.InPort
			case *openflow15.Uint32Message:
				if m.Class == openflow15.OXM_CLASS_NXM_1 && m.Field <= openflow15.NXM_NX_REG15 && m.Mask == nil {
					s.setReg(int(m.Field), v.Data)
				}
			case *openflow15.ByteArrayField:
				// OpenFlow 1.5 replies carry registers as xregN: reg 2N in the upper 32 bits, reg
				// 2N+1 in the lower; a register is matched exactly where the mask is all ones.
				if m.Class != openflow15.OXM_CLASS_PACKET_REGS || len(v.Data) != 8 {
					continue
				}
				mask := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
				if mb, ok := m.Mask.(*openflow15.ByteArrayField); ok && len(mb.Data) == 8 {
					mask = mb.Data
				}
				for half := range 2 {
					if binary.BigEndian.Uint32(mask[4*half:]) == 0xffffffff {
						s.setReg(2*int(m.Field)+half, binary.BigEndian.Uint32(v.Data[4*half:]))
					}
				}
			}
		}
		out = append(out, s)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (s *FlowStat) setReg(idx int, v uint32) {
	if s.Regs == nil {
		s.Regs = map[int]uint32{}
	}
	s.Regs[idx] = v
}
