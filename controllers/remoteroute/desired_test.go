package remoteroute

import (
	"fmt"
	"net/netip"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/nodenetwork"
	"github.com/winnet-io/winnet/internal/pipeline"
)

func rsr(name, node, nodeIP string, mode networkv1alpha1.RouteMode, cidrs ...string) networkv1alpha1.RemoteSubnetRoute {
	r := networkv1alpha1.RemoteSubnetRoute{ObjectMeta: metav1.ObjectMeta{Name: name}}
	r.Spec = networkv1alpha1.RemoteSubnetRouteSpec{NodeName: node, NodeIP: networkv1alpha1.IPAddress(nodeIP), Mode: mode}
	r.Status.Conditions = []metav1.Condition{{Type: networkv1alpha1.AcceptedCondition, Status: metav1.ConditionTrue}}
	for _, c := range cidrs {
		r.Spec.PodCIDRs = append(r.Spec.PodCIDRs, networkv1alpha1.CIDR(c))
	}
	return r
}

const notAccepted = "not accepted by winnet-controller (yet), or conflicting"

func TestDesiredRoutes(t *testing.T) {
	realized := func(mode networkv1alpha1.EncapsulationMode, tunnel uint32) nodenetwork.Realized {
		return nodenetwork.Realized{
			Mode: mode, VNI: 1, NodeSubnet: netip.MustParsePrefix("192.168.10.11/24"),
			Node: pipeline.Node{TunnelOFPort: tunnel},
		}
	}
	conflicting := rsr("conflict", "n9", "192.168.10.19", networkv1alpha1.RouteModeAuto, "10.244.9.0/24")
	conflicting.Status.Conditions = []metav1.Condition{
		{Type: networkv1alpha1.ConflictCondition, Status: metav1.ConditionTrue},
		{Type: networkv1alpha1.AcceptedCondition, Status: metav1.ConditionFalse},
	}
	stale := rsr("stale", "n8", "192.168.10.18", networkv1alpha1.RouteModeAuto, "10.244.8.0/24")
	stale.Generation = 2 // accepted for generation 0 (observedGeneration), changed since
	flannel := rsr("flannel", "f1", "192.168.30.5", networkv1alpha1.RouteModeTunnel, "10.244.4.0/24")
	flannel.Spec.VNI, flannel.Spec.VTEPMAC = ptr.To(networkv1alpha1.VNI(4096)), "0e:6a:5e:1b:23:9c"

	cases := []struct {
		name      string
		rz        nodenetwork.Realized
		list      []networkv1alpha1.RemoteSubnetRoute
		want      []string
		wantSkips []skipped
	}{
		{name: "own node skipped, others tunnelled with the default gateway",
			rz:   realized(networkv1alpha1.EncapsulationModeEncap, 1),
			list: []networkv1alpha1.RemoteSubnetRoute{rsr("self", "me", "192.168.10.11", "", "10.244.1.0/24"), rsr("b", "b", "192.168.10.12", "", "10.244.2.0/24")},
			want: []string{"b 10.244.2.0/24 tunnel=true via 10.244.2.1 vni=1 mac=aa:bb:cc:dd:ee:ff"}},
		{name: "NoEncap routes through the peer",
			rz:   realized(networkv1alpha1.EncapsulationModeNoEncap, 0),
			list: []networkv1alpha1.RemoteSubnetRoute{rsr("b", "b", "192.168.10.12", networkv1alpha1.RouteModeAuto, "10.244.2.0/24")},
			want: []string{"b 10.244.2.0/24 tunnel=false via 10.244.2.1 vni=1 mac=aa:bb:cc:dd:ee:ff"}},
		{name: "Hybrid routes in the subnet and tunnels beyond it",
			rz: realized(networkv1alpha1.EncapsulationModeHybrid, 1),
			list: []networkv1alpha1.RemoteSubnetRoute{
				rsr("near", "near", "192.168.10.12", "", "10.244.2.0/24"), rsr("far", "far", "192.168.99.12", "", "10.244.3.0/24")},
			want: []string{"near 10.244.2.0/24 tunnel=false via 10.244.2.1 vni=1 mac=aa:bb:cc:dd:ee:ff", "far 10.244.3.0/24 tunnel=true via 10.244.3.1 vni=1 mac=aa:bb:cc:dd:ee:ff"}},
		{name: "flannel peer with VNI and VTEP MAC overrides",
			rz:   realized(networkv1alpha1.EncapsulationModeEncap, 1),
			list: []networkv1alpha1.RemoteSubnetRoute{flannel},
			want: []string{"flannel 10.244.4.0/24 tunnel=true via 10.244.4.1 vni=4096 mac=0e:6a:5e:1b:23:9c"}},
		{name: "conflicting route not installed, tunnel without tunnel port failed",
			rz:        realized(networkv1alpha1.EncapsulationModeNoEncap, 0),
			list:      []networkv1alpha1.RemoteSubnetRoute{conflicting, stale, rsr("t", "t", "192.168.10.13", networkv1alpha1.RouteModeTunnel, "10.244.5.0/24")},
			wantSkips: []skipped{{name: "conflict", reason: notAccepted}, {name: "stale", reason: notAccepted}, {name: "t", reason: "needs a tunnel but the node's encapsulation mode is NoEncap", failed: true}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			routes, skips := desiredRoutes("me", tc.rz, tc.list)
			var got []string
			for _, r := range routes {
				got = append(got, fmt.Sprintf("%s %s tunnel=%t via %s vni=%d mac=%s", r.name, r.cidr, r.tunnel, r.gatewayIP, r.vni, r.dstMAC))
			}
			g.Expect(got).To(ConsistOf(tc.want))
			g.Expect(skips).To(Equal(tc.wantSkips))
		})
	}
}

// TestKeepAccepted follows one route through spec changes: a generation winnet-controller has not judged yet
// is installed as the last accepted one (its flows change in place once the new one is accepted, the host
// route stays), a generation judged Conflict is withdrawn and forgotten, a route recreated under the same
// name does not inherit the old one's spec, and a full pass forgets the routes that are gone.
func TestKeepAccepted(t *testing.T) {
	g := NewWithT(t)
	rz := nodenetwork.Realized{Mode: networkv1alpha1.EncapsulationModeEncap, VNI: 1, Node: pipeline.Node{TunnelOFPort: 1}}
	kept := map[string]networkv1alpha1.RemoteSubnetRoute{}
	macs := func(list []networkv1alpha1.RemoteSubnetRoute, all bool) []string {
		routes, _ := desiredRoutes("me", rz, keepAccepted(list, kept, all))
		var out []string
		for _, r := range routes {
			out = append(out, r.name+" "+r.dstMAC.String())
		}
		return out
	}
	m := rsr("m", "m", "192.168.10.15", networkv1alpha1.RouteModeTunnel, "10.244.5.0/24")
	m.UID, m.Generation, m.Status.ObservedGeneration = "uid-1", 1, 1
	m.Spec.VTEPMAC = "0e:2a:0a:f4:05:00" // flanneld's on the node
	g.Expect(macs([]networkv1alpha1.RemoteSubnetRoute{m}, true)).To(Equal([]string{"m 0e:2a:0a:f4:05:00"}))

	// The node moves to winnet: winnet-controller writes the new spec, and judges it a moment later.
	next := *m.DeepCopy()
	next.Generation, next.Spec.VTEPMAC = 2, "06:3a:d6:fc:fb:06"
	g.Expect(macs([]networkv1alpha1.RemoteSubnetRoute{next}, false)).To(Equal([]string{"m 0e:2a:0a:f4:05:00"}), "not judged yet: as last accepted")
	g.Expect(macs([]networkv1alpha1.RemoteSubnetRoute{next}, true)).To(Equal([]string{"m 0e:2a:0a:f4:05:00"}), "the full pass too")
	next.Status.ObservedGeneration = 2
	g.Expect(macs([]networkv1alpha1.RemoteSubnetRoute{next}, false)).To(Equal([]string{"m 06:3a:d6:fc:fb:06"}))

	// A generation judged Conflict goes, and is not brought back by the next unjudged one.
	conflict := *next.DeepCopy()
	conflict.Generation, conflict.Status.ObservedGeneration = 3, 3
	conflict.Status.Conditions = []metav1.Condition{{Type: networkv1alpha1.AcceptedCondition, Status: metav1.ConditionFalse}}
	g.Expect(macs([]networkv1alpha1.RemoteSubnetRoute{conflict}, false)).To(BeEmpty())
	conflict.Generation = 4
	g.Expect(macs([]networkv1alpha1.RemoteSubnetRoute{conflict}, false)).To(BeEmpty())

	// Recreated under the same name: a new object, nothing of the old one's.
	g.Expect(macs([]networkv1alpha1.RemoteSubnetRoute{next}, false)).To(Equal([]string{"m 06:3a:d6:fc:fb:06"}))
	again := *m.DeepCopy()
	again.UID, again.Generation, again.Status.ObservedGeneration = "uid-2", 1, 0
	g.Expect(macs([]networkv1alpha1.RemoteSubnetRoute{again}, false)).To(BeEmpty())

	// A full pass without the route forgets it.
	g.Expect(macs([]networkv1alpha1.RemoteSubnetRoute{next}, false)).To(HaveLen(1))
	g.Expect(macs(nil, true)).To(BeEmpty())
	g.Expect(kept).To(BeEmpty())
}
