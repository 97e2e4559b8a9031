package networkpolicy

import (
	"fmt"
	"math/rand"
	"net"
	"net/netip"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/winnet-io/winnet/internal/pipeline"
)

// BenchmarkPass1000Policies is one pass of the reconciler over make bench-netpol's second shape,
// without the API server and the switch: 1,000 policies selecting 100 of 200 local Pods each and
// admitting the same 1,000 remote Pods, compiled (Compute) and turned into flows (PolicyFlows).
func BenchmarkPass1000Policies(b *testing.B) {
	in := Inputs{Namespaces: map[string]map[string]string{"bench": {}}}
	rnd := rand.New(rand.NewSource(21))
	const sets = 20
	member := make([]map[int]bool, sets)
	for s := range member {
		member[s] = map[int]bool{}
		for _, j := range rnd.Perm(200)[:100] {
			member[s][j] = true
		}
	}
	for j := range 200 {
		labels := map[string]string{}
		for s := range sets {
			if member[s][j] {
				labels[fmt.Sprintf("set%d", s)] = "in"
			}
		}
		ip := netip.AddrFrom4([4]byte{10, 244, 46, byte(2 + j)})
		in.Pods = append(in.Pods, PodInfo{Namespace: "bench", Name: fmt.Sprintf("local-%03d", j), Labels: labels, IPs: []netip.Addr{ip}})
		in.Local = append(in.Local, LocalPod{Key: types.NamespacedName{Namespace: "bench", Name: fmt.Sprintf("local-%03d", j)},
			Pod: pipeline.Pod{OFPort: uint32(j + 1), MAC: net.HardwareAddr{2, 0, 0, 0, 0, byte(j)}, IP: ip}})
	}
	for i := range 50 {
		in.Namespaces[fmt.Sprintf("remote-%02d", i)] = map[string]string{"bench": "remote"}
	}
	for i := range 1000 {
		in.Pods = append(in.Pods, PodInfo{Namespace: fmt.Sprintf("remote-%02d", i%50), Name: fmt.Sprintf("remote-%04d", i),
			Labels: map[string]string{"role": "peer"}, IPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 245, byte(i / 250), byte(1 + i%250)})}})
	}
	for i := range 1000 {
		np := policy(fmt.Sprintf("p-%04d", i), map[string]string{fmt.Sprintf("set%d", i%sets): "in"}, networkingv1.NetworkPolicySpec{
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel(map[string]string{"bench": "remote"}), PodSelector: sel(map[string]string{"role": "peer"})}},
				Ports: []networkingv1.NetworkPolicyPort{tcp(8000 + i%10)},
			}},
		})
		np.Namespace, np.UID = "bench", types.UID(fmt.Sprintf("uid-%d", i))
		in.Policies = append(in.Policies, np)
	}
	node := pipeline.Node{}
	ids := &conjIDs{}
	b.ResetTimer()
	for b.Loop() {
		d := Compute(in, ids)
		flows := node.PolicyFlows(d.Policy)
		if len(flows) < 1200 {
			b.Fatalf("%d flows", len(flows))
		}
	}
}
