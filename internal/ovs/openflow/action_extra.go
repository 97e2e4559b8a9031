package openflow

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"antrea.io/libOpenflow/openflow15"
)

// Actions the base pipeline does not use, some of which the Windows datapath cannot execute
// (internal/pipeline's Windows profile rejects those). They exist so that a feature that needs one
// builds it here, where the profile sees it, and not as a string.

// Nicira extension subtypes libOpenflow has no action type for.
const (
	nxastCTClear        = 43
	nxastCheckPktLarger = 49
	nxVendorID          = 0x00002320
)

// rawAction is a Nicira extension action libOpenflow cannot build, as its wire bytes.
type rawAction struct {
	openflow15.ActionHeader
	data []byte
}

func (a *rawAction) Header() *openflow15.ActionHeader { return &a.ActionHeader }
func (a *rawAction) Len() uint16                      { return uint16(len(a.data)) }
func (a *rawAction) MarshalBinary() ([]byte, error)   { return a.data, nil }
func (a *rawAction) UnmarshalBinary(data []byte) error {
	a.data = append([]byte(nil), data...)
	return nil
}

// appendNXHeader appends a Nicira extension action header (10 bytes) for an action of length
// bytes.
func appendNXHeader(b []byte, length, subtype uint16) []byte {
	b = appendActionHeader(b, openflow15.ActionType_Experimenter, length)
	b = binary.BigEndian.AppendUint32(b, nxVendorID)
	return binary.BigEndian.AppendUint16(b, subtype)
}

func rawEncode(a Action) (openflow15.Action, error) {
	data, err := a.appendWire(nil)
	if err != nil {
		return nil, err
	}
	return &rawAction{ActionHeader: openflow15.ActionHeader{Type: openflow15.ActionType_Experimenter, Length: uint16(len(data))}, data: data}, nil
}

type ctClearAction struct{}

// CTClear clears the packet's conntrack state (ct_clear). Windows skips it silently.
func CTClear() Action { return ctClearAction{} }

func (ctClearAction) text() string                         { return "ct_clear" }
func (a ctClearAction) encode() (openflow15.Action, error) { return rawEncode(a) }
func (ctClearAction) appendKey(b []byte) []byte            { return append(b, 'C') }
func (ctClearAction) appendWire(b []byte) ([]byte, error) {
	return append(appendNXHeader(b, 16, nxastCTClear), 0, 0, 0, 0, 0, 0), nil
}

type decTTLAction struct{}

// DecTTL decrements the IP TTL (hop limit for IPv6), dropping the packet at zero (OpenFlow
// 1.5's dec_nw_ttl, which OVS prints as dec_ttl).
func DecTTL() Action { return decTTLAction{} }

func (decTTLAction) text() string { return "dec_ttl" }
func (decTTLAction) encode() (openflow15.Action, error) {
	return openflow15.NewActionDecNwTtl(), nil
}
func (decTTLAction) appendKey(b []byte) []byte             { return append(b, 'd') }
func (a decTTLAction) appendWire(b []byte) ([]byte, error) { return appendEncoded(b, a) }

type meterAction struct{ id uint32 }

// Meter sends the packet through an OpenFlow meter (OpenFlow 1.5's meter action).
func Meter(id uint32) Action { return meterAction{id} }

func (a meterAction) text() string { return fmt.Sprintf("meter:%d", a.id) }
func (a meterAction) encode() (openflow15.Action, error) {
	return openflow15.NewActionMeter(a.id), nil
}
func (a meterAction) appendKey(b []byte) []byte {
	return binary.AppendUvarint(append(b, 'M'), uint64(a.id))
}
func (a meterAction) appendWire(b []byte) ([]byte, error) { return appendEncoded(b, a) }

type checkPktLargerAction struct {
	length uint16
	reg    int
	bit    int
}

// CheckPktLarger sets bit of register reg when the packet is longer than length bytes
// (check_pkt_larger). Windows skips it silently.
func CheckPktLarger(length uint16, reg, bit int) Action {
	return checkPktLargerAction{length: length, reg: reg, bit: bit}
}

func (a checkPktLargerAction) text() string {
	return fmt.Sprintf("check_pkt_larger(%d)->%s[%d]", a.length, nxmRegName(a.reg), a.bit)
}
func (a checkPktLargerAction) encode() (openflow15.Action, error) { return rawEncode(a) }
func (a checkPktLargerAction) appendKey(b []byte) []byte {
	return append(binary.BigEndian.AppendUint16(append(b, 'P'), a.length), byte(a.reg), byte(a.bit))
}
func (a checkPktLargerAction) appendWire(b []byte) ([]byte, error) {
	start := len(b)
	b = appendNXHeader(b, 24, nxastCheckPktLarger)
	b = binary.BigEndian.AppendUint16(b, a.length)
	b = binary.BigEndian.AppendUint16(b, uint16(a.bit))
	b = oxmHeader(b, openflow15.OXM_CLASS_NXM_1, uint8(openflow15.NXM_NX_REG0+a.reg), 4, false)
	for len(b)-start < 24 {
		b = append(b, 0)
	}
	return b, nil
}

// SetPktMark sets the packet's mark (pkt_mark). Windows skips it silently.
func SetPktMark(mark uint32) Action {
	return setFieldAction{style: styleHex, field: MatchField{kind: kindPktMark, value: uint64(mark)}}
}

type setIPv6Action struct {
	dst  bool
	addr netip.Addr
}

// SetIPv6Src rewrites the IPv6 source address. Windows skips it silently.
func SetIPv6Src(ip netip.Addr) Action { return setIPv6Action{addr: ip} }

// SetIPv6Dst rewrites the IPv6 destination address. Windows skips it silently.
func SetIPv6Dst(ip netip.Addr) Action { return setIPv6Action{dst: true, addr: ip} }

func (a setIPv6Action) fieldName() string {
	if a.dst {
		return "ipv6_dst"
	}
	return "ipv6_src"
}
func (a setIPv6Action) text() string { return "set_field:" + a.addr.String() + "->" + a.fieldName() }
func (a setIPv6Action) encode() (openflow15.Action, error) {
	if !a.addr.Is6() || a.addr.Is4In6() {
		return nil, fmt.Errorf("%s is not an IPv6 address", a.addr)
	}
	ip := net.IP(a.addr.AsSlice())
	f := openflow15.NewIpv6SrcField(ip, nil)
	if a.dst {
		f = openflow15.NewIpv6DstField(ip, nil)
	}
	return openflow15.NewActionSetField(*f), nil
}
func (a setIPv6Action) appendKey(b []byte) []byte {
	return appendStringKey(appendStringKey(append(b, 's'), a.fieldName()), a.addr.String())
}
func (a setIPv6Action) appendWire(b []byte) ([]byte, error) { return appendEncoded(b, a) }

// More fields for Move and Learn.
var (
	FieldInPort  = Field{"NXM_OF_IN_PORT", 16}
	FieldPktMark = Field{"NXM_NX_PKT_MARK", 32}
	FieldIPv6Src = Field{"NXM_NX_IPV6_SRC", 128}
	FieldIPv6Dst = Field{"NXM_NX_IPV6_DST", 128}
	// FieldTunIPv4Src is the tunnel source (tun_src) of a decapsulated packet.
	FieldTunIPv4Src = Field{"NXM_NX_TUN_IPV4_SRC", 32}
)

// FieldReg is register idx as a whole field.
func FieldReg(idx int) Field { return Field{nxmRegName(idx), 32} }

// Name is the field's NXM/OXM name as OVS prints it.
func (f Field) Name() string { return f.name }

// Bits is the field's width.
func (f Field) Bits() int { return f.bits }

// LearnLoad copies field Src of the packet into field Dst in the learned flow's actions.
type LearnLoad struct{ Src, Dst Field }

// nxLearnDeleteLearned is NX_LEARN_F_DELETE_LEARNED.
const nxLearnDeleteLearned = 1 << 1

// LearnLoadValue loads a constant into the whole field Dst in the learned flow's actions.
type LearnLoadValue struct {
	Value uint32
	Dst   Field
}

// LearnSpec describes learn(...): a flow added to Table from the packet that runs the action.
type LearnSpec struct {
	Table                    uint8
	Priority                 uint16
	IdleTimeout, HardTimeout uint16
	// Cookie is the learned flows' cookie. With DeleteLearned, the flows learned with it are
	// deleted once no flow holds a learn action with this cookie and table any more (the
	// learning flow deleted, or modified to learn with another cookie).
	Cookie        uint64
	DeleteLearned bool
	// EthType and IPProto, when not zero, are matched by the learned flow (OVS needs them
	// before matching on IP or L4 fields).
	EthType uint16
	IPProto uint8
	// Match are fields the learned flow matches on, with this packet's values.
	Match []Field
	// Loads are the learned flow's actions that load this packet's fields.
	Loads []LearnLoad
	// LoadValues are the learned flow's actions that load constants (at most 32 bits).
	LoadValues []LearnLoadValue
	// Output, when set, makes the learned flow output to the port this packet holds in it.
	Output *Field
}

type learnAction struct{ LearnSpec }

// Learn adds or refreshes a flow built from the packet (learn); it runs in ovs-vswitchd, not in
// the datapath.
func Learn(s LearnSpec) Action { return learnAction{s} }

func (a learnAction) text() string {
	parts := []string{fmt.Sprintf("table=%d", a.Table)}
	if a.IdleTimeout != 0 {
		parts = append(parts, fmt.Sprintf("idle_timeout=%d", a.IdleTimeout))
	}
	if a.HardTimeout != 0 {
		parts = append(parts, fmt.Sprintf("hard_timeout=%d", a.HardTimeout))
	}
	if a.Priority != 0x8000 {
		parts = append(parts, fmt.Sprintf("priority=%d", a.Priority))
	}
	if a.DeleteLearned {
		parts = append(parts, "delete_learned")
	}
	if a.Cookie != 0 {
		parts = append(parts, fmt.Sprintf("cookie=%#x", a.Cookie))
	}
	if a.EthType != 0 {
		parts = append(parts, fmt.Sprintf("eth_type=%#x", a.EthType))
	}
	if a.IPProto != 0 {
		parts = append(parts, fmt.Sprintf("nw_proto=%d", a.IPProto))
	}
	for _, f := range a.Match {
		parts = append(parts, f.name+"[]")
	}
	for _, l := range a.Loads {
		parts = append(parts, "load:"+l.Src.name+"[]->"+l.Dst.name+"[]")
	}
	for _, l := range a.LoadValues {
		parts = append(parts, fmt.Sprintf("load:%#x->%s[]", l.Value, l.Dst.name))
	}
	if a.Output != nil {
		parts = append(parts, "output:"+a.Output.name+"[]")
	}
	return "learn(" + strings.Join(parts, ",") + ")"
}

func (a learnAction) appendKey(b []byte) []byte { return appendStringKey(append(b, 'L'), a.text()) }

func (a learnAction) appendWire(b []byte) ([]byte, error) { return appendEncoded(b, a) }

func learnField(f Field) (*openflow15.NXLearnSpecField, error) {
	h, err := openflow15.FindFieldHeaderByName(f.name, false)
	if err != nil {
		return nil, err
	}
	return &openflow15.NXLearnSpecField{Field: h}, nil
}

func (a learnAction) encode() (openflow15.Action, error) {
	l := openflow15.NewNXActionLearn()
	l.TableID = a.Table
	l.Priority = a.Priority
	l.IdleTimeout = a.IdleTimeout
	l.HardTimeout = a.HardTimeout
	l.Cookie = a.Cookie
	if a.DeleteLearned {
		l.Flags |= nxLearnDeleteLearned
	}
	immediate := func(name string, bits uint16, value uint64) error {
		dst, err := learnField(Field{name, int(bits)})
		if err != nil {
			return err
		}
		v := make([]byte, 2*((bits+15)/16))
		for i := len(v) - 1; i >= 0; i-- {
			v[i] = byte(value)
			value >>= 8
		}
		l.LearnSpecs = append(l.LearnSpecs, &openflow15.NXLearnSpec{Header: openflow15.NewLearnHeaderMatchFromValue(bits), SrcValue: v, DstField: dst})
		return nil
	}
	if a.EthType != 0 {
		if err := immediate("NXM_OF_ETH_TYPE", 16, uint64(a.EthType)); err != nil {
			return nil, err
		}
	}
	if a.IPProto != 0 {
		if err := immediate("NXM_OF_IP_PROTO", 8, uint64(a.IPProto)); err != nil {
			return nil, err
		}
	}
	for _, f := range a.Match {
		src, err := learnField(f)
		if err != nil {
			return nil, err
		}
		l.LearnSpecs = append(l.LearnSpecs, &openflow15.NXLearnSpec{Header: openflow15.NewLearnHeaderMatchFromField(uint16(f.bits)), SrcField: src, DstField: src})
	}
	for _, ld := range a.Loads {
		if ld.Src.bits != ld.Dst.bits {
			return nil, fmt.Errorf("learn load between fields of %d and %d bits", ld.Src.bits, ld.Dst.bits)
		}
		src, err := learnField(ld.Src)
		if err != nil {
			return nil, err
		}
		dst, err := learnField(ld.Dst)
		if err != nil {
			return nil, err
		}
		l.LearnSpecs = append(l.LearnSpecs, &openflow15.NXLearnSpec{Header: openflow15.NewLearnHeaderLoadFromField(uint16(ld.Src.bits)), SrcField: src, DstField: dst})
	}
	for _, lv := range a.LoadValues {
		if lv.Dst.bits > 32 {
			return nil, fmt.Errorf("learn load of a constant into %s: only fields of up to 32 bits", lv.Dst.name)
		}
		dst, err := learnField(lv.Dst)
		if err != nil {
			return nil, err
		}
		bits := uint16(lv.Dst.bits)
		v := make([]byte, 2*((bits+15)/16))
		for i, value := len(v)-1, lv.Value; i >= 0; i-- {
			v[i] = byte(value)
			value >>= 8
		}
		l.LearnSpecs = append(l.LearnSpecs, &openflow15.NXLearnSpec{Header: openflow15.NewLearnHeaderLoadFromValue(bits), SrcValue: v, DstField: dst})
	}
	if a.Output != nil {
		src, err := learnField(*a.Output)
		if err != nil {
			return nil, err
		}
		l.LearnSpecs = append(l.LearnSpecs, &openflow15.NXLearnSpec{Header: openflow15.NewLearnHeaderOutputFromField(uint16(a.Output.bits)), SrcField: src})
	}
	return l, nil
}
