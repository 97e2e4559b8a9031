package networkpolicy

import (
	"fmt"
	"math/rand"
	"net/netip"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/winnet-io/winnet/internal/pipeline"
)

// classOf is what the peer class stage does to an address: the id of its longest matching prefix
// (0: none).
func classOf(classes []pipeline.PeerClass, a netip.Addr) uint32 {
	best, id := -1, uint32(0)
	for _, c := range classes {
		if c.Prefix.Contains(a) && c.Prefix.Bits() > best {
			best, id = c.Prefix.Bits(), c.ID
		}
	}
	return id
}

// TestPeerClassesAdmitExactlyTheBlocks: for random ipBlocks with exceptions over a small address
// space (so that they nest and overlap), a rule admits an address through the peer class stage
// exactly when one of its ipBlocks' CIDRs covers it and none of that CIDR's exceptions does.
func TestPeerClassesAdmitExactlyTheBlocks(t *testing.T) {
	g := NewWithT(t)
	seed := time.Now().UnixNano()
	rnd := rand.New(rand.NewSource(seed))
	prefix := func(minBits int) string {
		bits := minBits + rnd.Intn(33-minBits)
		a := netip.AddrFrom4([4]byte{10, byte(rnd.Intn(4)), byte(rnd.Intn(4)), byte(rnd.Intn(8))})
		return netip.PrefixFrom(a, bits).Masked().String()
	}
	for iter := range 200 {
		var policies []networkingv1.NetworkPolicy
		for i := range 1 + rnd.Intn(3) {
			var rules []networkingv1.NetworkPolicyIngressRule
			for range 1 + rnd.Intn(3) {
				var peers []networkingv1.NetworkPolicyPeer
				for range 1 + rnd.Intn(3) {
					b := &networkingv1.IPBlock{CIDR: prefix(8)}
					if rnd.Intn(2) == 0 {
						b.CIDR = "0.0.0.0/0"
					}
					for range rnd.Intn(6) {
						b.Except = append(b.Except, prefix(16))
					}
					peers = append(peers, networkingv1.NetworkPolicyPeer{IPBlock: b})
				}
				rules = append(rules, networkingv1.NetworkPolicyIngressRule{From: peers, Ports: []networkingv1.NetworkPolicyPort{tcp(80 + i)}})
			}
			policies = append(policies, policy(fmt.Sprintf("p%d", i), map[string]string{"app": "web"}, networkingv1.NetworkPolicySpec{Ingress: rules}))
		}
		d := Compute(testInputs(policies...), &conjIDs{})
		byPort := map[uint16][]pipeline.PolicyRule{}
		for _, r := range d.Policy.Rules {
			byPort[r.Ports[0].Port] = append(byPort[r.Ports[0].Port], r)
		}
		for range 300 {
			a := netip.AddrFrom4([4]byte{10, byte(rnd.Intn(4)), byte(rnd.Intn(4)), byte(rnd.Intn(8))})
			if rnd.Intn(10) == 0 {
				a = netip.AddrFrom4([4]byte{byte(rnd.Intn(256)), 1, 2, 3})
			}
			class := classOf(d.Policy.IngressClasses, a)
			for i, np := range policies {
				want := false
				for _, rule := range np.Spec.Ingress {
					for _, peer := range rule.From {
						want = want || blockAdmits(peer.IPBlock, a)
					}
				}
				got := false
				for _, r := range byPort[uint16(80+i)] {
					got = got || (class != 0 && containsID(r.Classes, class)) || containsPrefix(r.Peers, a)
				}
				g.Expect(got).To(Equal(want), "seed %d iteration %d: policy %d, address %s (class %d)", seed, iter, i, a, class)
			}
		}
	}
}

func blockAdmits(b *networkingv1.IPBlock, a netip.Addr) bool {
	if !netip.MustParsePrefix(b.CIDR).Contains(a) {
		return false
	}
	for _, e := range b.Except {
		if netip.MustParsePrefix(e).Contains(a) {
			return false
		}
	}
	return true
}

func containsID(ids []uint32, id uint32) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

func containsPrefix(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// exceptPolicy admits TCP 80 from 0.0.0.0/0 except n /32s, and TCP 81 from 10.9.0.0/16.
func exceptPolicy(n int) networkingv1.NetworkPolicy {
	b := &networkingv1.IPBlock{CIDR: "0.0.0.0/0"}
	for i := range n {
		b.Except = append(b.Except, netip.AddrFrom4([4]byte{172, 16, byte(i >> 8), byte(i)}).String()+"/32")
	}
	return policy("except", map[string]string{"app": "web"}, networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{
		{From: []networkingv1.NetworkPolicyPeer{{IPBlock: b}}, Ports: []networkingv1.NetworkPolicyPort{tcp(80)}},
		{From: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.9.0.0/16"}}}, Ports: []networkingv1.NetworkPolicyPort{tcp(81)}},
	}})
}

// TestExceptsCostFlowsLinearly: 4,000 /32 exceptions of 0.0.0.0/0 are one class flow per prefix
// and one rule flow, not the ~76,000 prefixes of the complement.
func TestExceptsCostFlowsLinearly(t *testing.T) {
	g := NewWithT(t)
	d := Compute(testInputs(exceptPolicy(MaxExceptsPerRule)), &conjIDs{})
	g.Expect(d.Refused).To(BeEmpty())
	g.Expect(d.Policy.IngressClasses).To(HaveLen(MaxExceptsPerRule + 1))
	flows := pipeline.Node{NodeIP: netip.MustParseAddr("192.168.10.11"), GatewayIP: netip.MustParseAddr("10.244.1.1")}.PolicyFlows(d.Policy)
	g.Expect(len(flows)).To(BeNumerically("<", 2*MaxExceptsPerRule+500))
	g.Expect(len(flows)).To(BeNumerically(">", MaxExceptsPerRule))
}

// TestOversizedRuleIsRefused: a rule above MaxExceptsPerRule admits nothing and is reported; the
// policy still isolates its Pods and its other rules apply.
func TestOversizedRuleIsRefused(t *testing.T) {
	g := NewWithT(t)
	d := Compute(testInputs(exceptPolicy(MaxExceptsPerRule+1)), &conjIDs{})
	g.Expect(d.Refused).To(Equal(map[types.NamespacedName][]string{{Namespace: "x", Name: "except"}: {
		"ingress rule 1: 4001 ipBlock exceptions, above the limit of 4000 per rule; the rule admits nothing"}}))
	g.Expect(view(d.Policy)).To(Equal([]ruleView{{Dir: pipeline.PolicyIngress, Pods: []uint32{10}, Peers: prefixes("10.9.0.0/16"),
		Ports: []pipeline.PolicyPort{{Protocol: 6, Port: 81}}}}))
	g.Expect(ofports(d.Policy.IngressIsolated)).To(Equal([]uint32{10}))
	g.Expect(d.Policy.IngressClasses).To(BeEmpty())
}
