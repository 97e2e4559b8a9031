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
	benchPass(b, bench1000Policies(), 1200)
}

// benchPass times one pass over in: Compute, then the flows of its policies, which must be at
// least minFlows.
func benchPass(b *testing.B, in Inputs, minFlows int) {
	node := pipeline.Node{}
	ids := &conjIDs{}
	b.ResetTimer()
	for b.Loop() {
		d := Compute(in, ids)
		if flows := node.PolicyFlows(d.Policy); len(flows) < minFlows {
			b.Fatalf("%d flows, want at least %d", len(flows), minFlows)
		}
	}
}

// BenchmarkIncrementalAddress is what the agent computes when one remote Pod joins (and, every
// other time, leaves) the peers of BenchmarkPass1000Policies' 1,000 policies: its peer sets and the
// flows of its address.
func BenchmarkIncrementalAddress(b *testing.B) {
	in := bench1000Policies()
	index := Compute(in, &conjIDs{}).peers()
	joiner := PodInfo{Namespace: "remote-00", Name: "joiner", IPs: []netip.Addr{netip.MustParseAddr("10.245.200.1")}}
	key := types.NamespacedName{Namespace: joiner.Namespace, Name: joiner.Name}
	labels := []map[string]string{{"role": "peer"}, {"role": "idle"}}
	i := 0
	b.ResetTimer()
	for b.Loop() {
		joiner.Labels = labels[i%2]
		i++
		clauses, err := index.podChanged(key, &joiner)
		if err != nil || len(clauses) != 10 {
			b.Fatalf("%d clauses, %v", len(clauses), err)
		}
		if flows := index.flows(clauses); len(flows) != 1 {
			b.Fatalf("%d peer flows", len(flows))
		}
	}
}

// bench1000Policies are make bench-netpol's second shape: 1,000 policies selecting 100 of 200
// local Pods each and admitting the same 1,000 remote Pods on one of 10 ports.
func bench1000Policies() Inputs {
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
	return in
}

// BenchmarkPass5000CIDRs is one pass over make bench-netpol's first shape: one policy admitting
// 5,000 ipBlock /32 peers to two local Pods, compiled (Compute) and turned into flows.
func BenchmarkPass5000CIDRs(b *testing.B) {
	in := Inputs{Namespaces: map[string]map[string]string{"perf": {}}}
	for j := range 2 {
		ip := netip.AddrFrom4([4]byte{10, 244, 46, byte(2 + j)})
		key := types.NamespacedName{Namespace: "perf", Name: fmt.Sprintf("perf-%d", j)}
		in.Pods = append(in.Pods, PodInfo{Namespace: key.Namespace, Name: key.Name, Labels: map[string]string{"app": "perf"}, IPs: []netip.Addr{ip}})
		in.Local = append(in.Local, LocalPod{Key: key, Pod: pipeline.Pod{OFPort: uint32(j + 1), MAC: net.HardwareAddr{2, 0, 0, 0, 0, byte(j)}, IP: ip}})
	}
	rnd := rand.New(rand.NewSource(5000))
	var peers []networkingv1.NetworkPolicyPeer
	for range 5000 {
		ip := fmt.Sprintf("%d.%d.%d.%d", 11+rnd.Intn(200), rnd.Intn(256), rnd.Intn(256), 1+rnd.Intn(254))
		peers = append(peers, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: ip + "/32"}})
	}
	np := policy("cidrs", map[string]string{"app": "perf"}, networkingv1.NetworkPolicySpec{
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: peers}},
	})
	np.Namespace = "perf"
	in.Policies = []networkingv1.NetworkPolicy{np}
	benchPass(b, in, 4990)
}
