package pipeline

import (
	"net/netip"
	"testing"

	"github.com/winnet-io/winnet/internal/ovs/openflow"
)

// benchClusterPolicy is 2,000 Admin egress rules on 50 local Pods, half with a conjunction (a peer
// and a port), half matching every peer on every port.
func benchClusterPolicy() ClusterPolicy {
	pods := make([]Pod, 50)
	for i := range pods {
		pods[i] = Pod{OFPort: uint32(10 + i), IP: netip.AddrFrom4([4]byte{10, 244, 1, byte(10 + i)})}
	}
	var p ClusterPolicy
	for i := range 2000 {
		r := ClusterRule{Tier: AdminTier, Direction: PolicyEgress, Action: ClusterDeny, Priority: ClusterPriorityHighest - uint16(i), Pods: pods}
		if i%2 == 0 {
			r.Peers = []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 245, byte(i >> 8), byte(i)}), 32)}
			r.Ports = []PolicyPort{{Protocol: openflow.ProtoTCP, Port: 80}}
		} else {
			r.AnyPeer = true
		}
		p.Rules = append(p.Rules, r)
	}
	return p
}

// BenchmarkClusterTraceRules is what each policy pass adds for packet traces; compare
// BenchmarkClusterPolicyFlows, the pass's own flows for the same rules.
func BenchmarkClusterTraceRules(b *testing.B) {
	p := benchClusterPolicy()
	for b.Loop() {
		_ = p.TraceRules()
	}
}

func BenchmarkClusterPolicyFlows(b *testing.B) {
	p, n := benchClusterPolicy(), testNode()
	for b.Loop() {
		_ = n.ClusterPolicyFlows(p)
	}
}
