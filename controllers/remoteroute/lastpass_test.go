package remoteroute

import (
	"net"
	"net/netip"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/nodenetwork"
	"github.com/winnet-io/winnet/internal/hostnet"
	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/internal/pipeline"
)

// TestLastPassUnchanged: a full pass is taken as unchanged (its flows not computed again) only when
// the routes, the skipped routes (in any order), the realised node network, the bridge and its
// invalidations are all the same; never after a failure or with a route through a next hop.
func TestLastPassUnchanged(t *testing.T) {
	g := NewWithT(t)
	bridge := &openflow.Bridge{}
	rz := nodenetwork.Realized{Flows: bridge, Mode: networkv1alpha1.EncapsulationModeEncap, VNI: 1,
		NodeSubnet: netip.MustParsePrefix("192.168.10.11/24"), GatewayLinkIndex: 7,
		Node: pipeline.Node{TunnelOFPort: 2, GatewayMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}}}
	rt := func(name, cidr string, vni uint32) route {
		p := netip.MustParsePrefix(cidr)
		return route{name: name, nodeName: name, cidr: p, tunnel: true, nodeIP: netip.MustParseAddr("192.168.10.12"),
			gatewayIP: p.Addr().Next(), vni: vni, dstMAC: net.HardwareAddr{0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff},
			created: time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC)}
	}
	routes := []route{rt("b", "10.244.2.0/24", 1), rt("c", "10.244.3.0/24", 1)}
	skips := []skipped{{name: "x", reason: notAccepted}, {name: "y", reason: notAccepted}}
	hosts := []hostnet.Route{{Dst: routes[0].cidr, Gateway: routes[0].gatewayIP, LinkIndex: 7, OnLink: true, Owned: true}}

	var none *lastPass
	g.Expect(none.unchanged(rz, routes, skips)).To(BeFalse(), "no pass yet")
	last := newLastPass(rz, routes, skips, hosts, map[string]string{})
	g.Expect(last).NotTo(BeNil())
	g.Expect(last.unchanged(rz, []route{rt("b", "10.244.2.0/24", 1), rt("c", "10.244.3.0/24", 1)}, []skipped{skips[1], skips[0]})).To(BeTrue(),
		"the same routes computed again, the skips listed in another order")

	changedRoute := []route{rt("b", "10.244.2.0/24", 1), rt("c", "10.244.3.0/24", 2)}
	g.Expect(last.unchanged(rz, changedRoute, skips)).To(BeFalse(), "a route's VNI")
	otherMAC := []route{routes[0], rt("c", "10.244.3.0/24", 1)}
	otherMAC[1].dstMAC = net.HardwareAddr{0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0x00}
	g.Expect(last.unchanged(rz, otherMAC, skips)).To(BeFalse(), "a route's VTEP MAC")
	g.Expect(last.unchanged(rz, routes[:1], skips)).To(BeFalse(), "a route gone")
	g.Expect(last.unchanged(rz, routes, skips[:1])).To(BeFalse(), "a skipped route gone")

	moved := rz
	moved.Node.GatewayMAC = net.HardwareAddr{2, 0, 0, 0, 0, 2}
	g.Expect(last.unchanged(moved, routes, skips)).To(BeFalse(), "the node network realised otherwise")
	reconnected := rz
	reconnected.Flows = &openflow.Bridge{}
	g.Expect(last.unchanged(reconnected, routes, skips)).To(BeFalse(), "another bridge connection")
	bridge.Invalidate()
	g.Expect(last.unchanged(rz, routes, skips)).To(BeFalse(), "the bridge's flows invalidated")

	g.Expect(newLastPass(rz, routes, skips, hosts, map[string]string{"c": "no route to host"})).To(BeNil(), "after a failure")
	routed := append([]route{}, routes...)
	routed[1].tunnel = false
	g.Expect(newLastPass(rz, routed, skips, hosts, nil)).To(BeNil(), "a route through a next hop, whose MAC each pass resolves")
}
