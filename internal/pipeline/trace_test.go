package pipeline

import (
	"net/netip"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet/internal/ovs/openflow"
)

func testTraces() []Trace {
	src := netip.MustParseAddr("10.244.1.5")
	return []Trace{
		{Tag: 7, Protocol: openflow.ProtoTCP, Src: src, SrcPort: 40007},
		{Tag: 63, Protocol: openflow.ProtoUDP, Src: src, SrcPort: 40063},
		{Tag: 1, Protocol: openflow.ProtoICMP, Src: src},
	}
}

func testTracePolicy() TracePolicy {
	return TracePolicy{EgressRules: []uint32{3}, IngressRules: []uint32{1, 2}, EgressIsolated: []uint32{10}, IngressIsolated: []uint32{11}}
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
		switch point {
		case TraceEgressRule, TraceIngressRule:
			g.Expect(f.MatchString()).To(ContainSubstring("conj_id=%d", arg))
		case TraceEgressDrop, TraceIngressDrop, TraceExternal, TraceHost, TraceDeliver:
			g.Expect(f.ActionsString()).To(Equal("CONTROLLER:65535"), "%s consumes the packet", f.String())
		case TraceMark:
			g.Expect(f.Table).To(Equal(ConntrackTable))
			g.Expect(f.MatchString()).To(ContainSubstring("reg7=0/0xfc"), "marks a packet once")
			g.Expect(f.ActionsString()).To(Equal("set_field:0x1c/0xfc->reg7,resubmit(,30)"), "the tag into reg7[2..7], nothing reported")
		case TraceServiceDNAT, TraceTunnel, TraceUplink:
			g.Expect(f.ActionsString()).To(MatchRegexp(`CONTROLLER:65535,resubmit\(,%d\)$`, f.Table), "%s reports and goes on", f.String())
		}
	}
	g.Expect(strings.Join(got, "\n")).To(ContainSubstring("table=60, priority=201,tcp,in_port=10,nw_src=10.244.1.5,nw_tos=28,tp_src=40007 actions=CONTROLLER:65535"))
	g.Expect(strings.Join(got, "\n")).To(ContainSubstring("table=50, priority=192,conj_id=3,tcp,nw_src=10.244.1.5,nw_tos=28,tp_src=40007 actions=CONTROLLER:65535,goto_table:62"))
	g.Expect(flows).To(HaveLen(1 + 1 + 3 + 2 + 5))

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
