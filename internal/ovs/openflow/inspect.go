package openflow

// Read access to flows for checks such as internal/pipeline's Windows datapath profile: what an
// action does and what a match restricts, without parsing text.

// ActionKind says what an action does.
type ActionKind int

// Action kinds.
const (
	KindOutput ActionKind = iota + 1
	KindOutputReg
	KindGroup
	KindGotoTable
	KindDrop
	KindSetField
	KindMove
	KindCT
	KindCTClear
	KindDecTTL
	KindMeter
	KindCheckPktLarger
	KindLearn
	KindConjunction
)

// ActionInfo describes one action.
type ActionInfo struct {
	Kind ActionKind
	// Port is the port of an Output, the group of a Group, the meter of a Meter and the table of
	// a GotoTable.
	Port uint32
	// Field is the field a SetField or Move writes, by OVS's name for set_field ("eth_dst",
	// "reg0", "pkt_mark", "ipv6_dst") or NXM name for move ("NXM_NX_IPV6_DST").
	Field string
	// SrcField is the field a Move reads.
	SrcField string
	// CT is the ct() of a CT action; its Exec actions can be inspected in turn.
	CT *CTAction
	// Learn is the specification of a Learn action.
	Learn *LearnSpec
}

// Inspect describes an action.
func Inspect(a Action) ActionInfo {
	switch a := a.(type) {
	case outputAction:
		return ActionInfo{Kind: KindOutput, Port: a.port}
	case controllerAction:
		return ActionInfo{Kind: KindOutput, Port: PortController}
	case outputRegAction:
		return ActionInfo{Kind: KindOutputReg, Field: nxmRegName(a.reg)}
	case groupAction:
		return ActionInfo{Kind: KindGroup, Port: a.id}
	case gotoAction:
		return ActionInfo{Kind: KindGotoTable, Port: uint32(a.table)}
	case dropAction:
		return ActionInfo{Kind: KindDrop}
	case setFieldAction:
		return ActionInfo{Kind: KindSetField, Field: a.name()}
	case setIPv6Action:
		return ActionInfo{Kind: KindSetField, Field: a.fieldName()}
	case moveAction:
		return ActionInfo{Kind: KindMove, Field: a.dst.name, SrcField: a.src.name}
	case moveBitsAction:
		return ActionInfo{Kind: KindMove, Field: a.dst.name, SrcField: a.src.name}
	case ctAction:
		c := a.CTAction
		return ActionInfo{Kind: KindCT, CT: &c}
	case ctClearAction:
		return ActionInfo{Kind: KindCTClear}
	case decTTLAction:
		return ActionInfo{Kind: KindDecTTL}
	case meterAction:
		return ActionInfo{Kind: KindMeter, Port: a.id}
	case checkPktLargerAction:
		return ActionInfo{Kind: KindCheckPktLarger, Field: nxmRegName(a.reg)}
	case conjunctionAction:
		return ActionInfo{Kind: KindConjunction, Port: a.id}
	case learnAction:
		s := a.LearnSpec
		return ActionInfo{Kind: KindLearn, Learn: &s}
	}
	return ActionInfo{}
}

// Text renders one action as ovs-ofctl prints it.
func Text(a Action) string { return a.text() }

// EthTypeValue returns the EtherType the field matches, if it is an EtherType match.
func (m MatchField) EthTypeValue() (uint16, bool) {
	return uint16(m.value), m.kind == kindEthType
}

// IPProtoValue returns the IP protocol the field matches, if it is an nw_proto match.
func (m MatchField) IPProtoValue() (uint8, bool) {
	return uint8(m.value), m.kind == kindNwProto
}

// CTStateValue returns the conntrack state bits the field requires set and clear, if it is a
// ct_state match.
func (m MatchField) CTStateValue() (set, unset uint32, ok bool) {
	if m.kind != kindCTState {
		return 0, 0, false
	}
	return uint32(m.value), uint32(m.mask &^ m.value), true
}

// EthTypeIPv6 is the IPv6 EtherType.
const EthTypeIPv6 uint16 = ethTypeIPv6

// EthTypeIPv4 is the IPv4 EtherType.
const EthTypeIPv4 uint16 = ethTypeIPv4
