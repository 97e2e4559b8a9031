package openflow

import (
	"net/netip"
)

// Match fields that packet traces need: the DSCP a trace tags its packet with and the source port
// that, with the source address and protocol, tells the traced packet apart from real traffic.

// IPDSCP matches the IPv4 DSCP (the upper 6 bits of the ToS byte; OVS prints nw_tos=dscp<<2);
// the flow must also match IPv4().
func IPDSCP(dscp uint8) MatchField { return MatchField{kind: kindIPDSCP, value: uint64(dscp & 0x3f)} }

// TpSrc matches the TCP or UDP source port; the flow must also match IPv4() and IPProto(proto)
// with proto ProtoTCP or ProtoUDP.
func TpSrc(proto uint8, port uint16) MatchField {
	return MatchField{kind: kindTpSrc, value: uint64(port), reg: proto}
}

// RegMasked matches the bits of register idx under mask (which need not be contiguous): a flow
// that tests two fields of one register must test them in one match field, since OpenFlow refuses
// a match that names a field twice.
func RegMasked(idx int, value, mask uint32) MatchField {
	if mask == 0xffffffff {
		mask = 0
	}
	return MatchField{kind: kindReg, reg: uint8(idx), value: uint64(value&mask) & 0xffffffff, mask: uint64(mask)}
}

// SetNwDst rewrites the IPv4 destination (set_field, with the checksums fixed by the datapath;
// the Windows datapath sets it too: Actions.c OvsExecuteSetAction, IPv4).
func SetNwDst(ip netip.Addr) Action {
	return setFieldAction{style: styleAddr, field: NwDst(netip.PrefixFrom(ip, 32))}
}

// SetTpDst rewrites the TCP or UDP destination port (proto ProtoTCP or ProtoUDP); the flow must
// match IPv4() and IPProto(proto).
func SetTpDst(proto uint8, port uint16) Action {
	return setFieldAction{style: styleDecimal, field: TpDst(proto, port)}
}
