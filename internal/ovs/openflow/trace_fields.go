package openflow

// Match fields that packet traces need: the DSCP a trace tags its packet with and the source port
// that, with the source address and protocol, tells the traced packet apart from real traffic.

// IPDSCP matches the IPv4 DSCP (the upper 6 bits of the ToS byte; OVS prints nw_tos=dscp<<2);
// the flow must also match IPv4().
func IPDSCP(dscp uint8) MatchField { return MatchField{kind: kindIPDSCP, value: uint64(dscp & 0x3f)} }

// TpSrc matches the TCP or UDP source port; the flow must also match IPv4() and IPProto(proto)
// with proto ProtoTCP or ProtoUDP.
func TpSrc(proto uint8, port uint16) MatchField {
	return MatchField{kind: kindTpSrc, value: uint64(port), reg: int(proto)}
}
