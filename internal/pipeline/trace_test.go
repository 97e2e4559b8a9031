package pipeline

import (
	"net/netip"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/internal/ovs/openflow"
)

// testTraces are traces from a Pod of testNode (the source's node) and, last, from a Pod of a
// routed peer; with nodes of their path and a Service port, with and without an endpoint, so that
// every trace flow is built (TestBuildersPassWindowsProfile holds them against the profile).
func testTraces() []Trace {
	src := netip.MustParseAddr("10.244.1.5")
	return []Trace{
		{Tag: 7, Protocol: openflow.ProtoTCP, Src: src, SrcPort: 40007},
		{Tag: 63, Protocol: openflow.ProtoUDP, Src: src, SrcPort: 40063, Path: testTracePath(),
			Service: &TraceService{Dst: netip.MustParseAddrPort("10.96.0.53:53")}},
		{Tag: 1, Protocol: openflow.ProtoICMP, Src: src, Path: testTracePath()},
		{Tag: 9, Protocol: openflow.ProtoTCP, Src: netip.MustParseAddr("10.244.4.9"), SrcPort: 40009, Path: testTracePath(),
			Service: &TraceService{Dst: netip.MustParseAddrPort("10.96.0.10:80"), Endpoint: netip.MustParseAddrPort("10.244.2.7:8080")}},
	}
}

// testTracePath: a tunnelled peer (routeVariants' first) and a routed one (its third).
func testTracePath() []TracePeer {
	return []TracePeer{
		{NodeIP: netip.MustParseAddr("192.168.10.12"), CIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.2.0/24")}},
		{NodeIP: netip.MustParseAddr("192.168.10.14"), CIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.4.0/24")}},
	}
}

func testTracePolicy() TracePolicy {
	return TracePolicy{EgressRules: []uint32{3}, IngressRules: []uint32{1, 2}, EgressIsolated: []uint32{10}, IngressIsolated: []uint32{11},
		ClusterRules: testClusterPolicy().TraceRules(), Egresses: []uint32{2}}
}

// TestTraceFlows: a trace's flows match its DSCP, protocol, source and source port everywhere, sit
// above the flows they report on, and carry their observation point in the cookie.
func TestTraceFlows(t *testing.T) {
	g := NewWithT(t)
	n := testNode()
	flows := n.TraceFlows(testTraces()[0], testTracePolicy())
	var got []string
	for _, f := range flows {
		tag, point, arg := ParseTraceCookieObject(f.Cookie)
		g.Expect(tag).To(Equal(uint8(7)))
		g.Expect(point).NotTo(BeZero())
		got = append(got, f.String())
		g.Expect(f.MatchString()).To(MatchRegexp(`tcp,.*nw_src=10\.244\.1\.5,nw_tos=28,tp_src=40007`), "every trace flow matches the tagged 5-tuple's source side")
		if point != TraceMark {
			g.Expect(f.MatchString()).To(MatchRegexp(`reg7=0x1c/0xf[cd]`), "%s matches only the packet that carries the tag in reg7", f.String())
		}
		switch point {
		case TraceEgressRule, TraceIngressRule:
			g.Expect(f.MatchString()).To(ContainSubstring("conj_id=%d", arg))
		case TraceEgressDrop, TraceIngressDrop, TraceExternal, TraceEgress, TraceHost, TraceDeliver, TraceTunnelLeaves, TraceUplinkLeaves:
			g.Expect(f.ActionsString()).To(Equal("CONTROLLER:65535"), "%s consumes the packet", f.String())
		case TraceMark:
			g.Expect(f.Table).To(Equal(ConntrackTable))
			g.Expect(f.MatchString()).To(ContainSubstring("reg7=0/0xfc"), "marks a packet once")
			g.Expect(f.MatchString()).To(ContainSubstring("in_port=1,"), "marks only what arrives from the tunnel")
			g.Expect(f.ActionsString()).To(Equal("set_field:0x1c/0xfc->reg7,resubmit(,30)"), "the tag into reg7[2..7], nothing reported")
		case TraceServiceDNAT:
			g.Expect(f.ActionsString()).To(MatchRegexp(`CONTROLLER:65535,resubmit\(,%d\)$`, f.Table), "%s reports and goes on", f.String())
		case TraceClusterAccept, TraceClusterDeny, TraceClusterPass:
			tier, dir, ok := ClusterRuleAt(f.Table)
			g.Expect(ok).To(BeTrue(), "%s is in a tier's table", f.String())
			g.Expect(ParseTraceClusterArg(arg)).To(Equal(ClusterRuleObject(tier, dir, uint16(arg))), "the argument names the rule")
			g.Expect(f.Priority).To(Equal(ClusterPriorityHighest+1), "above every rule, below the exemptions")
		}
	}
	g.Expect(strings.Join(got, "\n")).To(ContainSubstring("table=60, priority=201,tcp,reg7=0x1c/0xfc,in_port=10,nw_src=10.244.1.5,nw_tos=28,tp_src=40007 actions=CONTROLLER:65535"))
	g.Expect(strings.Join(got, "\n")).To(ContainSubstring("table=50, priority=192,conj_id=3,tcp,reg7=0x1c/0xfc,nw_src=10.244.1.5,nw_tos=28,tp_src=40007 actions=CONTROLLER:65535,goto_table:62"))
	// The ClusterNetworkPolicy rules: after the conjunction that decided (conj_id), or the first
	// rule of a subject without a conjunction; each reports and does what the rule does, neither
	// audited nor counted.
	g.Expect(strings.Join(got, "\n")).To(ContainSubstring(
		"cookie=0x70d01ea60, table=46, priority=60001,conj_id=2147609184,tcp,reg7=0x1c/0xfc,nw_src=10.244.1.5,nw_tos=28,tp_src=40007 actions=CONTROLLER:65535\n"))
	g.Expect(strings.Join(got, "\n")).To(ContainSubstring(
		"cookie=0x70e01ea5f, table=46, priority=60001,conj_id=2147609183,tcp,reg7=0x1c/0xfc,nw_src=10.244.1.5,nw_tos=28,tp_src=40007 actions=CONTROLLER:65535,goto_table:48"))
	g.Expect(strings.Join(got, "\n")).To(ContainSubstring(
		"cookie=0x70c00ea60, table=82, priority=60001,conj_id=2147543648,tcp,reg7=0x1c/0xfc,nw_src=10.244.1.5,nw_tos=28,tp_src=40007 actions=CONTROLLER:65535,goto_table:102"))
	g.Expect(strings.Join(got, "\n")).To(ContainSubstring(
		"cookie=0x70d02ea60, table=101, priority=60001,tcp,reg1=0xb,reg7=0x1c/0xfc,nw_src=10.244.1.5,nw_tos=28,tp_src=40007 actions=CONTROLLER:65535"))
	g.Expect(flows).To(HaveLen(1 + 1 + 3 + 2 + 5 + 4 + 1))

	g.Expect(n.TraceFlows(Trace{Protocol: openflow.ProtoTCP, Src: netip.MustParseAddr("10.244.1.5")}, TracePolicy{})).To(BeEmpty(), "no tag, no flows")
	tag, point, arg := ParseTraceCookieObject(TraceCookieObject(63, TraceIngressDrop, 0x123456))
	g.Expect([]any{tag, point, arg}).To(Equal([]any{uint8(63), TraceIngressDrop, uint32(0x123456)}))
	out := TracePacketOut(12, 7)
	g.Expect(out.InPort).To(Equal(uint32(12)), "injected from the Pod's port, never CONTROLLER")
	var actions []string
	for _, a := range out.Actions {
		actions = append(actions, openflow.Text(a))
	}
	g.Expect(actions).To(Equal([]string{"set_field:0x1c/0xfc->reg7", "resubmit(,0)"}), "the tag in reg7[2..7], then the whole pipeline")
}

// TestClusterTraceRules: every rule with flows is named once with the conjunction ids of its parts;
// a rule without a conjunction names the subjects it is the first rule of in its table, and no
// subject for which a rule above it might decide first.
func TestClusterTraceRules(t *testing.T) {
	g := NewWithT(t)
	g.Expect(testClusterPolicy().TraceRules()).To(Equal([]TraceClusterRule{
		{Tier: AdminTier, Direction: PolicyEgress, Action: ClusterDeny, Priority: 60000, ConjIDs: []uint32{ClusterConjID(AdminTier, PolicyEgress, 60000, 0)}},
		{Tier: AdminTier, Direction: PolicyEgress, Action: ClusterPass, Priority: 59999, ConjIDs: []uint32{ClusterConjID(AdminTier, PolicyEgress, 59999, 0)}},
		{Tier: AdminTier, Direction: PolicyIngress, Action: ClusterAccept, Priority: 60000, ConjIDs: []uint32{ClusterConjID(AdminTier, PolicyIngress, 60000, 0)}},
		{Tier: BaselineTier, Direction: PolicyIngress, Action: ClusterDeny, Priority: 60000, FirstPods: []uint32{npPod2.OFPort}},
	}), "the IPv6-only rule has no flows, hence no trace flows")

	peer := []netip.Prefix{netip.MustParsePrefix("10.244.2.7/32")}
	p := ClusterPolicy{Rules: []ClusterRule{
		{Tier: AdminTier, Direction: PolicyEgress, Action: ClusterAccept, Priority: 60000, Pods: []Pod{npPod1}, Peers: peer},
		{Tier: AdminTier, Direction: PolicyEgress, Action: ClusterDeny, Priority: 59999, Sub: 0, Pods: []Pod{npPod1}, AnyPeer: true,
			Ports: []PolicyPort{{Protocol: openflow.ProtoTCP, Port: 80}}},
		{Tier: AdminTier, Direction: PolicyEgress, Action: ClusterDeny, Priority: 59999, Sub: 1, Pods: []Pod{npPod2}, AnyPeer: true,
			Ports: []PolicyPort{{Protocol: openflow.ProtoTCP, Port: 8080}}},
		{Tier: AdminTier, Direction: PolicyEgress, Action: ClusterDeny, Priority: 59998, Pods: []Pod{npPod1, npPod2}, AnyPeer: true},
		{Tier: BaselineTier, Direction: PolicyEgress, Action: ClusterDeny, Priority: 60000, Pods: []Pod{npPod1}, AnyPeer: true},
	}}
	g.Expect(p.TraceRules()).To(Equal([]TraceClusterRule{
		{Tier: AdminTier, Direction: PolicyEgress, Action: ClusterAccept, Priority: 60000, ConjIDs: []uint32{ClusterConjID(AdminTier, PolicyEgress, 60000, 0)}},
		{Tier: AdminTier, Direction: PolicyEgress, Action: ClusterDeny, Priority: 59999,
			ConjIDs: []uint32{ClusterConjID(AdminTier, PolicyEgress, 59999, 0), ClusterConjID(AdminTier, PolicyEgress, 59999, 1)}},
		// Both Pods have rules above in the Admin table: no trace flow can sit between.
		{Tier: AdminTier, Direction: PolicyEgress, Action: ClusterDeny, Priority: 59998},
		// The Baseline table is another table: the rule is npPod1's first there.
		{Tier: BaselineTier, Direction: PolicyEgress, Action: ClusterDeny, Priority: 60000, FirstPods: []uint32{npPod1.OFPort}},
	}))
}

// TestTraceFlowsLeaveNoStateAndNoReplay: the flows that make a trace stateless, unreplayable and
// contained. Only the mark flows match a packet without the tag in reg7, and they mark only what
// arrives from another node (the tunnel; routed, the host with a peer's source); the traced
// packet goes on through the tunnel or the uplink only towards a node of the trace's path, past
// the commit; anywhere else it is consumed; a Service DNATs it with set_field, never through the
// port's group (which commits and learns affinity).
func TestTraceFlowsLeaveNoStateAndNoReplay(t *testing.T) {
	n := testNode()
	local, peer := testTraces()[0], testTraces()[3]
	local.Path = testTracePath()
	local.Service = &TraceService{Dst: netip.MustParseAddrPort("10.96.0.10:80"), Endpoint: netip.MustParseAddrPort("10.244.2.7:8080")}
	const src = "nw_src=10.244.1.5,nw_tos=28,tp_src=40007"
	tests := []struct {
		name string
		tr   Trace
		// want are flows the trace must have; absent are fragments no flow may have.
		want, absent []string
	}{{
		name: "source's node: marks only arrivals from the tunnel",
		tr:   local,
		want: []string{"cookie=0x70b000000, table=30, priority=250,tcp,reg7=0/0xfc,in_port=1," + src + " actions=set_field:0x1c/0xfc->reg7,resubmit(,30)"},
		// The source's own Pod is no peer: nothing from the gateway with its address is marked.
		absent: []string{"in_port=2,"},
	}, {
		name: "routed peer's trace: arrivals through the host are marked too",
		tr:   peer,
		want: []string{
			"cookie=0x90b000000, table=30, priority=250,tcp,reg7=0/0xfc,in_port=1,nw_src=10.244.4.9,nw_tos=36,tp_src=40009 actions=set_field:0x24/0xfc->reg7,resubmit(,30)",
			"cookie=0x90b000001, table=30, priority=250,tcp,reg7=0/0xfc,in_port=2,nw_src=10.244.4.9,nw_tos=36,tp_src=40009 actions=set_field:0x24/0xfc->reg7,resubmit(,30)",
		},
	}, {
		name: "Service: DNAT to the picked endpoint by set_field, without commit or learn",
		tr:   local,
		want: []string{
			"cookie=0x711000000, table=40, priority=250,tcp,reg7=0x1c/0xfc,nw_src=10.244.1.5,nw_dst=10.96.0.10,nw_tos=28,tp_src=40007,tp_dst=80 " +
				"actions=set_field:10.244.2.7->ip_dst,set_field:8080->tcp_dst,goto_table:45",
			"cookie=0x701000000, table=45, priority=250,tcp,reg7=0x1c/0xfd," + src + " actions=set_field:0x1/0x1->reg7,CONTROLLER:65535,resubmit(,45)",
		},
		absent: []string{"group:", "ct(", "learn(", "resubmit(,42)", "goto_table:43"},
	}, {
		name: "Service port without endpoint: consumed",
		tr:   testTraces()[1],
		want: []string{"cookie=0x3f12000000, table=40, priority=250,udp,reg7=0xfc/0xfc,nw_src=10.244.1.5,nw_dst=10.96.0.53,nw_tos=252,tp_src=40063,tp_dst=53 actions=CONTROLLER:65535"},
	}, {
		name: "forwarding: on past the commit only towards the path, consumed elsewhere",
		tr:   local,
		want: []string{
			"cookie=0x707000000, table=105, priority=252,tcp,reg1=0x1,reg7=0x1c/0xfc,tun_dst=192.168.10.12," + src + " actions=CONTROLLER:65535,goto_table:110",
			"cookie=0x707000000, table=105, priority=252,tcp,reg1=0x1,reg7=0x1c/0xfc,tun_dst=192.168.10.14," + src + " actions=CONTROLLER:65535,goto_table:110",
			"cookie=0x70f000000, table=105, priority=250,tcp,reg1=0x1,reg7=0x1c/0xfc," + src + " actions=CONTROLLER:65535",
			"cookie=0x708000000, table=105, priority=252,tcp,reg1=0x3,reg7=0x1c/0xfc,nw_src=10.244.1.5,nw_dst=10.244.2.0/24,nw_tos=28,tp_src=40007 actions=CONTROLLER:65535,goto_table:110",
			"cookie=0x708000000, table=105, priority=252,tcp,reg1=0x3,reg7=0x1c/0xfc,nw_src=10.244.1.5,nw_dst=10.244.4.0/24,nw_tos=28,tp_src=40007 actions=CONTROLLER:65535,goto_table:110",
			"cookie=0x710000000, table=105, priority=250,tcp,reg1=0x3,reg7=0x1c/0xfc," + src + " actions=CONTROLLER:65535",
			"cookie=0x706000000, table=105, priority=251,tcp,reg0=0x20000/0x20000,reg7=0x1c/0xfc," + src + " actions=CONTROLLER:65535",
			"cookie=0x709000000, table=105, priority=250,tcp,reg1=0x2,reg7=0x1c/0xfc," + src + " actions=CONTROLLER:65535",
			"cookie=0x70a000000, table=105, priority=249,tcp,reg7=0x1c/0xfc," + src + " actions=CONTROLLER:65535",
		},
		absent: []string{"resubmit(,105)"},
	}, {
		name: "no path: nothing goes on through the tunnel or the uplink",
		tr:   testTraces()[0],
		want: []string{
			"cookie=0x70f000000, table=105, priority=250,tcp,reg1=0x1,reg7=0x1c/0xfc," + src + " actions=CONTROLLER:65535",
			"cookie=0x710000000, table=105, priority=250,tcp,reg1=0x3,reg7=0x1c/0xfc," + src + " actions=CONTROLLER:65535",
		},
		absent: []string{"goto_table:110", "priority=252"},
	}, {
		// The holder of Egress 2: the packet of a Pod it selects, local or relayed to it, is
		// reported with the Egress's id before the SNAT and consumed, above the node's SNAT.
		name: "Egress held here: consumed before its SNAT",
		tr:   local,
		want: []string{"cookie=0x713000002, table=105, priority=253,tcp,reg7=0x1c/0xfc,reg12=0x2," + src + " actions=CONTROLLER:65535"},
	}, {
		// A selected Pod's packet relayed to its Egress's holder: reported and on, only towards a
		// node of the path (anywhere else it leaves, TraceTunnelLeaves, and is consumed).
		name: "relayed to the Egress's holder: on only towards the path",
		tr:   local,
		want: []string{
			"cookie=0x714000000, table=105, priority=253,tcp,reg0=0x100000/0x100000,reg1=0x1,reg7=0x1c/0xfc,tun_dst=192.168.10.12," + src + " actions=CONTROLLER:65535,goto_table:110",
			"cookie=0x714000000, table=105, priority=253,tcp,reg0=0x100000/0x100000,reg1=0x1,reg7=0x1c/0xfc,tun_dst=192.168.10.14," + src + " actions=CONTROLLER:65535,goto_table:110",
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			var got []string
			for _, f := range n.TraceFlows(tc.tr, TracePolicy{Egresses: []uint32{2}}) {
				got = append(got, f.String())
				_, point, _ := ParseTraceCookieObject(f.Cookie)
				if point != TraceMark {
					g.Expect(f.MatchString()).To(MatchRegexp(`reg7=0x[0-9a-f]+/0xf[cd]`), "%s matches the tag in reg7", f.String())
					g.Expect(f.MatchString()).NotTo(ContainSubstring("reg7=0/"), "%s", f.String())
				}
			}
			g.Expect(got).To(ContainElements(tc.want))
			for _, a := range tc.absent {
				g.Expect(strings.Join(got, "\n")).NotTo(ContainSubstring(a))
			}
		})
	}
}
