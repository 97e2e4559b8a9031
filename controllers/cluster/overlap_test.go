package cluster

import (
	"fmt"
	"net/netip"
	"testing"

	. "github.com/onsi/gomega"
)

func route(name, node, cidr string) Claim {
	return Claim{Kind: routeKind, Name: name, Node: node, CIDR: netip.MustParsePrefix(cidr)}
}

func node(name, cidr string) Claim {
	return Claim{Kind: nodeKind, Name: name, Node: name, CIDR: netip.MustParsePrefix(cidr)}
}

func TestFindOverlaps(t *testing.T) {
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
