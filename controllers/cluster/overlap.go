package cluster

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
)

// Claim is one CIDR claimed by a RemoteSubnetRoute or by a Node's spec.podCIDRs.
type Claim struct {
	// Kind and Name identify the claiming object ("RemoteSubnetRoute" or "Node").
	Kind, Name string
	// Node is the node the claim belongs to: the Node itself, or a route's spec.nodeName ("" for a
	// manual route). Claims of the same node never conflict: a node's route repeats its Pod CIDRs.
	Node string
	CIDR netip.Prefix
}

func (c Claim) String() string { return fmt.Sprintf("%s of %s %s", c.CIDR, c.Kind, c.Name) }

// Overlap is a conflict of one route's CIDR with another claim.
type Overlap struct {
	CIDR  netip.Prefix
	Other Claim
}

// FindOverlaps returns, for every RemoteSubnetRoute that overlaps another claim of a different node,
// the overlaps found, ordered. Two CIDRs overlap when one contains the other. It sorts the claims and
// sweeps them once with a stack of enclosing prefixes, so it costs O(n log n) plus the overlaps found
// rather than comparing every pair: it runs over every route of the cluster.
func FindOverlaps(claims []Claim) map[string][]Overlap {
	sorted := slices.Clone(claims)
	for i := range sorted {
		sorted[i].CIDR = sorted[i].CIDR.Masked()
	}
	slices.SortFunc(sorted, func(a, b Claim) int {
		if c := a.CIDR.Addr().Compare(b.CIDR.Addr()); c != 0 {
			return c
		}
		return cmp.Compare(a.CIDR.Bits(), b.CIDR.Bits())
	})

	out := map[string][]Overlap{}
	add := func(a, b Claim) {
		if a.Kind == routeKind {
			out[a.Name] = append(out[a.Name], Overlap{CIDR: a.CIDR, Other: b})
		}
	}
	var open []Claim // prefixes that contain the current one, outermost first
	for _, c := range sorted {
		for len(open) > 0 && !open[len(open)-1].CIDR.Contains(c.CIDR.Addr()) {
			open = open[:len(open)-1]
		}
		for _, o := range open {
			if conflicts(c, o) {
				add(c, o)
				add(o, c)
			}
		}
		open = append(open, c)
	}
	for name := range out {
		slices.SortFunc(out[name], compareOverlaps)
	}
	return out
}

// conflicts reports whether two overlapping claims are a conflict: claims of the same node never
// are (a node's route repeats its Pod CIDRs), nor are two Nodes' Pod CIDRs (IPAM's business, not
// a route's).
func conflicts(a, b Claim) bool {
	if a.Node != "" && a.Node == b.Node {
		return false
	}
	return a.Kind != nodeKind || b.Kind != nodeKind
}

// compareOverlaps orders a route's overlaps by its CIDR, then by the other claim.
func compareOverlaps(a, b Overlap) int {
	return cmp.Or(comparePrefixes(a.CIDR, b.CIDR), cmp.Compare(a.Other.Kind, b.Other.Kind), cmp.Compare(a.Other.Name, b.Other.Name),
		comparePrefixes(a.Other.CIDR, b.Other.CIDR))
}

const (
	routeKind = "RemoteSubnetRoute"
	nodeKind  = "Node"
)
