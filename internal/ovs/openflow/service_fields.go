package openflow

import (
	"fmt"
	"net"
	"net/netip"

	"antrea.io/libOpenflow/openflow15"
)

// Match fields and actions that Services need: the L4 destination port, part-field moves (a MAC
// kept in ct_label) and group_mods that add or replace.

// TpDst matches the TCP or UDP destination port; the flow must also match IPv4() and
// IPProto(proto) with proto ProtoTCP or ProtoUDP.
func TpDst(proto uint8, port uint16) MatchField {
	return MatchField{kind: kindTpDst, value: uint64(port), reg: proto}
}

// FieldCTLabel is ct_label, for Move into ct(exec(...)) and out of it.
var FieldCTLabel = Field{"NXM_NX_CT_LABEL", 128}

// FieldCTMark is ct_mark, for Move into ct(exec(...)).
var FieldCTMark = Field{"NXM_NX_CT_MARK", 32}

type moveBitsAction struct {
	src, dst           Field
	srcStart, dstStart int
	n                  int
}

// MoveBits copies n bits of src from bit srcStart into dst from bit dstStart.
func MoveBits(src Field, srcStart int, dst Field, dstStart int, n int) Action {
	return moveBitsAction{src: src, dst: dst, srcStart: srcStart, dstStart: dstStart, n: n}
}

func (a moveBitsAction) text() string {
	return "move:" + a.src.name + bitRange(a.srcStart, a.srcStart+a.n-1, a.src.bits) +
		"->" + a.dst.name + bitRange(a.dstStart, a.dstStart+a.n-1, a.dst.bits)
}

func (a moveBitsAction) encode() (openflow15.Action, error) {
	if a.n <= 0 || a.srcStart+a.n > a.src.bits || a.dstStart+a.n > a.dst.bits {
		return nil, fmt.Errorf("move of %d bits from %s[%d] to %s[%d] out of range", a.n, a.src.name, a.srcStart, a.dst.name, a.dstStart)
	}
	src, err := openflow15.FindOxmIdByName(a.src.name, false)
	if err != nil {
		return nil, err
	}
	dst, err := openflow15.FindOxmIdByName(a.dst.name, false)
	if err != nil {
		return nil, err
	}
	return openflow15.NewActionCopyField(uint16(a.n), uint16(a.srcStart), uint16(a.dstStart), *src, *dst), nil
}

func (a moveBitsAction) appendKey(b []byte) []byte { return appendStringKey(append(b, 'M'), a.text()) }

func (a moveBitsAction) appendWire(b []byte) ([]byte, error) { return appendEncoded(b, a) }

// tpDstOXM returns the OXM field of a TpDst match.
func tpDstField(proto uint8) (uint8, error) {
	switch proto {
	case ProtoTCP:
		return openflow15.OXM_FIELD_TCP_DST, nil
	case ProtoUDP:
		return openflow15.OXM_FIELD_UDP_DST, nil
	}
	return 0, fmt.Errorf("tp_dst of IP protocol %d: only TCP and UDP are supported", proto)
}

func (m MatchField) tpDstOXM() (*openflow15.MatchField, error) {
	if _, err := tpDstField(uint8(m.reg)); err != nil {
		return nil, err
	}
	f := openflow15.NewUdpDstField(uint16(m.value))
	if uint8(m.reg) == ProtoTCP {
		f = openflow15.NewTcpDstField(uint16(m.value))
	}
	if m.mask != 0 {
		f.HasMask = true
		f.Mask = openflow15.NewPortField(uint16(m.mask))
		f.Length *= 2
	}
	return f, nil
}

// natDst encodes nat(dst=addr:port).
func natDst(ap netip.AddrPort) (*openflow15.NXActionCTNAT, error) {
	if !ap.Addr().Is4() {
		return nil, errNotIPv4
	}
	nat := openflow15.NewNXActionCTNAT()
	if err := nat.SetDNAT(); err != nil {
		return nil, err
	}
	ip := net.IP(ap.Addr().AsSlice())
	nat.SetRangeIPv4Min(ip)
	nat.SetRangeIPv4Max(ip)
	if ap.Port() != 0 {
		p := ap.Port()
		nat.SetRangeProtoMin(&p)
		nat.SetRangeProtoMax(&p)
	}
	return nat, nil
}

// OFPGC_ADD_OR_MOD is OVS's group_mod command that adds a group or replaces it if it exists
// (OpenFlow 1.5 has no such command; OVS accepts its extension in every version).
const groupAddOrMod = 0x8000

type resubmitAction struct{ table uint8 }

// Resubmit runs the flows of table on the packet and comes back to the next action (resubmit(,t)):
// a table of learned flows consulted for what they load into registers.
func Resubmit(table uint8) Action { return resubmitAction{table} }

func (a resubmitAction) text() string { return fmt.Sprintf("resubmit(,%d)", a.table) }
func (a resubmitAction) encode() (openflow15.Action, error) {
	return openflow15.NewNXActionResubmitTableAction(openflow15.OFPP_IN_PORT, a.table), nil
}
func (a resubmitAction) appendKey(b []byte) []byte           { return append(b, 'r', a.table) }
func (a resubmitAction) appendWire(b []byte) ([]byte, error) { return appendEncoded(b, a) }

// Fields for learned flows of Services.
var (
	FieldTCPDst = Field{"NXM_OF_TCP_DST", 16}
	FieldUDPDst = Field{"NXM_OF_UDP_DST", 16}
)
