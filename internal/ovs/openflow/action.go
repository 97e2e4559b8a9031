package openflow

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"antrea.io/libOpenflow/openflow15"
)

// Action is one OpenFlow action; build it with the constructors below.
type Action interface {
	// text renders the action as ovs-ofctl prints it.
	text() string
	// encode builds the wire action (nil for none).
	encode() (openflow15.Action, error)
	// appendKey appends a compact binary identity: equal keys mean equal text.
	appendKey(b []byte) []byte
	// appendWire appends the wire action, the bytes encode's action marshals to (see wire.go).
	appendWire(b []byte) ([]byte, error)
}

type outputAction struct{ port uint32 }

// Output sends the packet to a port (PortInPort, PortNormal and PortLocal too).
func Output(port uint32) Action { return outputAction{port} }

// Normal hands the packet to the NORMAL (L2 learning) pipeline.
func Normal() Action { return outputAction{PortNormal} }

func (a outputAction) text() string {
	switch a.port {
	case PortInPort, PortNormal, PortLocal:
		return portText(a.port)
	case PortController:
		// The whole packet (max_len OFPCML_NO_BUFFER), as OVS prints it.
		return "CONTROLLER:65535"
	}
	return "output:" + portText(a.port)
}
func (a outputAction) encode() (openflow15.Action, error) {
	return openflow15.NewActionOutput(a.port), nil
}
func (a outputAction) appendKey(b []byte) []byte {
	return binary.AppendUvarint(append(b, 'o'), uint64(a.port))
}
func (a outputAction) appendWire(b []byte) ([]byte, error) {
	b = binary.BigEndian.AppendUint32(appendActionHeader(b, openflow15.ActionType_Output, 16), a.port)
	b = binary.BigEndian.AppendUint16(b, openflow15.OFPCML_NO_BUFFER)
	return append(b, 0, 0, 0, 0, 0, 0), nil
}

type controllerAction struct{ maxLen uint16 }

// ToController sends the first maxLen bytes of the packet to the controller (a packet-in, as
// Output(PortController), which sends the whole packet): an OFPAT_OUTPUT to CONTROLLER with max_len,
// which OVS's datapath truncates before the upcall's copy. maxLen 65535 (OFPCML_NO_BUFFER) is the
// whole packet.
func ToController(maxLen uint16) Action { return controllerAction{maxLen} }

func (a controllerAction) text() string { return fmt.Sprintf("CONTROLLER:%d", a.maxLen) }
func (a controllerAction) encode() (openflow15.Action, error) {
	o := openflow15.NewActionOutput(PortController)
	o.MaxLen = a.maxLen
	return o, nil
}
func (a controllerAction) appendKey(b []byte) []byte {
	return binary.AppendUvarint(append(b, 'c'), uint64(a.maxLen))
}
func (a controllerAction) appendWire(b []byte) ([]byte, error) {
	b = binary.BigEndian.AppendUint32(appendActionHeader(b, openflow15.ActionType_Output, 16), PortController)
	b = binary.BigEndian.AppendUint16(b, a.maxLen)
	return append(b, 0, 0, 0, 0, 0, 0), nil
}

type outputRegAction struct{ reg, start, end int }

// OutputReg sends the packet to the port held in bits start..end of register reg.
func OutputReg(reg, start, end int) Action { return outputRegAction{reg, start, end} }

func (a outputRegAction) text() string {
	return "output:" + nxmRegName(a.reg) + bitRange(a.start, a.end, 32)
}
func (a outputRegAction) encode() (openflow15.Action, error) {
	f := openflow15.NewRegMatchField(a.reg, 0, nil)
	return openflow15.NewOutputFromField(f, openflow15.NewNXRange(a.start, a.end).ToOfsBits()), nil
}
func (a outputRegAction) appendKey(b []byte) []byte {
	return append(b, 'r', byte(a.reg), byte(a.start), byte(a.end))
}
func (a outputRegAction) appendWire(b []byte) ([]byte, error) { return appendEncoded(b, a) }

type groupAction struct{ id uint32 }

// ToGroup sends the packet to a group.
func ToGroup(id uint32) Action { return groupAction{id} }

func (a groupAction) text() string                       { return fmt.Sprintf("group:%d", a.id) }
func (a groupAction) encode() (openflow15.Action, error) { return openflow15.NewActionGroup(a.id), nil }
func (a groupAction) appendKey(b []byte) []byte {
	return binary.AppendUvarint(append(b, 'g'), uint64(a.id))
}
func (a groupAction) appendWire(b []byte) ([]byte, error) {
	return binary.BigEndian.AppendUint32(appendActionHeader(b, openflow15.ActionType_Group, 8), a.id), nil
}

type gotoAction struct{ table uint8 }

// GotoTable continues in a later table; it must be the last action.
func GotoTable(t uint8) Action { return gotoAction{t} }

func (a gotoAction) text() string                       { return fmt.Sprintf("goto_table:%d", a.table) }
func (a gotoAction) encode() (openflow15.Action, error) { return nil, errGotoInstruction }
func (a gotoAction) appendKey(b []byte) []byte          { return append(b, 't', a.table) }
func (a gotoAction) appendWire([]byte) ([]byte, error)  { return nil, errGotoInstruction }

var errGotoInstruction = errors.New("goto_table is an instruction")

type dropAction struct{}

// Drop is the empty action list; OVS prints it as "drop".
func Drop() Action { return dropAction{} }

func (dropAction) text() string                       { return "" }
func (dropAction) encode() (openflow15.Action, error) { return nil, nil }

// appendKey adds nothing: like its empty text, Drop is the same as no action.
func (dropAction) appendKey(b []byte) []byte { return b }

func (dropAction) appendWire(b []byte) ([]byte, error) { return b, nil }

// setFieldAction is OFPAT_SET_FIELD (OpenFlow 1.5 allows masks) of the field a match field
// describes (arp: an ARP field). It keeps no text: its value is rendered from the field when the
// action is printed (style), so that the tens of thousands of actions of a large node's Services
// and routes cost no string each (bench-scale: issue 64); its name is the field's (name), not a
// string of its own, which kept it in a larger size class (80 bytes for 64).
type setFieldAction struct {
	field MatchField
	arp   bool
	style valueStyle
}

// name is the set field's name, as ovs-ofctl prints it.
func (a setFieldAction) name() string {
	switch a.field.kind {
	case kindEthDst:
		return "eth_dst"
	case kindEthSrc:
		return "eth_src"
	case kindTunDst:
		return "tun_dst"
	case kindTunID:
		return "tun_id"
	case kindReg:
		return regName(int(a.field.reg))
	case kindARPOp:
		return "arp_op"
	case kindARPSha:
		return "arp_sha"
	case kindNwSrc:
		if a.arp {
			return "arp_spa"
		}
		return "ip_src"
	case kindNwDst:
		return "ip_dst"
	case kindCTMark:
		return "ct_mark"
	case kindPktMark:
		return "pkt_mark"
	case kindTpDst:
		if a.field.reg == ProtoUDP {
			return "udp_dst"
		}
		return "tcp_dst"
	}
	return fmt.Sprintf("field%d", a.field.kind)
}

// valueStyle is how a set_field's value is printed, as ovs-ofctl prints it.
type valueStyle uint8

const (
	styleMAC       valueStyle = iota // the field's MAC
	styleAddr                        // the field's prefix's address
	styleHex                         // the value in hex ("0" for zero)
	styleMaskedHex                   // value/mask in hex, or the value alone when exact
	styleDecimal                     // the value in decimal
)

// value renders the set value.
func (a setFieldAction) value() string {
	switch a.style {
	case styleMAC:
		return a.field.macAddr().String()
	case styleAddr:
		return a.field.prefix.Addr().String()
	case styleHex:
		return hex(a.field.value)
	case styleMaskedHex:
		return maskedHex(a.field.value, a.field.mask)
	}
	return strconv.FormatUint(a.field.value, 10)
}

func (a setFieldAction) text() string { return "set_field:" + a.value() + "->" + a.name() }

func (a setFieldAction) encode() (openflow15.Action, error) {
	f, err := a.field.oxm(a.arp)
	if err != nil {
		return nil, err
	}
	return openflow15.NewActionSetField(*f), nil
}

// appendKey identifies the action by its field and arp flag: its name and printed value are
// functions of them.
func (a setFieldAction) appendKey(b []byte) []byte {
	b = a.field.appendKey(append(b, 's'))
	if a.arp {
		return append(b, 1)
	}
	return append(b, 0)
}
func (a setFieldAction) appendWire(b []byte) ([]byte, error) {
	start := len(b)
	b, err := a.field.appendOXM(appendActionHeader(b, openflow15.ActionType_SetField, 0), a.arp)
	if err != nil {
		return nil, err
	}
	b = pad8(b, start)
	binary.BigEndian.PutUint16(b[start+2:], uint16(len(b)-start))
	return b, nil
}

// SetEthDst rewrites the destination MAC.
func SetEthDst(mac net.HardwareAddr) Action {
	return setFieldAction{style: styleMAC, field: EthDst(mac)}
}

// SetEthSrc rewrites the source MAC.
func SetEthSrc(mac net.HardwareAddr) Action {
	return setFieldAction{style: styleMAC, field: EthSrc(mac)}
}

// SetTunDst sets the tunnel destination of a flow-based tunnel port.
func SetTunDst(ip netip.Addr) Action {
	return setFieldAction{style: styleAddr, field: TunDst(ip)}
}

// SetTunID sets the tunnel key (VNI).
func SetTunID(id uint64) Action {
	return setFieldAction{style: styleHex, field: TunID(id)}
}

// SetReg loads value into bits start..end of register idx (a masked set_field,
// which OVS accepts under OpenFlow 1.5 where NXAST_REG_LOAD is refused).
func SetReg(idx, start, end int, value uint32) Action {
	mask := bitMask(start, end)
	field := MatchField{kind: kindReg, reg: uint8(idx), value: uint64(value << start & mask)}
	if mask != 0xffffffff {
		field.mask = uint64(mask)
	}
	return setFieldAction{style: styleMaskedHex, field: field}
}

// regNames are the registers' names, made once (set_field actions of registers are many).
var regNames = func() (n [16]string) {
	for i := range n {
		n[i] = fmt.Sprintf("reg%d", i)
	}
	return n
}()

// regName names register idx.
func regName(idx int) string {
	if idx >= 0 && idx < len(regNames) {
		return regNames[idx]
	}
	return fmt.Sprintf("reg%d", idx)
}

// SetARPOp sets the ARP opcode (2 for a reply).
func SetARPOp(op uint16) Action {
	return setFieldAction{style: styleDecimal, field: ARPOp(op)}
}

// SetARPSha sets the ARP sender hardware address.
func SetARPSha(mac net.HardwareAddr) Action {
	return setFieldAction{style: styleMAC, field: ARPSHA(mac)}
}

// SetARPSpa sets the ARP sender protocol address.
func SetARPSpa(ip netip.Addr) Action {
	return setFieldAction{style: styleAddr, field: NwSrc(netip.PrefixFrom(ip, ip.BitLen())), arp: true}
}

// SetCTMark sets ct_mark (inside CT's Exec); mask 0 or 0xffffffff is exact.
func SetCTMark(mark, mask uint32) Action {
	return setFieldAction{style: styleMaskedHex, field: CTMark(mark, mask)}
}

// Field names a whole NXM/OXM field for Move.
type Field struct {
	name string // NXM name as OVS prints it
	bits int
}

// Fields that Move supports.
var (
	FieldEthSrc = Field{"NXM_OF_ETH_SRC", 48}
	FieldEthDst = Field{"NXM_OF_ETH_DST", 48}
	FieldARPSha = Field{"NXM_NX_ARP_SHA", 48}
	FieldARPTha = Field{"NXM_NX_ARP_THA", 48}
	FieldARPSpa = Field{"NXM_OF_ARP_SPA", 32}
	FieldARPTpa = Field{"NXM_OF_ARP_TPA", 32}
	FieldIPSrc  = Field{"NXM_OF_IP_SRC", 32}
	FieldIPDst  = Field{"NXM_OF_IP_DST", 32}
)

type moveAction struct{ src, dst Field }

// Move copies a whole field into another of the same width.
func Move(src, dst Field) Action { return moveAction{src, dst} }

func (a moveAction) text() string { return "move:" + a.src.name + "[]->" + a.dst.name + "[]" }
func (a moveAction) encode() (openflow15.Action, error) {
	if a.src.bits != a.dst.bits {
		return nil, fmt.Errorf("move between fields of %d and %d bits", a.src.bits, a.dst.bits)
	}
	// OpenFlow 1.5 copy_field: OVS refuses NXAST_REG_MOVE under 1.5 and
	// prints copy_field as move:.
	src, err := openflow15.FindOxmIdByName(a.src.name, false)
	if err != nil {
		return nil, err
	}
	dst, err := openflow15.FindOxmIdByName(a.dst.name, false)
	if err != nil {
		return nil, err
	}
	return openflow15.NewActionCopyField(uint16(a.src.bits), 0, 0, *src, *dst), nil
}
func (a moveAction) appendKey(b []byte) []byte {
	return appendStringKey(appendStringKey(append(b, 'm'), a.src.name), a.dst.name)
}
func (a moveAction) appendWire(b []byte) ([]byte, error) { return appendEncoded(b, a) }

// CTAction describes ct(...).
type CTAction struct {
	Commit bool
	// Table recirculates to this table after conntrack; nil means no recirculation.
	Table *uint8
	Zone  uint16
	// NAT adds nat: with a zero SNAT it is plain "nat" (un-NAT established connections).
	NAT bool
	// SNAT sets nat(src=SNAT) when valid (implies NAT).
	SNAT netip.Addr
	// DNAT sets nat(dst=DNAT) when valid (implies NAT); a zero port keeps the port.
	DNAT netip.AddrPort
	// Exec are the actions run on the connection (set_field of ct_mark).
	Exec []Action
}

type ctAction struct{ CTAction }

// CT sends the packet through conntrack.
func CT(c CTAction) Action { return ctAction{c} }

func (a ctAction) text() string {
	var parts []string
	if a.Commit {
		parts = append(parts, "commit")
	}
	if a.Table != nil {
		parts = append(parts, fmt.Sprintf("table=%d", *a.Table))
	}
	if a.Zone != 0 {
		parts = append(parts, fmt.Sprintf("zone=%d", a.Zone))
	}
	switch {
	case a.SNAT.IsValid():
		parts = append(parts, "nat(src="+a.SNAT.String()+")")
	case a.DNAT.IsValid() && a.DNAT.Port() != 0:
		parts = append(parts, "nat(dst="+a.DNAT.String()+")")
	case a.DNAT.IsValid():
		parts = append(parts, "nat(dst="+a.DNAT.Addr().String()+")")
	case a.NAT:
		parts = append(parts, "nat")
	}
	if len(a.Exec) > 0 {
		var ex []string
		for _, e := range a.Exec {
			ex = append(ex, e.text())
		}
		parts = append(parts, "exec("+strings.Join(ex, ",")+")")
	}
	return "ct(" + strings.Join(parts, ",") + ")"
}

func (a ctAction) appendKey(b []byte) []byte {
	var flags byte
	if a.Commit {
		flags |= 1
	}
	if a.NAT {
		flags |= 2
	}
	table := uint8(0)
	if a.Table != nil {
		flags |= 4
		table = *a.Table
	}
	b = append(b, 'c', flags, table, byte(a.Zone>>8), byte(a.Zone))
	b = appendAddrKey(b, a.SNAT)
	b = appendAddrKey(b, a.DNAT.Addr())
	b = append(b, byte(a.DNAT.Port()>>8), byte(a.DNAT.Port()))
	for _, e := range a.Exec {
		b = e.appendKey(append(b, ','))
	}
	return append(b, ')')
}

func (a ctAction) appendWire(b []byte) ([]byte, error) { return appendEncoded(b, a) }

func (a ctAction) encode() (openflow15.Action, error) {
	ct := openflow15.NewNXActionConnTrack()
	if a.Commit {
		ct.Commit()
	}
	if a.Table != nil {
		ct.Table(*a.Table)
	}
	ct.ZoneImm(a.Zone)
	if a.DNAT.IsValid() && !a.SNAT.IsValid() {
		nat, err := natDst(a.DNAT)
		if err != nil {
			return nil, err
		}
		ct.AddAction(nat)
	} else if a.NAT || a.SNAT.IsValid() {
		nat := openflow15.NewNXActionCTNAT()
		if a.SNAT.IsValid() {
			if err := nat.SetSNAT(); err != nil {
				return nil, err
			}
			ip := net.IP(a.SNAT.AsSlice())
			nat.SetRangeIPv4Min(ip)
			nat.SetRangeIPv4Max(ip)
		}
		ct.AddAction(nat)
	}
	for _, e := range a.Exec {
		act, err := e.encode()
		if err != nil {
			return nil, err
		}
		ct.AddAction(act)
	}
	return ct, nil
}

func nxmRegName(idx int) string { return fmt.Sprintf("NXM_NX_REG%d", idx) }

func bitRange(start, end, width int) string {
	if start == 0 && end == width-1 {
		return "[]"
	}
	if start == end {
		return fmt.Sprintf("[%d]", start)
	}
	return fmt.Sprintf("[%d..%d]", start, end)
}
