package cluster

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func route(name, node, cidr string) Claim {
	return Claim{Kind: routeKind, Name: name, Node: node, CIDR: netip.MustParsePrefix(cidr)}
}

func routeAt(name, node, cidr string, created time.Time) Claim {
	c := route(name, node, cidr)
	c.Created = created
	return c
}

func node(name, cidr string) Claim {
	return Claim{Kind: nodeKind, Name: name, Node: name, CIDR: netip.MustParsePrefix(cidr)}
}

func TestFindOverlaps(t *testing.T) {
	t1 := time.Date(2026, 11, 25, 7, 0, 0, 0, time.UTC)
	cases := []struct {
		name   string
		claims []Claim
		want   map[string][]string
	}{
		{
			name:   "disjoint routes and their own nodes",
			claims: []Claim{node("a", "10.244.1.0/24"), route("a", "a", "10.244.1.0/24"), node("b", "10.244.2.0/24"), route("b", "b", "10.244.2.0/24")},
			want:   map[string][]string{},
		},
		{
			name:   "manual route covering a node's Pod CIDR",
			claims: []Claim{node("a", "10.244.1.0/24"), route("a", "a", "10.244.1.0/24"), route("manual", "", "10.244.0.0/16")},
			want: map[string][]string{
				"a":      {"10.244.1.0/24 overlaps 10.244.0.0/16 of RemoteSubnetRoute manual"},
				"manual": {"10.244.0.0/16 overlaps 10.244.1.0/24 of Node a", "10.244.0.0/16 overlaps 10.244.1.0/24 of RemoteSubnetRoute a"},
			},
		},
		{
			name:   "two routes with the same CIDR",
			claims: []Claim{route("x", "", "172.20.0.0/16"), route("y", "", "172.20.0.0/16")},
			want: map[string][]string{
				"x": {"172.20.0.0/16 overlaps 172.20.0.0/16 of RemoteSubnetRoute y"},
				"y": {"172.20.0.0/16 overlaps 172.20.0.0/16 of RemoteSubnetRoute x"},
			},
		},
		{
			name:   "a node's route claiming another node's Pod CIDR",
			claims: []Claim{node("a", "10.244.1.0/24"), node("b", "10.244.2.0/24"), route("b", "b", "10.244.1.0/24")},
			want:   map[string][]string{"b": {"10.244.1.0/24 overlaps 10.244.1.0/24 of Node a"}},
		},
		{
			name:   "nested and then disjoint: the stack is popped",
			claims: []Claim{route("big", "", "10.0.0.0/8"), route("small", "", "10.1.0.0/16"), route("other", "", "11.0.0.0/16")},
			want: map[string][]string{
				"big":   {"10.0.0.0/8 overlaps 10.1.0.0/16 of RemoteSubnetRoute small"},
				"small": {"10.1.0.0/16 overlaps 10.0.0.0/8 of RemoteSubnetRoute big"},
			},
		},
		{
			// One flow match, one host route: the older route is installed, the newer one refused, so a
			// second route never moves traffic (the flows flapped between both before, issue #22).
			name: "two routes of one node with the same CIDR: the older wins",
			claims: []Claim{node("linux-a", "10.244.9.0/24"), routeAt("linux-a", "linux-a", "10.244.9.0/24", t1),
				routeAt("a-manual", "linux-a", "10.244.9.0/24", t1.Add(time.Second))},
			want: map[string][]string{"a-manual": {"10.244.9.0/24 overlaps 10.244.9.0/24 of RemoteSubnetRoute linux-a"}},
		},
		{
			name:   "two routes of one node with the same CIDR and age: the first name wins",
			claims: []Claim{routeAt("b", "n", "10.244.9.0/24", t1), routeAt("a", "n", "10.244.9.0/24", t1)},
			want:   map[string][]string{"b": {"10.244.9.0/24 overlaps 10.244.9.0/24 of RemoteSubnetRoute a"}},
		},
		{
			name:   "routes of one node with nested CIDRs are distinct matches",
			claims: []Claim{routeAt("b", "n", "10.244.9.0/24", t1), routeAt("a", "n", "10.244.9.0/25", t1)},
			want:   map[string][]string{},
		},
		{
			name:   "IPv4 and IPv6 never overlap",
			claims: []Claim{route("v4", "", "0.0.0.0/0"), route("v6", "", "::/0")},
			want:   map[string][]string{},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got := map[string][]string{}
			for name, overlaps := range FindOverlaps(tc.claims) {
				for _, o := range overlaps {
					got[name] = append(got[name], fmt.Sprintf("%s overlaps %s", o.CIDR, o.Other))
				}
			}
			g.Expect(got).To(Equal(tc.want))
		})
	}
}

// TestFindOverlapsMatchesPairwise checks the sweep against the obvious quadratic comparison on a
// generated cluster with nested, equal and disjoint CIDRs.
func TestFindOverlapsMatchesPairwise(t *testing.T) {
	g := NewWithT(t)
	var claims []Claim
	for i := range 300 {
		n := fmt.Sprintf("n%d", i)
		claims = append(claims, node(n, fmt.Sprintf("10.%d.%d.0/24", i/256, i%256)), route(n, n, fmt.Sprintf("10.%d.%d.0/24", i/256, i%256)))
		if i%37 == 0 {
			claims = append(claims, route(fmt.Sprintf("m%d", i), "", fmt.Sprintf("10.%d.0.0/16", i/256)))
		}
		if i%53 == 0 {
			claims = append(claims, route(fmt.Sprintf("dup%d", i), "", fmt.Sprintf("10.%d.%d.0/25", i/256, i%256)))
		}
	}
	want := map[string]int{}
	for i, a := range claims {
		for j, b := range claims {
			if i == j || a.Kind != routeKind || (a.Node != "" && a.Node == b.Node) {
				continue
			}
			if a.CIDR.Overlaps(b.CIDR) {
				want[a.Name]++
			}
		}
	}
	got := map[string]int{}
	for name, overlaps := range FindOverlaps(claims) {
		got[name] = len(overlaps)
	}
	g.Expect(got).To(Equal(want))
	g.Expect(want).NotTo(BeEmpty())
}

// TestClaimIndexMatchesFindOverlaps changes the claims of a generated cluster one object at a time
// (adds, CIDR changes, removals) and checks after every change that the index answers, for every
// route, exactly what a full FindOverlaps pass over the same claims computes.
func TestClaimIndexMatchesFindOverlaps(t *testing.T) {
	g := NewWithT(t)
	rnd := rand.New(rand.NewPCG(1, 2))
	// A small address space so that nested, equal and disjoint CIDRs are all common.
	randomCIDR := func() netip.Prefix {
		if rnd.IntN(10) == 0 {
			return netip.MustParsePrefix(fmt.Sprintf("fd00:%x::/%d", rnd.IntN(4), 32+rnd.IntN(3)*16))
		}
		bits := 16 + rnd.IntN(13)
		if rnd.IntN(3) > 0 {
			bits = 24 + rnd.IntN(5) // mostly node-sized subnets
		}
		return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(rnd.IntN(4)), byte(rnd.IntN(256)), byte(rnd.IntN(8) * 32)}), bits).Masked()
	}
	objects := map[owner][]Claim{}
	randomClaims := func(o owner) []Claim {
		node := ""
		switch {
		case o.kind == nodeKind:
			node = o.name
		case rnd.IntN(3) > 0: // a node's route, sometimes repeating its Node's CIDR
			node = fmt.Sprintf("n%d", rnd.IntN(40))
		}
		var claims []Claim
		for range 1 + rnd.IntN(2) {
			cidr := randomCIDR()
			if nc := objects[owner{nodeKind, node}]; o.kind == routeKind && len(nc) > 0 && rnd.IntN(2) == 0 {
				cidr = nc[0].CIDR
			}
			claims = append(claims, Claim{Kind: o.kind, Name: o.name, Node: node, CIDR: cidr})
		}
		return claims
	}
	x := newClaimIndex(nil)
	conflicting, clean := 0, 0
	for step := range 3000 {
		o := owner{routeKind, fmt.Sprintf("r%d", rnd.IntN(120))}
		if rnd.IntN(3) == 0 {
			o = owner{nodeKind, fmt.Sprintf("n%d", rnd.IntN(40))}
		}
		var claims []Claim
		if rnd.IntN(4) > 0 {
			claims = randomClaims(o)
		}
		if len(claims) == 0 {
			delete(objects, o)
		} else {
			objects[o] = claims
		}
		x.set(o, claims)

		if step%100 != 99 {
			continue
		}
		var all []Claim
		for _, c := range objects {
			all = append(all, c...)
		}
		want := FindOverlaps(all)
		for o := range objects {
			if o.kind == routeKind {
				g.Expect(x.overlaps(o.name)).To(Equal(want[o.name]), "step %d, route %s", step, o.name)
				if len(want[o.name]) > 0 {
					conflicting++
				} else {
					clean++
				}
			}
		}
		// A fresh index built from all claims at once answers the same.
		fresh := newClaimIndex(all)
		g.Expect(fresh.prefixes).To(Equal(x.prefixes), "step %d", step)
	}
	g.Expect(conflicting).To(BeNumerically(">", 100), "the generated cluster must have conflicts")
	g.Expect(clean).To(BeNumerically(">", 100), "the generated cluster must have routes without conflicts")
}
