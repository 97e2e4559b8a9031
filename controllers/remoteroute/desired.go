package remoteroute

import (
	"cmp"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/nodenetwork"
	"github.com/winnet-io/winnet/internal/pipeline"
)

// route is one remote subnet as this node realises it.
type route struct {
	// name is the RemoteSubnetRoute's name; nodeName its spec.nodeName.
	name, nodeName string
	cidr           netip.Prefix
	// tunnel or routed; nodeIP is the tunnel destination or the next hop.
	tunnel bool
	nodeIP netip.Addr
	// gatewayIP is the remote gateway the host route points at (tunnel mode).
	gatewayIP netip.Addr
	vni       uint32
	dstMAC    net.HardwareAddr
	// created orders routes claiming the same CIDR: the oldest wins (see winner).
	created time.Time
}

// skipped is a route this node does not install, with why; it counts as failed when it is an error
// the user should see.
type skipped struct {
	name, reason string
	failed       bool
}

// desiredRoutes computes the routes of this node from every RemoteSubnetRoute. It is pure. Routes of
// the node itself, routes winnet-controller has not accepted for their current generation (among
// them those with Conflict=True) and non-IPv4 CIDRs are not installed: a route is installed only
// once it is known not to overlap another. (The reconciler passes a route whose new generation is
// not judged yet as it was last accepted: keepAccepted.)
func desiredRoutes(nodeName string, rz nodenetwork.Realized, list []networkv1alpha1.RemoteSubnetRoute) ([]route, []skipped) {
	var out []route
	var skips []skipped
	for _, rsr := range list {
		if rsr.Spec.NodeName == nodeName {
			continue
		}
		if !accepted(rsr) {
			skips = append(skips, skipped{name: rsr.Name, reason: "not accepted by winnet-controller (yet), or conflicting", failed: false})
			continue
		}
		nodeIP, err := netip.ParseAddr(string(rsr.Spec.NodeIP))
		if err != nil || !nodeIP.Is4() {
			skips = append(skips, skipped{name: rsr.Name, reason: fmt.Sprintf("node IP %q is not IPv4", rsr.Spec.NodeIP), failed: true})
			continue
		}
		tunnel := useTunnel(rsr.Spec.Mode, rz, nodeIP)
		if tunnel && rz.Node.TunnelOFPort == 0 {
			skips = append(skips, skipped{name: rsr.Name, reason: "needs a tunnel but the node's encapsulation mode is NoEncap", failed: true})
			continue
		}
		vni := rz.VNI
		if rsr.Spec.VNI != nil {
			vni = uint32(*rsr.Spec.VNI)
		}
		dstMAC := pipeline.GlobalVirtualMAC
		if rsr.Spec.VTEPMAC != "" {
			if mac, err := net.ParseMAC(string(rsr.Spec.VTEPMAC)); err == nil {
				dstMAC = mac
			}
		}
		for _, c := range rsr.Spec.PodCIDRs {
			cidr, err := netip.ParsePrefix(string(c))
			if err != nil || !cidr.Addr().Is4() {
				continue
			}
			gw := cidr.Masked().Addr().Next()
			if rsr.Spec.GatewayIP != "" {
				if ip, err := netip.ParseAddr(string(rsr.Spec.GatewayIP)); err == nil && cidr.Contains(ip) {
					gw = ip
				}
			}
			out = append(out, route{name: rsr.Name, nodeName: rsr.Spec.NodeName, cidr: cidr.Masked(), tunnel: tunnel, nodeIP: nodeIP, gatewayIP: gw, vni: vni, dstMAC: dstMAC,
				created: rsr.CreationTimestamp.Time})
		}
	}
	// Two routes for the same CIDR would be one flow match and one host route: install only the winner,
	// whatever winnet-controller's verdict says yet (its Conflict condition follows the same rule).
	slices.SortFunc(out, func(a, b route) int {
		return cmp.Or(a.cidr.Addr().Compare(b.cidr.Addr()), cmp.Compare(a.cidr.Bits(), b.cidr.Bits()), winner(a, b))
	})
	kept := out[:0]
	for _, rt := range out {
		if n := len(kept); n > 0 && kept[n-1].cidr == rt.cidr {
			skips = append(skips, skipped{name: rt.name, reason: fmt.Sprintf("%s is installed for the older route %s", rt.cidr, kept[n-1].name)})
			continue
		}
		kept = append(kept, rt)
	}
	return kept, skips
}

// winner orders two routes claiming the same CIDR: the older one first, then by name. winnet-controller's
// Conflict condition (reason Duplicate) documents the same rule.
func winner(a, b route) int {
	return cmp.Or(a.created.Compare(b.created), cmp.Compare(a.name, b.name))
}

// useTunnel resolves a route's mode on this node.
func useTunnel(mode networkv1alpha1.RouteMode, rz nodenetwork.Realized, peer netip.Addr) bool {
	switch mode {
	case networkv1alpha1.RouteModeTunnel:
		return true
	case networkv1alpha1.RouteModeRoute:
		return false
	}
	switch rz.Mode {
	case networkv1alpha1.EncapsulationModeNoEncap:
		return false
	case networkv1alpha1.EncapsulationModeHybrid:
		return !rz.NodeSubnet.Masked().Contains(peer)
	default:
		return true
	}
}

// accepted reports whether winnet-controller accepted the route's current spec.
func accepted(rsr networkv1alpha1.RemoteSubnetRoute) bool {
	c := meta.FindStatusCondition(rsr.Status.Conditions, networkv1alpha1.AcceptedCondition)
	return c != nil && c.Status == metav1.ConditionTrue && rsr.Status.ObservedGeneration == rsr.Generation
}

// keepAccepted returns the routes to compute this node's routes from: a route whose current generation
// winnet-controller has not judged yet stays as it was last accepted, the version kept holds for it (by
// name, the same object by UID). A changed spec — a peer's VTEP MAC or address, a flannel node's record
// turning into a winnet node's during a takeover — then changes the route's flows in place once accepted,
// instead of withdrawing them and the host route until winnet-controller has judged the change: that
// withdrawal left the peer's Pods unreachable meanwhile and made every spec change two host route changes.
// A generation judged not accepted (Conflict) is withdrawn, as before. keepAccepted records every accepted
// route in kept, and forgets the routes the list does not hold when all says it holds every route. It does
// not modify list, whose items may be the cache's.
func keepAccepted(list []networkv1alpha1.RemoteSubnetRoute, kept map[string]networkv1alpha1.RemoteSubnetRoute, all bool) []networkv1alpha1.RemoteSubnetRoute {
	out := make([]networkv1alpha1.RemoteSubnetRoute, 0, len(list))
	seen := make(map[string]bool, len(list))
	for _, rsr := range list {
		seen[rsr.Name] = true
		prev, ok := kept[rsr.Name]
		switch {
		case accepted(rsr):
			kept[rsr.Name] = rsr
		case rsr.Status.ObservedGeneration != rsr.Generation && ok && prev.UID == rsr.UID:
			rsr = prev // not judged yet: as last accepted
		default:
			delete(kept, rsr.Name)
		}
		out = append(out, rsr)
	}
	if all {
		for name := range kept {
			if !seen[name] {
				delete(kept, name)
			}
		}
	}
	return out
}
