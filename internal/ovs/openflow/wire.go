package openflow

import (
	"encoding/binary"
	"errors"
	"fmt"

	"antrea.io/libOpenflow/openflow15"
)

// Flow_mods for bundles are written straight into a byte buffer. libOpenflow builds a tree of
// objects for every flow_mod, about fifty allocations and several microseconds a flow, which
// made encoding the largest cost of a Sync of many flows on our side. The encoder here writes the
// same bytes as Flow.FlowMod's libOpenflow message (wire_test.go compares them for every match
// field and action) without allocating; actions with no direct encoding here (ct, move,
// output:reg) are built by libOpenflow and copied in.

var errGotoNotLast = errors.New("goto_table must be the last action")

// appendFlowMod appends the flow as an OpenFlow 1.5 flow_mod with the given command, cookie and
// xid.
func (f *Flow) appendFlowMod(b []byte, command uint8, cookie uint64, xid uint32) ([]byte, error) {
	start := len(b)
	b = append(b, openflow15.VERSION, openflow15.Type_FlowMod, 0, 0) // length set below
	b = binary.BigEndian.AppendUint32(b, xid)
	b = binary.BigEndian.AppendUint64(b, cookie)
	b = binary.BigEndian.AppendUint64(b, 0) // cookie mask
	b = append(b, f.Table, command)
	b = binary.BigEndian.AppendUint32(b, 0) // idle and hard timeouts
	b = binary.BigEndian.AppendUint16(b, f.Priority)
	b = binary.BigEndian.AppendUint32(b, 0xffffffff) // buffer id: none
	b = binary.BigEndian.AppendUint32(b, openflow15.P_ANY)
	b = binary.BigEndian.AppendUint32(b, openflow15.OFPG_ANY)
	b = binary.BigEndian.AppendUint32(b, 0) // flags and importance

	b, err := f.appendMatch(b)
	if err != nil {
		return nil, err
	}
	if command != openflow15.FC_DELETE && command != openflow15.FC_DELETE_STRICT {
		if b, err = f.appendInstructions(b); err != nil {
			return nil, err
		}
	}
	binary.BigEndian.PutUint16(b[start+2:], uint16(len(b)-start))
	return b, nil
}

// appendMatch appends the OXM match, padded to 8 bytes.
func (f *Flow) appendMatch(b []byte) ([]byte, error) {
	start := len(b)
	b = binary.BigEndian.AppendUint16(b, openflow15.MatchType_OXM)
	b = append(b, 0, 0) // length set below
	arp := f.isARP()
	var idx [maxInlineMatch]int
	for _, i := range f.matchOrder(idx[:]) {
		var err error
		if b, err = f.Match[i].appendOXM(b, arp); err != nil {
			return nil, err
		}
	}
	binary.BigEndian.PutUint16(b[start+2:], uint16(len(b)-start))
	return pad8(b, start), nil
}

// appendInstructions appends apply_actions (if any action encodes to something) and goto_table.
func (f *Flow) appendInstructions(b []byte) ([]byte, error) {
	start := len(b)
	b = binary.BigEndian.AppendUint16(b, openflow15.InstrType_APPLY_ACTIONS)
	b = append(b, 0, 0, 0, 0, 0, 0) // length set below, padding
	var gotoTable *gotoAction
	for i, a := range f.Actions {
		if g, ok := a.(gotoAction); ok {
			if i != len(f.Actions)-1 {
				return nil, errGotoNotLast
			}
			// A backwards goto is sent as is: the switch rejects it.
			gotoTable = &g
			continue
		}
		var err error
		if b, err = a.appendWire(b); err != nil {
			return nil, fmt.Errorf("encoding action %q: %w", a.text(), err)
		}
	}
	if len(b)-start == 8 {
		b = b[:start] // no action: no apply_actions instruction
	} else {
		binary.BigEndian.PutUint16(b[start+2:], uint16(len(b)-start))
	}
	if gotoTable != nil {
		b = binary.BigEndian.AppendUint16(b, openflow15.InstrType_GOTO_TABLE)
		b = append(b, 0, 8, gotoTable.table, 0, 0, 0)
	}
	return b, nil
}

// appendOXM appends the field as an OXM TLV (arp: the flow matches ARP), with the header and
// mask conventions of the libOpenflow constructors that oxm uses.
func (m *MatchField) appendOXM(b []byte, arp bool) ([]byte, error) {
	if m.prefix.IsValid() && !m.prefix.Addr().Is4() {
		return nil, errNotIPv4
	}
	const nxm, basic = openflow15.OXM_CLASS_NXM_1, openflow15.OXM_CLASS_OPENFLOW_BASIC
	switch m.kind {
	case kindCTState:
		return appendOXM32(b, nxm, openflow15.NXM_NX_CT_STATE, uint32(m.value), uint32(m.mask), true), nil
	case kindCTZone:
		return binary.BigEndian.AppendUint16(oxmHeader(b, nxm, openflow15.NXM_NX_CT_ZONE, 2, false), uint16(m.value)), nil
	case kindCTMark:
		return appendOXM32(b, nxm, openflow15.NXM_NX_CT_MARK, uint32(m.value), uint32(m.mask), m.mask != 0), nil
	case kindCTLabel:
		v, mask := m.ctLabel128()
		return append(append(oxmHeader(b, nxm, openflow15.NXM_NX_CT_LABEL, 16, true), v[:]...), mask[:]...), nil
	case kindEthType:
		return binary.BigEndian.AppendUint16(oxmHeader(b, basic, openflow15.OXM_FIELD_ETH_TYPE, 2, false), uint16(m.value)), nil
	case kindReg:
		return appendOXM32(b, nxm, uint8(openflow15.NXM_NX_REG0+int(m.reg)), uint32(m.value), uint32(m.mask), m.mask != 0), nil
	case kindTunID:
		return binary.BigEndian.AppendUint64(oxmHeader(b, basic, openflow15.OXM_FIELD_TUNNEL_ID, 8, false), m.value), nil
	case kindTunSrc:
		return appendOXMPrefix(b, nxm, openflow15.NXM_NX_TUN_IPV4_SRC, m, true), nil
	case kindTunDst:
		return appendOXMPrefix(b, nxm, openflow15.NXM_NX_TUN_IPV4_DST, m, true), nil
	case kindInPort:
		return binary.BigEndian.AppendUint32(oxmHeader(b, basic, openflow15.OXM_FIELD_IN_PORT, 4, false), uint32(m.value)), nil
	case kindEthSrc:
		return appendOXMMAC(b, openflow15.OXM_FIELD_ETH_SRC, m), nil
	case kindEthDst:
		return appendOXMMAC(b, openflow15.OXM_FIELD_ETH_DST, m), nil
	case kindARPSha:
		return appendOXMMAC(b, openflow15.OXM_FIELD_ARP_SHA, m), nil
	case kindNwSrc:
		if arp {
			return appendOXMPrefix(b, basic, openflow15.OXM_FIELD_ARP_SPA, m, false), nil
		}
		return appendOXMPrefix(b, basic, openflow15.OXM_FIELD_IPV4_SRC, m, true), nil
	case kindNwDst:
		if arp {
			return appendOXMPrefix(b, basic, openflow15.OXM_FIELD_ARP_TPA, m, false), nil
		}
		return appendOXMPrefix(b, basic, openflow15.OXM_FIELD_IPV4_DST, m, true), nil
	case kindARPOp:
		return binary.BigEndian.AppendUint16(oxmHeader(b, basic, openflow15.OXM_FIELD_ARP_OP, 2, false), uint16(m.value)), nil
	case kindNwProto:
		return append(oxmHeader(b, basic, openflow15.OXM_FIELD_IP_PROTO, 1, false), byte(m.value)), nil
	case kindICMPType:
		return append(oxmHeader(b, basic, openflow15.OXM_FIELD_ICMPV4_TYPE, 1, false), byte(m.value)), nil
	case kindPktMark:
		return appendOXM32(b, nxm, openflow15.NXM_NX_PKT_MARK, uint32(m.value), 0, false), nil
	case kindTpDst:
		field, err := tpDstField(uint8(m.reg))
		if err != nil {
			return nil, err
		}
		if m.mask != 0 {
			b = binary.BigEndian.AppendUint16(oxmHeader(b, basic, field, 2, true), uint16(m.value))
			return binary.BigEndian.AppendUint16(b, uint16(m.mask)), nil
		}
		return binary.BigEndian.AppendUint16(oxmHeader(b, basic, field, 2, false), uint16(m.value)), nil
	case kindConjID:
		return appendOXM32(b, nxm, openflow15.NXM_NX_CONJ_ID, uint32(m.value), 0, false), nil
	case kindIPDSCP:
		return append(oxmHeader(b, basic, openflow15.OXM_FIELD_IP_DSCP, 1, false), byte(m.value)), nil
	case kindTpSrc:
		field := uint8(openflow15.OXM_FIELD_UDP_SRC)
		switch uint8(m.reg) {
		case ProtoTCP:
			field = openflow15.OXM_FIELD_TCP_SRC
		case ProtoUDP:
		default:
			return nil, fmt.Errorf("tp_src of IP protocol %d: only TCP and UDP are supported", m.reg)
		}
		return binary.BigEndian.AppendUint16(oxmHeader(b, basic, field, 2, false), uint16(m.value)), nil
	}
	return nil, fmt.Errorf("unknown match field kind %d", m.kind)
}

// oxmHeader appends an OXM header for a value of size bytes (and as many of mask).
func oxmHeader(b []byte, class uint16, field uint8, size int, masked bool) []byte {
	b = binary.BigEndian.AppendUint16(b, class)
	if masked {
		return append(b, field<<1|1, byte(2*size))
	}
	return append(b, field<<1, byte(size))
}

func appendOXM32(b []byte, class uint16, field uint8, value, mask uint32, masked bool) []byte {
	b = binary.BigEndian.AppendUint32(oxmHeader(b, class, field, 4, masked), value)
	if masked {
		b = binary.BigEndian.AppendUint32(b, mask)
	}
	return b
}

// appendOXMPrefix appends an IPv4 field, with the prefix's mask unless it is a host address or
// the field takes none (ARP addresses).
func appendOXMPrefix(b []byte, class uint16, field uint8, m *MatchField, maskable bool) []byte {
	addr := m.prefix.Addr().As4()
	masked := maskable && m.prefix.Bits() != 32
	b = append(oxmHeader(b, class, field, 4, masked), addr[:]...)
	if masked {
		b = binary.BigEndian.AppendUint32(b, ^uint32(0)<<(32-m.prefix.Bits()))
	}
	return b
}

func appendOXMMAC(b []byte, field uint8, m *MatchField) []byte {
	var mac [6]byte
	copy(mac[:], m.mac[:m.macLen])
	return append(oxmHeader(b, openflow15.OXM_CLASS_OPENFLOW_BASIC, field, 6, false), mac[:]...)
}

// pad8 pads b with zeros so that the part from start is a multiple of 8 bytes long.
func pad8(b []byte, start int) []byte {
	for (len(b)-start)%8 != 0 {
		b = append(b, 0)
	}
	return b
}

// appendActionHeader appends an action's type and length.
func appendActionHeader(b []byte, typ, length uint16) []byte {
	return binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(b, typ), length)
}

// appendEncoded appends the action as libOpenflow marshals it.
func appendEncoded(b []byte, a Action) ([]byte, error) {
	act, err := a.encode()
	if err != nil || act == nil {
		return b, err
	}
	data, err := act.MarshalBinary()
	if err != nil {
		return nil, err
	}
	return append(b, data...), nil
}
