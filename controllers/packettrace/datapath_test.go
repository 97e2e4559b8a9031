package packettrace

import (
	"context"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/nodenetwork"
	"github.com/winnet-io/winnet/controllers/podendpoint"
	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/internal/pipeline"
)

// TestTracePath: the nodes of status.nodes but this one, each as its RemoteSubnetRoutes reach it;
// a node of the path without a route, and routes of nodes off the path, give nothing.
func TestTracePath(t *testing.T) {
	g := NewWithT(t)
	tr := &networkv1alpha1.PacketTrace{Status: networkv1alpha1.PacketTraceStatus{Nodes: []string{"node-a", "node-c", "node-x"}}}
	route := func(node, ip string, cidrs ...networkv1alpha1.CIDR) networkv1alpha1.RemoteSubnetRoute {
		return networkv1alpha1.RemoteSubnetRoute{Spec: networkv1alpha1.RemoteSubnetRouteSpec{NodeName: node, NodeIP: networkv1alpha1.IPAddress(ip), PodCIDRs: cidrs}}
	}
	routes := []networkv1alpha1.RemoteSubnetRoute{
		route("node-b", "192.168.77.12", "10.244.2.0/24"),
		route("node-c", "192.168.77.13", "10.244.3.0/24"),
		route("linux-a", "192.168.77.21", "10.244.9.0/24"),
	}
	g.Expect(tracePath(tr, "node-a", routes)).To(Equal([]pipeline.TracePeer{
		{NodeIP: netip.MustParseAddr("192.168.77.13"), CIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.3.0/24")}},
	}))
	g.Expect(tracePath(tr, "node-c", routes[2:])).To(BeEmpty(), "no route to a node of the path, none off it")
}

type fakeServices map[netip.AddrPort][]pipeline.Endpoint

func (f fakeServices) TraceEndpoints(proto uint8, dst netip.AddrPort) ([]pipeline.Endpoint, bool) {
	eps, ok := f[dst]
	return eps, ok && proto == openflow.ProtoTCP
}

// TestTraceService: a trace to a Service port the node balances is DNATed to one of its endpoints,
// the same one on every pass; to a port without endpoint, nowhere (consumed); to anything else,
// no Service flow.
func TestTraceService(t *testing.T) {
	g := NewWithT(t)
	vip := netip.MustParseAddr("10.96.0.10")
	eps := []pipeline.Endpoint{{Addr: netip.MustParseAddrPort("10.244.3.7:8080")}, {Addr: netip.MustParseAddrPort("10.244.2.5:8080")}}
	services := fakeServices{netip.AddrPortFrom(vip, 80): eps, netip.AddrPortFrom(vip, 81): nil}
	tcp := pipeline.Trace{Tag: 7, Protocol: openflow.ProtoTCP, Src: netip.MustParseAddr("10.244.1.5"), SrcPort: 40001}

	g.Expect(traceService(services, tcp, vip, 80)).To(Equal(&pipeline.TraceService{Dst: netip.AddrPortFrom(vip, 80), Endpoint: netip.MustParseAddrPort("10.244.3.7:8080")}),
		"sorted, source port 40001 modulo 2")
	reversed := fakeServices{netip.AddrPortFrom(vip, 80): []pipeline.Endpoint{eps[1], eps[0]}}
	g.Expect(traceService(reversed, tcp, vip, 80)).To(Equal(traceService(services, tcp, vip, 80)), "whatever order the endpoints come in")
	g.Expect(traceService(services, tcp, vip, 81)).To(Equal(&pipeline.TraceService{Dst: netip.AddrPortFrom(vip, 81)}), "no endpoint: consumed")
	g.Expect(traceService(services, tcp, vip, 82)).To(BeNil(), "no Service port")
	g.Expect(traceService(nil, tcp, vip, 80)).To(BeNil())
	icmp := tcp
	icmp.Protocol = openflow.ProtoICMP
	g.Expect(traceService(services, icmp, vip, 0)).To(BeNil())
}

// TestContainmentObservation: a packet consumed where it would have left winnet says where it
// would have gone and why it stops; ForwardedExternally ends the trace.
func TestContainmentObservation(t *testing.T) {
	g := NewWithT(t)
	frame := testFrame(t, netip.MustParseAddr("10.244.9.4"), 8080)
	o, ok, err := containmentObservation(pipeline.TraceTunnelLeaves, openflow.PacketIn{Frame: frame, TunDst: netip.MustParseAddr("192.168.77.21")})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ok).To(BeTrue())
	g.Expect(o).To(Equal(networkv1alpha1.PacketTraceObservation{Component: "Forwarding", Action: "ForwardedExternally",
		Detail: "tunnel to 192.168.77.21: not a node on the trace's path (no winnet agent there): consumed here"}))
	o, _, err = containmentObservation(pipeline.TraceUplinkLeaves, openflow.PacketIn{Frame: frame})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(o.Detail).To(Equal("routed out of the uplink towards 10.244.9.4: not a node on the trace's path (no winnet agent there): consumed here"))
	o, _, err = containmentObservation(pipeline.TraceServiceNoEndpoint, openflow.PacketIn{Frame: frame})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect([]string{o.Component, o.Action}).To(Equal([]string{"ServiceDNAT", "Dropped"}))
	g.Expect(o.Detail).To(HavePrefix("the Service port 10.244.9.4:8080 has no endpoint for this node"))
	_, ok, _ = containmentObservation(pipeline.TraceTunnel, openflow.PacketIn{Frame: frame})
	g.Expect(ok).To(BeFalse(), "observation's")

	hops := []networkv1alpha1.PacketTraceHop{{Node: "node-a", Observations: []networkv1alpha1.PacketTraceObservation{
		{Component: "Source", Action: "Injected"}, {Component: "Service", Action: "DNAT"}, o}}}
	o, _, _ = containmentObservation(pipeline.TraceTunnelLeaves, openflow.PacketIn{Frame: frame, TunDst: netip.MustParseAddr("192.168.77.21")})
	hops[0].Observations[2] = o
	v, _, done := Verdict(hops, "node-a")
	g.Expect([]any{v, done}).To(Equal([]any{networkv1alpha1.PacketTraceForwardedExternally, true}))
}

// countingReader counts the lookups a report makes (of the agent's cache: the endpoint's node).
type countingReader struct {
	client.Client
	lists atomic.Int32
}

func (c *countingReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	c.lists.Add(1)
	return nil
}

type noAttachments struct{}

func (noAttachments) List() []*podendpoint.Attachment { return nil }

// TestReportOncePerPoint: a packet-in for a point the trace already recorded on this node costs no
// lookup and adds no observation (a Pod replaying its trace's packet towards another node; a
// duplicate); another point of the same trace is recorded; an injection starts afresh.
func TestReportOncePerPoint(t *testing.T) {
	g := NewWithT(t)
	reader := &countingReader{}
	uid := types.UID("trace-1")
	toService := networkv1alpha1.PacketTrace{Spec: networkv1alpha1.PacketTraceSpec{
		Destination: networkv1alpha1.PacketTraceDestination{Service: &networkv1alpha1.ObjectReference{Name: "web"}}}}
	r := &AgentReconciler{Client: reader, State: nodenetwork.NewState(), Local: noAttachments{},
		byTag: map[uint8]traceRef{7: {uid: uid, tr: toService}}, observed: map[types.UID][]networkv1alpha1.PacketTraceObservation{}, reported: map[types.UID]map[uint32]bool{}}
	dnat := openflow.PacketIn{Cookie: pipeline.TraceCookieObject(7, pipeline.TraceServiceDNAT, 0), Frame: testFrame(t, netip.MustParseAddr("10.244.3.7"), 8080)}
	ctx := context.Background()
	r.report(ctx, dnat)
	g.Expect(reader.lists.Load()).To(Equal(int32(1)), "the DNAT report names the endpoint's node")
	for range 5 {
		r.report(ctx, dnat)
	}
	g.Expect(reader.lists.Load()).To(Equal(int32(1)), "no lookup for a point already recorded")
	g.Expect(r.observed[uid]).To(HaveLen(1))
	r.report(ctx, openflow.PacketIn{Cookie: pipeline.TraceCookieObject(7, pipeline.TraceTunnelLeaves, 0), Frame: dnat.Frame, TunDst: netip.MustParseAddr("192.168.77.21")})
	g.Expect(r.observed[uid]).To(HaveLen(2), "another point")
	r.report(ctx, openflow.PacketIn{Cookie: pipeline.TraceCookieObject(8, pipeline.TraceServiceDNAT, 0), Frame: dnat.Frame})
	g.Expect(reader.lists.Load()).To(Equal(int32(1)), "no trace of that tag: no lookup")

	// A reinjection (inject clears the trace's record) reports again.
	delete(r.reported, uid)
	r.report(ctx, dnat)
	g.Expect(r.observed[uid]).To(HaveLen(3))
}

func testFrame(t *testing.T, dst netip.Addr, port uint16) []byte {
	t.Helper()
	mac, _ := net.ParseMAC("02:00:00:00:00:01")
	frame, err := Packet{SrcMAC: mac, DstMAC: mac, Src: netip.MustParseAddr("10.244.1.5"), Dst: dst, Protocol: openflow.ProtoTCP, SrcPort: 40001, DstPort: port, Tag: 7}.Frame()
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return frame
}

// TestNeedsFlows: a running trace keeps its flows until its end is reported on its hops, then loses
// them while still Running (the controller has not written the verdict yet).
func TestNeedsFlows(t *testing.T) {
	g := NewWithT(t)
	tr := &networkv1alpha1.PacketTrace{Status: networkv1alpha1.PacketTraceStatus{Phase: networkv1alpha1.PacketTraceRunning, Tag: 3, SourceIP: "10.244.1.5",
		SourceNode: "node-a", Nodes: []string{"node-a", "node-b"}}}
	g.Expect(needsFlows(tr)).To(BeTrue(), "nothing reported")
	tr.Status.Hops = []networkv1alpha1.PacketTraceHop{{Node: "node-a", Observations: []networkv1alpha1.PacketTraceObservation{
		{Component: "Source", Action: "Injected"}, {Component: "Forwarding", Action: "Forwarded"}}}, {Node: "node-b"}}
	g.Expect(needsFlows(tr)).To(BeTrue(), "forwarded, not delivered yet")
	tr.Status.Hops[1].Observations = []networkv1alpha1.PacketTraceObservation{{Component: "Output", Action: "Delivered"}}
	g.Expect(needsFlows(tr)).To(BeFalse(), "delivered: the end is reported")
	g.Expect(tr.Status.Phase).To(Equal(networkv1alpha1.PacketTraceRunning))
}
