package pipeline

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/winnet-io/winnet/internal/ovs/openflow"
)

// The Windows datapath profile: what the OVS Windows kernel datapath (ovsext, last shipped in OVS
// 3.7.x; Antrea ships a 3.0.5 build) executes differently from the userspace datapath the tests
// run on. The tests' datapath accepts every case below, so a test that passes there proves nothing
// about Windows: CheckWindows is the proof. Sources are datapath-windows/ovsext/<file> in OVS's
// last tree with the Windows datapath (9426c211); see docs/windows-datapath.md.
//
//	rule                  rejects                                      because (ovsext source)
//	--------------------  -------------------------------------------  -----------------------------------------------------------------
//	RuleCTClear           ct_clear                                     skipped silently: Actions.c OvsDoExecuteActions, default case
//	RuleCheckPktLen       check_pkt_larger                             skipped silently: Actions.c OvsDoExecuteActions, default case
//	RuleIPv6Set           set_field/move/learn load of an IPv6 field   ignored, returns success: Actions.c OvsExecuteSetAction
//	RuleDecTTLIPv6        dec_ttl in a flow not restricted to IPv4     the IPv6 hop limit set is ignored: Actions.c OvsExecuteSetAction
//	RulePktMark           set_field/move/learn load of pkt_mark        ignored, returns success: Actions.c OvsExecuteSetAction
//	RuleMeter             meter (action; OpenFlow 1.5 has no           no meters before OVS 3.1: Meter.c (added in b26015c3)
//	                      meter instruction)
//	RuleCTProtocol        ct() in a flow that does not match ip and    anything else is dropped: Conntrack.c OvsDetectCtPacket returns
//	                      tcp, udp or icmp (or +trk: the packet        NOT_SUPPORTED and OvsDoExecuteActions stops the action list
//	                      already went through such a ct())
//	RulePacketOutCtrl     packet-out with in_port CONTROLLER           NULL in_port, host crash before OVS 3.6: User.c
//	                                                                   _MapNlAttrToOvsPktExec (fixed by defb8f33)
//	RuleFlushZone0        conntrack flush of zone 0                    zone 0 flushes every zone: Conntrack.c OvsCtFlush
//	RuleFlushPartial      conntrack flush narrower than a zone         every flush calls OvsNatFlush(zone), which wipes the zone's
//	                                                                   NAT table but keeps its connections, so their replies are no
//	                                                                   longer un-NATed: Conntrack.c OvsCtFlush, Conntrack-nat.c
//	RuleFlushNATZone      whole-zone flush of a zone another feature   the other feature's connections start again (+new) and lose
//	                      NATs in                                      their NAT state: Conntrack.c OvsCtFlush
//	RuleTunnelType        STT or VXLAN-GBP tunnel, VXLAN over IPv6     STT removed in 3.6 (19b89416); no GBP: Flow.c
//	                                                                   OvsTunnelAttrToIPTunnelKey; VXLAN is IPv4 only: Vxlan.c
//	                                                                   OvsEncapVxlan
//
// The checks apply to flows, to the buckets of groups (with the match of every flow that sends to
// the group), to the actions run inside ct(exec(...)), to what learn() installs, to packet-outs,
// to conntrack flushes and to tunnel ports.
const (
	RuleCTClear       = "no-ct-clear"
	RuleCheckPktLen   = "no-check-pkt-len"
	RuleIPv6Set       = "no-ipv6-set"
	RuleDecTTLIPv6    = "no-dec-ttl-ipv6"
	RulePktMark       = "no-pkt-mark"
	RuleMeter         = "no-meter"
	RuleCTProtocol    = "ct-tcp-udp-icmp-only"
	RulePacketOutCtrl = "no-packet-out-from-controller"
	RuleFlushZone0    = "no-flush-zone-0"
	RuleFlushPartial  = "flush-whole-zone-only"
	RuleFlushNATZone  = "no-flush-of-another-features-nat-zone"
	RuleTunnelType    = "tunnel-vxlan-v4-geneve-gre-only"
)

// PacketOut is a packet the agent injects into the bridge (OFPT_PACKET_OUT): the port it pretends
// the packet came in on, and the actions run on it. A feature that sends them (Services' refusals,
// RejectPacketOut) describes them with this type so that they pass CheckWindows.
type PacketOut struct {
	InPort  uint32
	Actions []openflow.Action
}

// ConntrackTuple is one connection's 5-tuple.
type ConntrackTuple struct {
	Proto            uint8
	Src, Dst         netip.Addr
	SrcPort, DstPort uint16
}

// ConntrackFlush is a deletion of conntrack entries: the whole Zone, or only the connections
// matching Tuple when it is set. Owner names the feature that flushes. Nothing flushes yet; a
// feature that does (Services on endpoint removal) describes its flushes with this type.
type ConntrackFlush struct {
	Owner string
	Zone  uint16
	Tuple *ConntrackTuple
}

// TunnelPort is a tunnel port as OVSDB holds it: Interface type and options.
type TunnelPort struct {
	Type    string
	Options map[string]string
}

// Datapath is what an agent programs into OVS, for CheckWindows.
type Datapath struct {
	Flows      []openflow.Flow
	Groups     []openflow.Group
	PacketOuts []PacketOut
	Flushes    []ConntrackFlush
	Tunnels    []TunnelPort
	// NATZones maps each conntrack zone some feature NATs in to those features.
	NATZones map[uint16][]string
}

// NATZones are the conntrack zones the base pipeline NATs in, by feature: it un-NATs (and, with
// SNAT, SNATs) in ConntrackZone.
func (n Node) NATZones() map[uint16][]string {
	return map[uint16][]string{ConntrackZone: {"node"}}
}

// Violation is one thing the Windows datapath would not do as the tests' datapath does.
type Violation struct {
	Rule string
	// Where names the flow, group, packet-out, flush or tunnel.
	Where  string
	Detail string
}

func (v Violation) Error() string {
	return fmt.Sprintf("windows datapath profile: %s: %s: %s", v.Rule, v.Where, v.Detail)
}

// CheckWindows returns every violation of the Windows datapath profile in d.
func CheckWindows(d Datapath) []Violation {
	var c checker
	for i := range d.Flows {
		f := &d.Flows[i]
		c.actions("flow "+f.String(), f.Match, f.Actions)
	}
	for _, g := range d.Groups {
		// A bucket runs with the match of whichever flow sent the packet to the group.
		var senders [][]openflow.MatchField
		for i := range d.Flows {
			if sendsToGroup(d.Flows[i].Actions, g.ID) {
				senders = append(senders, d.Flows[i].Match)
			}
		}
		if len(senders) == 0 {
			senders = [][]openflow.MatchField{nil}
		}
		for b, bk := range g.Buckets {
			for _, m := range senders {
				c.actions(fmt.Sprintf("group %d bucket %d", g.ID, b), m, bk.Actions)
			}
		}
	}
	for _, p := range d.PacketOuts {
		where := fmt.Sprintf("packet-out in_port=%d", p.InPort)
		if p.InPort == openflow.PortController {
			c.add(RulePacketOutCtrl, where, "a packet-out from in_port CONTROLLER crashes Windows hosts before OVS 3.6; send it from LOCAL or a real port")
		}
		c.actions(where, nil, p.Actions)
	}
	for _, fl := range d.Flushes {
		where := fmt.Sprintf("conntrack flush of zone %d by %s", fl.Zone, fl.Owner)
		switch {
		case fl.Zone == 0:
			c.add(RuleFlushZone0, where, "zone 0 flushes every zone on Windows")
		case fl.Tuple != nil:
			c.add(RuleFlushPartial, where, "a 5-tuple flush also wipes the zone's NAT table on Windows, so the zone's other NATed connections stop being un-NATed; flush the whole zone")
		default:
			for _, owner := range d.NATZones[fl.Zone] {
				if owner != fl.Owner {
					c.add(RuleFlushNATZone, where, fmt.Sprintf("%s NATs in zone %d; its connections would lose their NAT state", owner, fl.Zone))
				}
			}
		}
	}
	for _, t := range d.Tunnels {
		c.tunnel(t)
	}
	return c.out
}

type checker struct{ out []Violation }

func (c *checker) add(rule, where, detail string) {
	c.out = append(c.out, Violation{Rule: rule, Where: where, Detail: detail})
}

func sendsToGroup(actions []openflow.Action, id uint32) bool {
	return slices.ContainsFunc(actions, func(a openflow.Action) bool {
		i := openflow.Inspect(a)
		return i.Kind == openflow.KindGroup && i.Port == id
	})
}

// actions checks actions run on packets that matched match.
func (c *checker) actions(where string, match []openflow.MatchField, actions []openflow.Action) {
	for _, a := range actions {
		info := openflow.Inspect(a)
		text := openflow.Text(a)
		switch info.Kind {
		case openflow.KindCTClear:
			c.add(RuleCTClear, where, "ct_clear is skipped silently on Windows")
		case openflow.KindCheckPktLarger:
			c.add(RuleCheckPktLen, where, text+" is skipped silently on Windows")
		case openflow.KindMeter:
			c.add(RuleMeter, where, text+": no meters before OVS 3.1 (Antrea's Windows build is 3.0.5)")
		case openflow.KindDecTTL:
			if !matchesIPv4(match) {
				c.add(RuleDecTTLIPv6, where, "dec_ttl in a flow that also matches IPv6: Windows ignores the hop-limit rewrite")
			}
		case openflow.KindSetField, openflow.KindMove:
			c.field(where, text, info.Field)
		case openflow.KindCT:
			if !trackable(match) {
				c.add(RuleCTProtocol, where, text+" without a match on ip and tcp, udp or icmp (or +trk): Windows drops any other packet sent to ct()")
			}
			c.actions(where+" ct exec", match, info.CT.Exec)
		case openflow.KindLearn:
			for _, l := range info.Learn.Loads {
				c.field(where+" learned flow", text, l.Dst.Name())
			}
			for _, l := range info.Learn.LoadValues {
				c.field(where+" learned flow", text, l.Dst.Name())
			}
		}
	}
}

// field checks a write of a field (set_field name or NXM name).
func (c *checker) field(where, text, name string) {
	n := strings.ToLower(name)
	switch {
	case strings.Contains(n, "ipv6") || strings.HasPrefix(n, "nd_") || strings.Contains(n, "_nd_"):
		c.add(RuleIPv6Set, where, text+": Windows ignores rewrites of IPv6 fields and reports success")
	case n == "pkt_mark" || n == "nxm_nx_pkt_mark":
		c.add(RulePktMark, where, text+": Windows ignores pkt_mark and reports success")
	}
}

func matchesIPv4(match []openflow.MatchField) bool {
	return slices.ContainsFunc(match, func(m openflow.MatchField) bool {
		t, ok := m.EthTypeValue()
		return ok && t == openflow.EthTypeIPv4
	})
}

// trackable tells whether packets matching match are ones Windows conntrack tracks: IPv4 TCP, UDP
// or ICMP, or already tracked (+trk, which only a ct() of such a packet sets, since every ct() is
// checked).
func trackable(match []openflow.MatchField) bool {
	proto := false
	for _, m := range match {
		if p, ok := m.IPProtoValue(); ok && (p == openflow.ProtoTCP || p == openflow.ProtoUDP || p == openflow.ProtoICMP) {
			proto = true
		}
		if set, _, ok := m.CTStateValue(); ok && set&openflow.CTTrk != 0 {
			return true
		}
	}
	return proto && matchesIPv4(match)
}

func (c *checker) tunnel(t TunnelPort) {
	where := "tunnel port type=" + t.Type
	switch t.Type {
	case "vxlan":
		if strings.Contains(t.Options["exts"], "gbp") {
			c.add(RuleTunnelType, where, "VXLAN-GBP is not supported on Windows")
		}
		for _, k := range []string{"remote_ip", "local_ip"} {
			if a, err := netip.ParseAddr(t.Options[k]); err == nil && a.Is6() && !a.Is4In6() {
				c.add(RuleTunnelType, where, "VXLAN runs over IPv4 only on Windows ("+k+"="+t.Options[k]+")")
			}
		}
	case "geneve", "gre":
	default:
		c.add(RuleTunnelType, where, "Windows supports VXLAN, Geneve and GRE tunnels only (STT is gone since OVS 3.6)")
	}
}
