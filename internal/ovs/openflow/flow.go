package openflow

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"antrea.io/libOpenflow/openflow15"
)

// Special OpenFlow port numbers.
const (
	PortInPort uint32 = openflow15.P_IN_PORT
	PortNormal uint32 = openflow15.P_NORMAL
	PortLocal  uint32 = openflow15.P_LOCAL
	// PortController is the controller (in_port of a packet-out the controller made up).
	PortController uint32 = openflow15.P_CONTROLLER
)

// Flow is one OpenFlow flow. Cookie's low 40 bits carry the object id; Sync
// stamps the category and round into the high bits.
type Flow struct {
	Table    uint8
	Priority uint16
	Cookie   uint64
	Match    []MatchField
	Actions  []Action
}

// maxInlineMatch is the number of match fields ordered without allocating.
const maxInlineMatch = 16

// matchOrder returns the indices of the match fields in the order OVS prints them (a stable
// sort by field), in idx's storage when it is large enough.
func (f *Flow) matchOrder(idx []int) []int {
	idx = idx[:0]
	for i := range f.Match {
		idx = append(idx, i)
		for j := i; j > 0 && f.Match[idx[j-1]].order() > f.Match[idx[j]].order(); j-- {
			idx[j-1], idx[j] = idx[j], idx[j-1]
		}
	}
	return idx
}

// appendMatchKey appends a compact binary identity of the flow in its table, the way OpenFlow
// identifies a flow: table, priority and match. Two flows have the same key exactly when their
// table, priority and MatchString are equal; the key costs no text rendering and, appended to a
// reused buffer, no allocation.
func (f *Flow) appendMatchKey(b []byte) []byte {
	b = append(b, f.Table, byte(f.Priority>>8), byte(f.Priority))
	var idx [maxInlineMatch]int
	for _, i := range f.matchOrder(idx[:]) {
		b = f.Match[i].appendKey(b)
	}
	return b
}

// appendActionsKey appends a compact binary identity of the actions: equal keys mean equal
// ActionsString.
func (f *Flow) appendActionsKey(b []byte) []byte { return appendActionsKey(b, f.Actions) }

func appendActionsKey(b []byte, actions []Action) []byte {
	for _, a := range actions {
		b = a.appendKey(b)
	}
	return b
}

// decodeMatch appends to m the match fields of a key appendMatchKey built (after its table and
// priority), in the key's order. The key encodes every field whole: the installed-flow cache keeps
// the match only there.
func decodeMatch(key string, m []MatchField) []MatchField {
	for i := 3; i < len(key); {
		var f MatchField
		f.kind, f.reg = matchKind(key[i]), key[i+1]
		i += 2
		f.value, i = uvarintAt(key, i)
		f.mask, i = uvarintAt(key, i)
		f.prefix, i = prefixAt(key, i)
		f.macLen = key[i]
		i += 1 + copy(f.mac[:], key[i+1:i+1+int(f.macLen)])
		m = append(m, f)
	}
	return m
}

// countMatch returns how many match fields a key holds.
func countMatch(key string) int {
	n := 0
	for i := 3; i < len(key); n++ {
		_, i = uvarintAt(key, i+2)
		_, i = uvarintAt(key, i)
		_, i = prefixAt(key, i)
		i += 1 + int(key[i])
	}
	return n
}

// uvarintAt reads the unsigned varint (binary.AppendUvarint) at key[i:] and returns the index after it.
func uvarintAt(key string, i int) (uint64, int) {
	var v uint64
	for shift := 0; ; shift += 7 {
		c := key[i]
		i++
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return v, i
		}
	}
}

// prefixAt reads the prefix appendPrefixKey appended at key[i:] and returns the index after it.
func prefixAt(key string, i int) (netip.Prefix, int) {
	switch key[i] {
	case 4:
		var a [4]byte
		copy(a[:], key[i+1:])
		return netip.PrefixFrom(netip.AddrFrom4(a), int(key[i+5])), i + 6
	case 16:
		var a [16]byte
		copy(a[:], key[i+1:])
		return netip.PrefixFrom(netip.AddrFrom16(a), int(key[i+17])), i + 18
	}
	return netip.Prefix{}, i + 1
}

func (f *Flow) isARP() bool {
	for _, m := range f.Match {
		if m.kind == kindEthType && m.value == ethTypeARP {
			return true
		}
	}
	return false
}

// MatchString renders priority and match as ovs-ofctl prints them.
func (f *Flow) MatchString() string {
	var parts []string
	if f.Priority != 0x8000 { // OFP_DEFAULT_PRIORITY 0x8000 is not printed
		parts = append(parts, fmt.Sprintf("priority=%d", f.Priority))
	}
	arp := f.isARP()
	proto := f.shorthand()
	var idx [maxInlineMatch]int
	for _, i := range f.matchOrder(idx[:]) {
		m := &f.Match[i]
		switch {
		case proto != "" && m.kind == kindEthType:
			parts = append(parts, proto)
		case proto != "" && m.kind == kindNwProto:
		default:
			parts = append(parts, m.text(arp))
		}
	}
	return strings.Join(parts, ",")
}

// ActionsString renders the actions as ovs-ofctl prints them.
func (f *Flow) ActionsString() string {
	var parts []string
	for _, a := range f.Actions {
		if t := a.text(); t != "" {
			parts = append(parts, t)
		}
	}
	if len(parts) == 0 {
		return "drop"
	}
	return strings.Join(parts, ",")
}

// String renders the flow exactly as `ovs-ofctl -O OpenFlow15 dump-flows
// --no-stats` prints it (without the leading space); ovs-ofctl add-flows
// accepts it back.
func (f *Flow) String() string {
	var b strings.Builder
	if f.Cookie != 0 {
		fmt.Fprintf(&b, "cookie=%#x, ", f.Cookie)
	}
	if f.Table != 0 {
		fmt.Fprintf(&b, "table=%d, ", f.Table)
	}
	b.WriteString(f.MatchString())
	b.WriteString(" actions=")
	b.WriteString(f.ActionsString())
	return b.String()
}

// FlowMod encodes the flow as an OpenFlow 1.5 flow_mod with the given command.
func (f *Flow) FlowMod(command uint8) (*openflow15.FlowMod, error) {
	return f.flowMod(command, f.Cookie)
}

// flowMod encodes the flow with the given command and cookie.
func (f *Flow) flowMod(command uint8, cookie uint64) (*openflow15.FlowMod, error) {
	fm := openflow15.NewFlowMod()
	fm.TableId = f.Table
	fm.Priority = f.Priority
	fm.Cookie = cookie
	fm.Command = command
	arp := f.isARP()
	var idx [maxInlineMatch]int
	for _, i := range f.matchOrder(idx[:]) {
		field, err := f.Match[i].oxm(arp)
		if err != nil {
			return nil, err
		}
		fm.Match.AddField(*field)
	}
	if command == openflow15.FC_DELETE || command == openflow15.FC_DELETE_STRICT {
		return fm, nil
	}
	apply := openflow15.NewInstrApplyActions()
	var gotoTable *openflow15.InstrGotoTable
	for i, a := range f.Actions {
		if g, ok := a.(gotoAction); ok {
			if i != len(f.Actions)-1 {
				return nil, errGotoNotLast
			}
			// A backwards goto is sent as is: the switch rejects it.
			gotoTable = openflow15.NewInstrGotoTable(g.table)
			continue
		}
		act, err := a.encode()
		if err != nil {
			return nil, fmt.Errorf("encoding action %q: %w", a.text(), err)
		}
		if act != nil {
			_ = apply.AddAction(act, false)
		}
	}
	if len(apply.Actions) > 0 {
		fm.AddInstruction(apply)
	}
	if gotoTable != nil {
		fm.AddInstruction(gotoTable)
	}
	return fm, nil
}

// ---- match fields -------------------------------------------------------

type matchKind uint8

// The order OVS's match_format prints fields in.
const (
	kindConjID matchKind = iota // conj_id, printed before the conntrack fields
	kindCTState
	kindCTZone
	kindCTMark
	kindCTLabel // 32 bits of ct_label: value 32 bits, reg the first bit
	kindEthType
	kindReg // + register index, up to 16 registers
)

const (
	kindTunID matchKind = kindReg + 16 + iota
	kindTunSrc
	kindTunDst
	kindInPort
	kindEthSrc
	kindEthDst
	kindNwSrc
	kindNwDst
	kindARPOp
	kindNwProto  // printed where arp_op is; a flow has one or the other
	kindIPDSCP   // ip_dscp, printed (as nw_tos) after the addresses
	kindTpSrc    // tp_src (TCP or UDP, the protocol in reg), printed after the network fields
	kindICMPType // icmp_type, printed after the network fields
	kindTpDst    // tp_dst (TCP or UDP, the protocol in reg), printed after the network fields
	kindARPSha   // arp_sha, printed after the network fields of ARP
	kindPktMark  // set_field only
)

const (
	ethTypeIPv4 = 0x0800
	ethTypeARP  = 0x0806
	ethTypeIPv6 = 0x86dd
)

// IP protocol numbers.
const (
	ProtoICMP uint8 = 1
	ProtoTCP  uint8 = 6
	ProtoUDP  uint8 = 17
)

// protoShorthand names the IPv4 protocols OVS prints instead of "ip" and nw_proto.
var protoShorthand = map[uint64]string{1: "icmp", 2: "igmp", 6: "tcp", 17: "udp", 132: "sctp"}

// shorthand returns the name OVS prints for the flow's IPv4 protocol ("tcp"), or "".
func (f *Flow) shorthand() string {
	ip := false
	name := ""
	for _, m := range f.Match {
		switch m.kind {
		case kindEthType:
			ip = m.value == ethTypeIPv4
		case kindNwProto:
			name = protoShorthand[m.value]
		}
	}
	if !ip {
		return ""
	}
	return name
}

// MatchField is one match criterion; build it with the constructors below.
//
// It is kept small (56 bytes): a large node holds a few hundred thousand of them, in its flows and
// in its set_field actions (bench-scale, issue 64). The MAC is held inline, not as a slice.
type MatchField struct {
	value  uint64
	mask   uint64 // 0 means exact
	prefix netip.Prefix
	kind   matchKind
	// reg is the register's index (kindReg), the IP protocol (kindTpSrc, kindTpDst) or the first
	// bit (kindCTLabel).
	reg uint8
	// macLen is how many bytes of mac the field's MAC has (6, or 0 for none).
	macLen uint8
	mac    [6]byte
}

// withMAC returns m with MAC a (at most its first 6 bytes: an Ethernet address).
func (m MatchField) withMAC(a net.HardwareAddr) MatchField {
	m.macLen = uint8(copy(m.mac[:], a))
	return m
}

// macAddr returns the field's MAC (nil when it has none).
func (m *MatchField) macAddr() net.HardwareAddr {
	if m.macLen == 0 {
		return nil
	}
	return slices.Clone(net.HardwareAddr(m.mac[:m.macLen]))
}

// appendKey appends the field's binary identity (see Flow.appendMatchKey).
func (m *MatchField) appendKey(b []byte) []byte {
	b = append(b, byte(m.kind), byte(m.reg))
	b = binary.AppendUvarint(b, m.value)
	b = binary.AppendUvarint(b, m.mask)
	b = appendPrefixKey(b, m.prefix)
	b = append(b, m.macLen)
	return append(b, m.mac[:m.macLen]...)
}

func appendPrefixKey(b []byte, p netip.Prefix) []byte {
	if !p.IsValid() {
		return append(b, 0)
	}
	b = appendAddrKey(b, p.Addr())
	return append(b, byte(p.Bits()))
}

func appendAddrKey(b []byte, a netip.Addr) []byte {
	switch {
	case a.Is4():
		v := a.As4()
		return append(append(b, 4), v[:]...)
	case a.IsValid():
		v := a.As16()
		return append(append(b, 16), v[:]...)
	}
	return append(b, 0)
}

func appendStringKey(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

func (m MatchField) order() int {
	if m.kind == kindReg {
		return int(kindReg) + int(m.reg)
	}
	return int(m.kind)
}

// InPort matches the ingress OpenFlow port.
func InPort(port uint32) MatchField { return MatchField{kind: kindInPort, value: uint64(port)} }

// EthSrc matches the source MAC.
func EthSrc(mac net.HardwareAddr) MatchField { return MatchField{kind: kindEthSrc}.withMAC(mac) }

// EthDst matches the destination MAC.
func EthDst(mac net.HardwareAddr) MatchField { return MatchField{kind: kindEthDst}.withMAC(mac) }

// EthType matches the EtherType (printed as ip/arp for those).
func EthType(t uint16) MatchField { return MatchField{kind: kindEthType, value: uint64(t)} }

// IPv4 matches IPv4 packets ("ip").
func IPv4() MatchField { return EthType(ethTypeIPv4) }

// IPv6 matches IPv6 packets ("ipv6").
func IPv6() MatchField { return EthType(ethTypeIPv6) }

// ARP matches ARP packets ("arp").
func ARP() MatchField { return EthType(ethTypeARP) }

// NwSrc matches the IPv4 source (or arp_spa in an ARP flow) against a prefix.
func NwSrc(p netip.Prefix) MatchField { return MatchField{kind: kindNwSrc, prefix: p.Masked()} }

// NwDst matches the IPv4 destination (or arp_tpa in an ARP flow) against a prefix.
func NwDst(p netip.Prefix) MatchField { return MatchField{kind: kindNwDst, prefix: p.Masked()} }

// ARPTPA matches the ARP target protocol address.
func ARPTPA(ip netip.Addr) MatchField {
	return MatchField{kind: kindNwDst, prefix: netip.PrefixFrom(ip, ip.BitLen())}
}

// ARPSHA matches the ARP sender hardware address.
func ARPSHA(mac net.HardwareAddr) MatchField { return MatchField{kind: kindARPSha}.withMAC(mac) }

// ARPOp matches the ARP opcode.
func ARPOp(op uint16) MatchField { return MatchField{kind: kindARPOp, value: uint64(op)} }

// IPProto matches the IPv4 protocol (nw_proto); the flow must also match IPv4(). OVS prints
// icmp, tcp, udp and a few more by name instead of "ip".
func IPProto(proto uint8) MatchField { return MatchField{kind: kindNwProto, value: uint64(proto)} }

// ICMPType matches the ICMPv4 type; the flow must also match IPv4() and IPProto(ProtoICMP).
func ICMPType(typ uint8) MatchField { return MatchField{kind: kindICMPType, value: uint64(typ)} }

// TunDst matches the tunnel destination address.
func TunDst(ip netip.Addr) MatchField {
	return MatchField{kind: kindTunDst, prefix: netip.PrefixFrom(ip, ip.BitLen())}
}

// TunSrc matches the tunnel source address (the peer that encapsulated the packet).
func TunSrc(ip netip.Addr) MatchField {
	return MatchField{kind: kindTunSrc, prefix: netip.PrefixFrom(ip, ip.BitLen())}
}

// TunID matches the tunnel key (VNI).
func TunID(id uint64) MatchField { return MatchField{kind: kindTunID, value: id} }

// CTZone matches the conntrack zone.
func CTZone(zone uint16) MatchField { return MatchField{kind: kindCTZone, value: uint64(zone)} }

// CTMark matches ct_mark under mask (0 or 0xffffffff: exact).
func CTMark(mark, mask uint32) MatchField {
	if mask == 0xffffffff {
		mask = 0
	}
	return MatchField{kind: kindCTMark, value: uint64(mark), mask: uint64(mask)}
}

// CTLabel32 matches the 32 bits of ct_label from bit start (0, 32, 64 or 96) against value.
func CTLabel32(start int, value uint32) MatchField {
	return MatchField{kind: kindCTLabel, value: uint64(value), reg: uint8(start &^ 31)}
}

// ctLabel128 is the match's value and mask as 128-bit big-endian ct_label bytes.
func (m MatchField) ctLabel128() (value, mask [16]byte) {
	byteOff := 12 - int(m.reg)/8 // the 4 bytes of bits start..start+31, counted from the last byte
	binary.BigEndian.PutUint32(value[byteOff:], uint32(m.value))
	binary.BigEndian.PutUint32(mask[byteOff:], 0xffffffff)
	return value, mask
}

// hex128 prints a 128-bit big-endian value as OVS's ds_put_hex does: "0x", no leading zeros; 0
// is "0".
func hex128(v [16]byte) string {
	s := strings.TrimLeft(fmt.Sprintf("%x", v[:]), "0")
	if s == "" {
		return "0"
	}
	return "0x" + s
}

// Conntrack state bits, in the order OVS prints them.
const (
	CTNew   uint32 = 1 << 0
	CTEst   uint32 = 1 << 1
	CTRel   uint32 = 1 << 2
	CTRpl   uint32 = 1 << 3
	CTInv   uint32 = 1 << 4
	CTTrk   uint32 = 1 << 5
	CTSNAT  uint32 = 1 << 6
	CTDNAT  uint32 = 1 << 7
	ctNames        = "new,est,rel,rpl,inv,trk,snat,dnat"
)

// CTState matches the conntrack state: bits in set must be set, bits in unset must be clear.
func CTState(set, unset uint32) MatchField {
	return MatchField{kind: kindCTState, value: uint64(set), mask: uint64(set | unset)}
}

// Reg matches bits start..end (inclusive) of register idx against value.
func Reg(idx, start, end int, value uint32) MatchField {
	mask := bitMask(start, end)
	if mask == 0xffffffff {
		mask = 0
	}
	return MatchField{kind: kindReg, reg: uint8(idx), value: uint64(value) << start & 0xffffffff, mask: uint64(mask)}
}

func bitMask(start, end int) uint32 {
	n := end - start + 1
	if n >= 32 {
		return 0xffffffff
	}
	return ((1 << n) - 1) << start
}

// hex prints like C's "%#x": 0 is "0".
func hex(v uint64) string {
	if v == 0 {
		return "0"
	}
	return fmt.Sprintf("%#x", v)
}

func maskedHex(v, mask uint64) string {
	if mask == 0 {
		return hex(v)
	}
	return hex(v) + "/" + hex(mask)
}

func prefixText(p netip.Prefix) string {
	if p.Bits() == p.Addr().BitLen() {
		return p.Addr().String()
	}
	return p.String()
}

func portText(p uint32) string {
	switch p {
	case PortInPort:
		return "IN_PORT"
	case PortNormal:
		return "NORMAL"
	case PortLocal:
		return "LOCAL"
	case openflow15.P_CONTROLLER:
		return "CONTROLLER"
	}
	return fmt.Sprintf("%d", p)
}

func (m MatchField) text(arp bool) string {
	switch m.kind {
	case kindCTState:
		var b strings.Builder
		b.WriteString("ct_state=")
		for i, name := range strings.Split(ctNames, ",") {
			bit := uint64(1) << i
			if m.mask&bit == 0 {
				continue
			}
			if m.value&bit != 0 {
				b.WriteString("+" + name)
			} else {
				b.WriteString("-" + name)
			}
		}
		return b.String()
	case kindCTZone:
		return fmt.Sprintf("ct_zone=%d", m.value)
	case kindCTMark:
		return "ct_mark=" + maskedHex(m.value, m.mask)
	case kindCTLabel:
		v, mask := m.ctLabel128()
		return "ct_label=" + hex128(v) + "/" + hex128(mask)
	case kindEthType:
		switch m.value {
		case ethTypeIPv4:
			return "ip"
		case ethTypeARP:
			return "arp"
		case ethTypeIPv6:
			return "ipv6"
		}
		return fmt.Sprintf("dl_type=0x%04x", m.value)
	case kindReg:
		return fmt.Sprintf("reg%d=%s", m.reg, maskedHex(m.value, m.mask))
	case kindTunID:
		return "tun_id=" + hex(m.value)
	case kindTunSrc:
		return "tun_src=" + prefixText(m.prefix)
	case kindTunDst:
		return "tun_dst=" + prefixText(m.prefix)
	case kindInPort:
		return "in_port=" + portText(uint32(m.value))
	case kindEthSrc:
		return "dl_src=" + m.macAddr().String()
	case kindEthDst:
		return "dl_dst=" + m.macAddr().String()
	case kindNwSrc:
		if arp {
			return "arp_spa=" + prefixText(m.prefix)
		}
		return "nw_src=" + prefixText(m.prefix)
	case kindNwDst:
		if arp {
			return "arp_tpa=" + prefixText(m.prefix)
		}
		return "nw_dst=" + prefixText(m.prefix)
	case kindARPOp:
		return fmt.Sprintf("arp_op=%d", m.value)
	case kindARPSha:
		return "arp_sha=" + m.macAddr().String()
	case kindNwProto:
		return fmt.Sprintf("nw_proto=%d", m.value)
	case kindICMPType:
		return fmt.Sprintf("icmp_type=%d", m.value)
	case kindIPDSCP:
		return fmt.Sprintf("nw_tos=%d", m.value<<2)
	case kindTpSrc:
		return fmt.Sprintf("tp_src=%d", m.value)
	case kindTpDst:
		if m.mask != 0 {
			return fmt.Sprintf("tp_dst=%#x/%#x", m.value, m.mask)
		}
		return fmt.Sprintf("tp_dst=%d", m.value)
	case kindConjID:
		return fmt.Sprintf("conj_id=%d", m.value)
	case kindPktMark:
		return "pkt_mark=" + hex(m.value)
	}
	return "?"
}

func ipMask(p netip.Prefix) *net.IP {
	if p.Bits() == p.Addr().BitLen() {
		return nil
	}
	m := net.IP(net.CIDRMask(p.Bits(), p.Addr().BitLen()))
	return &m
}

// errNotIPv4 refuses addresses the IPv4 OpenFlow fields cannot carry.
var errNotIPv4 = errors.New("only IPv4 addresses are supported")

// oxm builds the field with libOpenflow (arp: the flow matches ARP).
func (m MatchField) oxm(arp bool) (*openflow15.MatchField, error) {
	if m.prefix.IsValid() && !m.prefix.Addr().Is4() {
		return nil, errNotIPv4
	}
	ip := net.IP(m.prefix.Addr().AsSlice())
	switch m.kind {
	case kindCTState:
		f, _ := openflow15.FindFieldHeaderByName("NXM_NX_CT_STATE", true)
		f.Value = &openflow15.Uint32Message{Data: uint32(m.value)}
		f.Mask = &openflow15.Uint32Message{Data: uint32(m.mask)}
		return f, nil
	case kindCTZone:
		return openflow15.NewCTZoneMatchField(uint16(m.value)), nil
	case kindCTMark:
		if m.mask == 0 {
			return openflow15.NewCTMarkMatchField(uint32(m.value), nil), nil
		}
		mask := uint32(m.mask)
		return openflow15.NewCTMarkMatchField(uint32(m.value), &mask), nil
	case kindCTLabel:
		v, mask := m.ctLabel128()
		return openflow15.NewCTLabelMatchField(v, &mask), nil
	case kindEthType:
		return openflow15.NewEthTypeField(uint16(m.value)), nil
	case kindReg:
		return openflow15.NewRegMatchFieldWithMask(int(m.reg), uint32(m.value), uint32(m.mask)), nil
	case kindTunID:
		return openflow15.NewTunnelIdField(m.value), nil
	case kindTunSrc:
		return openflow15.NewTunnelIpv4SrcField(ip, ipMask(m.prefix)), nil
	case kindTunDst:
		return openflow15.NewTunnelIpv4DstField(ip, ipMask(m.prefix)), nil
	case kindInPort:
		return openflow15.NewInPortField(uint32(m.value)), nil
	case kindEthSrc:
		return openflow15.NewEthSrcField(m.macAddr(), nil), nil
	case kindEthDst:
		return openflow15.NewEthDstField(m.macAddr(), nil), nil
	case kindNwSrc:
		if arp {
			return openflow15.NewArpSpaField(ip), nil
		}
		return openflow15.NewIpv4SrcField(ip, ipMask(m.prefix)), nil
	case kindNwDst:
		if arp {
			return openflow15.NewArpTpaField(ip), nil
		}
		return openflow15.NewIpv4DstField(ip, ipMask(m.prefix)), nil
	case kindARPOp:
		return openflow15.NewArpOperField(uint16(m.value)), nil
	case kindARPSha:
		return openflow15.NewArpShaField(m.macAddr()), nil
	case kindNwProto:
		return openflow15.NewIpProtoField(uint8(m.value)), nil
	case kindICMPType:
		f, _ := openflow15.FindFieldHeaderByName("OXM_OF_ICMPV4_TYPE", false)
		f.Value = &openflow15.IcmpTypeField{Type: uint8(m.value)}
		return f, nil
	case kindTpDst:
		return m.tpDstOXM()
	case kindIPDSCP:
		return openflow15.NewIpDscpField(uint8(m.value), nil), nil
	case kindTpSrc:
		switch uint8(m.reg) {
		case ProtoTCP:
			return openflow15.NewTcpSrcField(uint16(m.value)), nil
		case ProtoUDP:
			return openflow15.NewUdpSrcField(uint16(m.value)), nil
		}
		return nil, fmt.Errorf("tp_src of IP protocol %d: only TCP and UDP are supported", m.reg)
	case kindConjID:
		return openflow15.NewConjIDMatchField(uint32(m.value)), nil
	case kindPktMark:
		f, _ := openflow15.FindFieldHeaderByName("NXM_NX_PKT_MARK", false)
		f.Value = &openflow15.Uint32Message{Data: uint32(m.value)}
		return f, nil
	}
	return nil, fmt.Errorf("unknown match field kind %d", m.kind)
}
