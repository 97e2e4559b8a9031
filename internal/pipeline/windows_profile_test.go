package pipeline

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/internal/ovs/openflow"
)

func rules(vs []Violation) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Rule)
	}
	return out
}

func onlyFlow(match []openflow.MatchField, actions ...openflow.Action) Datapath {
	return Datapath{Flows: []openflow.Flow{{Table: 30, Priority: 200, Match: match, Actions: actions}}}
}

type profileCase struct {
	rule     string
	bad, fix Datapath
}

// allRules are the rules the profile declares.
var allRules = []string{RuleCTClear, RuleCheckPktLen, RuleIPv6Set, RuleDecTTLIPv6, RulePktMark, RuleMeter, RuleCTProtocol,
	RulePacketOutCtrl, RuleFlushZone0, RuleFlushPartial, RuleFlushNATZone, RuleTunnelType}

// profileCases are offending examples, each with a fixed variant.
func profileCases() []profileCase {
	ip, tcp := openflow.IPv4(), openflow.IPProto(openflow.ProtoTCP)
	trk := openflow.CTState(openflow.CTTrk, 0)
	zone := ConntrackZone
	table := ConntrackStateTable
	ct := openflow.CT(openflow.CTAction{Table: &table, Zone: zone, NAT: true})
	v6 := netip.MustParseAddr("fd00::1")
	return []profileCase{
		{RuleCTClear, onlyFlow(match(ip, trk), openflow.CTClear(), openflow.GotoTable(31)), onlyFlow(match(ip, trk), openflow.GotoTable(31))},
		{RuleCheckPktLen, onlyFlow(match(ip), openflow.CheckPktLarger(1400, 0, 18), openflow.GotoTable(31)), onlyFlow(match(ip), openflow.GotoTable(31))},
		{RuleIPv6Set, onlyFlow(match(openflow.IPv6()), openflow.SetIPv6Dst(v6), openflow.Output(1)), onlyFlow(match(openflow.IPv6()), openflow.Output(1))},
		{RuleIPv6Set, onlyFlow(match(openflow.IPv6()), openflow.Move(openflow.FieldIPv6Src, openflow.FieldIPv6Dst), openflow.Output(1)),
			onlyFlow(match(ip), openflow.Move(openflow.FieldIPSrc, openflow.FieldIPDst), openflow.Output(1))},
		{RuleIPv6Set, onlyFlow(match(openflow.IPv6()), openflow.Learn(openflow.LearnSpec{Table: 40, Loads: []openflow.LearnLoad{{Src: openflow.FieldIPv6Src, Dst: openflow.FieldIPv6Dst}}})),
			onlyFlow(match(openflow.IPv6()), openflow.Learn(openflow.LearnSpec{Table: 40, Match: []openflow.Field{openflow.FieldIPv6Src}}))},
		{RuleDecTTLIPv6, onlyFlow(nil, openflow.DecTTL(), openflow.Output(1)), onlyFlow(match(ip), openflow.DecTTL(), openflow.Output(1))},
		{RuleDecTTLIPv6, onlyFlow(match(openflow.IPv6()), openflow.DecTTL(), openflow.Output(1)), onlyFlow(match(openflow.IPv6()), openflow.Output(1))},
		{RulePktMark, onlyFlow(match(ip), openflow.SetPktMark(1), openflow.Output(1)), onlyFlow(match(ip), openflow.SetReg(2, 0, 31, 1), openflow.Output(1))},
		{RulePktMark, onlyFlow(match(ip, tcp), openflow.CT(openflow.CTAction{Commit: true, Zone: zone, Exec: []openflow.Action{openflow.SetPktMark(1)}})),
			onlyFlow(match(ip, tcp), openflow.CT(openflow.CTAction{Commit: true, Zone: zone, Exec: []openflow.Action{openflow.SetCTMark(1, 0)}}))},
		{RuleMeter, onlyFlow(match(ip), openflow.Meter(1), openflow.Output(1)), onlyFlow(match(ip), openflow.Output(1))},
		{RuleCTProtocol, onlyFlow(match(ip), ct), onlyFlow(match(ip, tcp), ct)},
		{RuleCTProtocol, onlyFlow(match(ip, openflow.IPProto(132)), ct), onlyFlow(match(ip, openflow.IPProto(openflow.ProtoUDP)), ct)},
		{RuleCTProtocol, onlyFlow(match(openflow.IPProto(openflow.ProtoTCP)), ct), onlyFlow(match(ip, trk), openflow.CT(openflow.CTAction{Commit: true, Zone: zone}))},
		// A group's ct() runs with the match of the flow that sends to the group.
		{RuleCTProtocol,
			Datapath{Flows: []openflow.Flow{{Table: 40, Match: match(ip), Actions: []openflow.Action{openflow.ToGroup(1)}}},
				Groups: []openflow.Group{{ID: 1, Buckets: []openflow.Bucket{{Weight: 1, Actions: []openflow.Action{ct}}}}}},
			Datapath{Flows: []openflow.Flow{{Table: 40, Match: match(ip, tcp), Actions: []openflow.Action{openflow.ToGroup(1)}}},
				Groups: []openflow.Group{{ID: 1, Buckets: []openflow.Bucket{{Weight: 1, Actions: []openflow.Action{ct}}}}}}},
		{RuleMeter, Datapath{Groups: []openflow.Group{{ID: 2, Buckets: []openflow.Bucket{{Weight: 1, Actions: []openflow.Action{openflow.Meter(1), openflow.Output(1)}}}}}},
			Datapath{Groups: []openflow.Group{{ID: 2, Buckets: []openflow.Bucket{{Weight: 1, Actions: []openflow.Action{openflow.Output(1)}}}}}}},
		{RulePacketOutCtrl, Datapath{PacketOuts: []PacketOut{{InPort: openflow.PortController, Actions: []openflow.Action{openflow.Output(1)}}}},
			Datapath{PacketOuts: []PacketOut{{InPort: openflow.PortLocal, Actions: []openflow.Action{openflow.Output(1)}}}}},
		{RuleCTClear, Datapath{PacketOuts: []PacketOut{{InPort: openflow.PortLocal, Actions: []openflow.Action{openflow.CTClear(), openflow.Output(1)}}}},
			Datapath{PacketOuts: []PacketOut{{InPort: openflow.PortLocal, Actions: []openflow.Action{openflow.Output(1)}}}}},
		{RuleFlushZone0, Datapath{Flushes: []ConntrackFlush{{Owner: "services", Zone: 0}}}, Datapath{Flushes: []ConntrackFlush{{Owner: "services", Zone: 65521}}}},
		{RuleFlushPartial, Datapath{Flushes: []ConntrackFlush{{Owner: "services", Zone: 65521, Tuple: &ConntrackTuple{Proto: 6,
			Src: netip.MustParseAddr("10.244.1.5"), Dst: netip.MustParseAddr("10.96.0.10"), SrcPort: 40000, DstPort: 80}}}},
			Datapath{Flushes: []ConntrackFlush{{Owner: "services", Zone: 65521}}}},
		{RuleFlushNATZone, Datapath{Flushes: []ConntrackFlush{{Owner: "services", Zone: ConntrackZone}}, NATZones: testNode().NATZones()},
			Datapath{Flushes: []ConntrackFlush{{Owner: "node", Zone: ConntrackZone}}, NATZones: testNode().NATZones()}},
		{RuleTunnelType, Datapath{Tunnels: []TunnelPort{{Type: "stt", Options: map[string]string{"remote_ip": "flow"}}}},
			Datapath{Tunnels: []TunnelPort{{Type: "geneve", Options: map[string]string{"remote_ip": "flow"}}}}},
		{RuleTunnelType, Datapath{Tunnels: []TunnelPort{{Type: "vxlan", Options: map[string]string{"remote_ip": "flow", "exts": "gbp"}}}},
			Datapath{Tunnels: []TunnelPort{{Type: "vxlan", Options: map[string]string{"remote_ip": "flow", "dst_port": "4789"}}}}},
		{RuleTunnelType, Datapath{Tunnels: []TunnelPort{{Type: "vxlan", Options: map[string]string{"remote_ip": "flow", "local_ip": "fd00::1"}}}},
			Datapath{Tunnels: []TunnelPort{{Type: "vxlan", Options: map[string]string{"remote_ip": "flow", "local_ip": "192.168.10.11"}}}}},
	}
}

// TestWindowsProfileRejects shows each rule of the profile rejecting one offending example, and
// only with that rule; the fixed variant of each example passes.
func TestWindowsProfileRejects(t *testing.T) {
	for i, tc := range profileCases() {
		t.Run(fmt.Sprintf("%s/%d", tc.rule, i), func(t *testing.T) {
			g := NewWithT(t)
			got := CheckWindows(tc.bad)
			g.Expect(rules(got)).To(Equal([]string{tc.rule}), "%v", got)
			g.Expect(got[0].Error()).To(ContainSubstring(tc.rule))
			g.Expect(CheckWindows(tc.fix)).To(BeEmpty())
		})
	}
}

// TestWindowsProfileCoversEveryRule keeps TestWindowsProfileRejects complete: every rule the
// profile declares has an offending example there.
func TestWindowsProfileCoversEveryRule(t *testing.T) {
	g := NewWithT(t)
	var covered []string
	for _, tc := range profileCases() {
		covered = append(covered, tc.rule)
	}
	g.Expect(slices.Compact(slices.Sorted(slices.Values(covered)))).To(ConsistOf(allRules))
}

// nodeVariants are the base pipeline's feature combinations: encapsulation (VXLAN and Geneve
// differ only in the tunnel port, which TunnelPorts checks; flannel uses VNI 4096 and a peer's
// VTEP MAC), NoEncap, SNAT on and off, with and without exclusions.
func nodeVariants() map[string]Node {
	out := map[string]Node{}
	for _, encap := range []bool{true, false} {
		for _, snat := range []bool{true, false} {
			for _, excl := range []bool{true, false} {
				n := testNode()
				if !encap {
					n.TunnelOFPort = 0
				}
				n.SNAT = snat
				if !excl {
					n.NoSNAT = nil
				}
				out[fmt.Sprintf("encap=%v,snat=%v,exclusions=%v", encap, snat, excl)] = n
			}
		}
	}
	n := testNode()
	n.AdmitAnyTunnelSource = true
	out["encap,tunnel admission off"] = n
	return out
}

// hostPortVariants are the Service ports a hostPort becomes (controllers/service hostports.go):
// TCP on every node address with the host's own connections (HostGroup), and UDP on one hostIP in
// a zone of its own without them; one local endpoint, externalTrafficPolicy Local.
func hostPortVariants(n Node) []ServicePort {
	ep := []Endpoint{{Addr: netip.MustParseAddrPort("10.244.1.5:8080"), Local: true}}
	return []ServicePort{
		{Protocol: openflow.ProtoTCP, Port: 8080, NodePort: 8080, NodeIPs: []netip.Addr{n.NodeIP}, ClusterGroup: 101, ExternalGroup: 102, HostGroup: 103,
			Endpoints: ep, ExternalLocal: true},
		{Protocol: openflow.ProtoUDP, Port: 8080, NodePort: 8080, NodeIPs: []netip.Addr{n.NodeIP}, ClusterGroup: 104, ExternalGroup: 105,
			Endpoints: ep, ExternalLocal: true, UDPZone: ServiceUDPZoneFirst + 1},
	}
}

// routeVariants are the remote routes the builders handle: tunnelled with the global virtual MAC
// and an ARP answer for the remote gateway (VXLAN, Geneve), tunnelled to a flannel peer's VTEP
// (VNI 4096, its VTEP MAC, no gateway), and routed without encapsulation.
func routeVariants() []RemoteRoute {
	vtep, _ := net.ParseMAC("5a:1b:2c:3d:4e:5f")
	next, _ := net.ParseMAC("52:54:00:00:00:12")
	up, _ := net.ParseMAC("52:54:00:00:00:11")
	return []RemoteRoute{
		{CIDR: netip.MustParsePrefix("10.244.2.0/24"), Tunnel: true, NodeIP: netip.MustParseAddr("192.168.10.12"), VNI: 1,
			DstMAC: GlobalVirtualMAC, GatewayIP: netip.MustParseAddr("10.244.2.1")},
		{CIDR: netip.MustParsePrefix("10.244.3.0/24"), Tunnel: true, NodeIP: netip.MustParseAddr("192.168.10.13"), VNI: 4096, DstMAC: vtep},
		{CIDR: netip.MustParsePrefix("10.244.4.0/24"), NodeIP: netip.MustParseAddr("192.168.10.14"), NextHopMAC: next, UplinkMAC: up},
	}
}

// TestBuildersPassWindowsProfile holds every flow the builders produce, for every feature
// combination, against the Windows profile.
func TestBuildersPassWindowsProfile(t *testing.T) {
	for name, n := range nodeVariants() {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			d := Datapath{Flows: n.BaseFlows(), NATZones: n.NATZones()}
			for _, p := range []Pod{
				{OFPort: 10, MAC: mustMAC("02:42:0a:f4:01:05"), IP: netip.MustParseAddr("10.244.1.5")},
				{OFPort: 11, MAC: mustMAC("02:42:0a:f4:01:06"), IP: netip.MustParseAddr("10.244.1.6"), Incarnation: 7},
				{OFPort: 12, MAC: mustMAC("02:42:0a:f4:01:07"), IP: netip.MustParseAddr("10.244.1.7"), Incarnation: MaxIncarnation},
			} {
				d.Flows = append(d.Flows, n.PodFlows(p)...)
			}
			for _, r := range routeVariants() {
				if r.Tunnel && n.TunnelOFPort == 0 {
					continue
				}
				d.Flows = append(d.Flows, n.RouteFlows(r)...)
			}
			d.Flows = append(d.Flows, n.EgressFlows(append(testEgresses(), testRemoteEgress()), testRelays())...)
			d.Flows = append(d.Flows, n.PolicyFlows(testPolicy())...)
			d.Flows = append(d.Flows, n.PolicyFlows(auditedPolicy())...)
			d.Flows = append(d.Flows, n.PodPolicyPendingFlows(npPod1)...)
			d.Flows = append(d.Flows, n.ClusterPolicyFlows(testClusterPolicy())...)
			audited := testClusterPolicy()
			for i := range audited.Rules {
				audited.Rules[i].Audit = true
			}
			d.Flows = append(d.Flows, n.ClusterPolicyFlows(audited)...)
			d.Flows = append(d.Flows, n.ClusterPolicyFlows(failClosedClusterPolicy())...)
			for _, tr := range testTraces() {
				d.Flows = append(d.Flows, n.TraceFlows(tr, testTracePolicy())...)
			}
			d.PacketOuts = append(d.PacketOuts, TracePacketOut(10, 7))
			// hostPorts (controllers/service hostports.go): NodePorts of one local endpoint, on every
			// node address with the host's own connections, or on one hostIP without them, in a UDP
			// zone of its own; with the Services' base and hairpin flows they rely on.
			d.Flows = append(d.Flows, n.ServiceBaseFlows()...)
			d.Flows = append(d.Flows, n.HairpinFlows(netip.MustParseAddr("10.244.1.5"))...)
			for _, hp := range hostPortVariants(n) {
				groups, flows := n.ServiceFlows(hp)
				d.Groups = append(d.Groups, groups...)
				d.Flows = append(d.Flows, flows...)
				d.NATZones = mergeNATZones(d.NATZones, hp.NATZones())
			}
			g.Expect(CheckWindows(d)).To(BeEmpty())
		})
	}
}
