package openflow

import (
	"errors"
	"fmt"
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
	// Frame is the Ethernet frame.
	Frame []byte
}

// SetPacketInHandler has every packet-in given to h, on the connection's reader: h must not block.
// nil stops it.
func (b *Bridge) SetPacketInHandler(h func(PacketIn)) {
	if h == nil {
		b.packetIn.Store(nil)
		return
	}
	b.packetIn.Store(&h)
}

// packetInHandler is the handler SetPacketInHandler set.
type packetInHandler = atomic.Pointer[func(PacketIn)]

func (b *Bridge) receivePacketIn(pkt *ofctrl.PacketIn) {
	h := b.packetIn.Load()
	if h == nil || pkt == nil || pkt.PacketIn == nil || pkt.Data == nil {
		return
	}
	frame, err := pkt.Data.MarshalBinary()
	if err != nil {
		return
	}
	in := PacketIn{Table: pkt.TableId, Cookie: pkt.Cookie, Frame: frame}
	for _, f := range pkt.Match.Fields {
		if f.Class == openflow15.OXM_CLASS_OPENFLOW_BASIC && f.Field == openflow15.OXM_FIELD_IN_PORT {
			if p, ok := f.Value.(*openflow15.InPortField); ok {
				in.InPort = p.InPort
			}
		}
	}
	(*h)(in)
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
