package openflow

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"antrea.io/libOpenflow/openflow15"
	"antrea.io/ofnet/ofctrl"
)

// Packets the switch sends the agent (a flow's output to CONTROLLER) and the agent sends the switch.

// packetInControllerID is the controller ID of the bridge's connection: the ID an output to
// CONTROLLER (OFPAT_OUTPUT, and NXAST_CONTROLLER without id=) sends its packet-ins to.
const packetInControllerID = 0

// PacketIn is a packet a flow sent to the controller.
type PacketIn struct {
	// Table and Cookie are the table and cookie of the flow that sent it.
	Table  uint8
	Cookie uint64
	// InPort is the port the packet came in on.
	InPort uint32
	// Frame is the Ethernet frame, with what the pipeline changed in it so far (a DNAT).
	Frame []byte
	// Regs are the registers reg0..reg7 as the pipeline left them when it sent the packet (OVS
	// sends the non-zero ones in the packet-in's match).
	Regs [8]uint32
	// TunDst is the tunnel destination the pipeline set, if any.
	TunDst netip.Addr
}

// SetPacketInHandler has the packet-ins sent by flows whose cookie is of category given to h, on
// the connection's reader: h must not block. Each feature that sends packets to the agent (the
// Services' refusals, packet traces) registers its own category: the bridge dispatches by the
// cookie of the flow that sent the packet, and drops packet-ins no handler claims. nil stops the
// category's handler.
func (b *Bridge) SetPacketInHandler(category uint8, h func(PacketIn)) {
	b.packetInMu.Lock()
	defer b.packetInMu.Unlock()
	next := map[uint8]func(PacketIn){}
	if cur := b.packetIn.Load(); cur != nil {
		for c, f := range *cur {
			next[c] = f
		}
	}
	if h == nil {
		delete(next, category)
	} else {
		next[category] = h
	}
	b.packetIn.Store(&next)
}

// packetInHandlers are the handlers SetPacketInHandler set, by cookie category; replaced whole
// (copy on write) so that the reader never locks.
type packetInHandlers = atomic.Pointer[map[uint8]func(PacketIn)]

// packetInLock serialises SetPacketInHandler.
type packetInLock = sync.Mutex

func (b *Bridge) receivePacketIn(pkt *ofctrl.PacketIn) {
	handlers := b.packetIn.Load()
	if handlers == nil || pkt == nil || pkt.PacketIn == nil || pkt.Data == nil {
		return
	}
	h := (*handlers)[CookieCategory(pkt.Cookie)]
	if h == nil {
		return
	}
	frame, err := pkt.Data.MarshalBinary()
	if err != nil {
		return
	}
	in := PacketIn{Table: pkt.TableId, Cookie: pkt.Cookie, Frame: frame}
	for _, f := range pkt.Match.Fields {
		switch {
		case f.Class == openflow15.OXM_CLASS_OPENFLOW_BASIC && f.Field == openflow15.OXM_FIELD_IN_PORT:
			if p, ok := f.Value.(*openflow15.InPortField); ok {
				in.InPort = p.InPort
			}
		case f.Class == openflow15.OXM_CLASS_NXM_1 && f.Field <= openflow15.NXM_NX_REG7:
			if v, ok := f.Value.(*openflow15.Uint32Message); ok {
				in.Regs[f.Field-openflow15.NXM_NX_REG0] = v.Data
			}
		case f.Class == openflow15.OXM_CLASS_PACKET_REGS && f.Field < 4:
			// OpenFlow 1.5 packet registers (what OVS sends): xreg N is reg 2N (the high half)
			// and reg 2N+1 (the low half).
			if v, ok := f.Value.(*openflow15.ByteArrayField); ok && len(v.Data) == 8 {
				in.Regs[2*f.Field] = binary.BigEndian.Uint32(v.Data[0:4])
				in.Regs[2*f.Field+1] = binary.BigEndian.Uint32(v.Data[4:8])
			}
		case f.Class == openflow15.OXM_CLASS_NXM_1 && f.Field == openflow15.NXM_NX_TUN_IPV4_DST:
			if v, ok := f.Value.(*openflow15.TunnelIpv4DstField); ok {
				if a, ok := netip.AddrFromSlice(v.TunnelIpv4Dst.To4()); ok {
					in.TunDst = a
				}
			}
		}
	}
	h(in)
}

// errPacketOutFromController refuses what crashes Windows hosts (see pipeline.RulePacketOutCtrl).
var errPacketOutFromController = errors.New("a packet-out from in_port CONTROLLER crashes Windows hosts before OVS 3.6")

// rawFrame is an Ethernet frame as a packet-out's data.
type rawFrame []byte

func (f rawFrame) Len() uint16                        { return uint16(len(f)) }
func (f rawFrame) MarshalBinary() ([]byte, error)     { return f, nil }
func (f *rawFrame) UnmarshalBinary(data []byte) error { *f = append((*f)[:0], data...); return nil }

// SendPacketOut injects frame into the switch as if it came in on inPort, running actions on it.
// inPort CONTROLLER is refused.
func (b *Bridge) SendPacketOut(inPort uint32, actions []Action, frame []byte) error {
	if inPort == PortController {
		return errPacketOutFromController
	}
	sw, _, err := b.currentSwitch()
	if err != nil {
		return err
	}
	po := openflow15.NewPacketOut()
	po.Match = *openflow15.NewMatch()
	po.Match.AddField(*openflow15.NewInPortField(inPort))
	for _, a := range actions {
		act, err := a.encode()
		if err != nil {
			return fmt.Errorf("encoding packet-out action %s: %w", a.text(), err)
		}
		if act != nil {
			po.AddAction(act)
		}
	}
	raw := rawFrame(frame)
	po.Data = &raw
	if err := sw.Send(po); err != nil {
		return fmt.Errorf("sending a packet-out: %w", err)
	}
	return nil
}
