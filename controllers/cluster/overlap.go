package cluster

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"time"
)

// Claim is one CIDR claimed by a RemoteSubnetRoute or by a Node's spec.podCIDRs.
type Claim struct {
	// Kind and Name identify the claiming object ("RemoteSubnetRoute" or "Node").
	Kind, Name string
	// Node is the node the claim belongs to: the Node itself, or a route's spec.nodeName ("" for a
	// manual route). Claims of the same node never conflict: a node's route repeats its Pod CIDRs.
	Node string
	CIDR netip.Prefix
	// Created is the claiming object's creation time: of two routes of one node claiming the same CIDR,
	// the older wins (see loses).
	Created time.Time
}

func (c Claim) String() string { return fmt.Sprintf("%s of %s %s", c.CIDR, c.Kind, c.Name) }

// Overlap is a conflict of one route's CIDR with another claim.
type Overlap struct {
	CIDR  netip.Prefix
	Other Claim
}

// Duplicate reports whether the overlap is a route of the same node claiming the same CIDR (and winning).
func (o Overlap) Duplicate() bool {
	return o.Other.Kind == routeKind && o.Other.Node != "" && o.Other.CIDR == o.CIDR
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
			if loses(c, o) {
				add(c, o)
			}
			if loses(o, c) {
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

// duplicates reports whether a and b are two routes of the same node claiming the same CIDR: they would be
// one flow match (and one host route), so only one can be installed.
func duplicates(a, b Claim) bool {
	return a.Kind == routeKind && b.Kind == routeKind && a.Node != "" && a.Node == b.Node && a.CIDR == b.CIDR
}

// related reports whether the claims of a and b bear on each other's verdict.
func related(a, b Claim) bool { return conflicts(a, b) || duplicates(a, b) }

// loses reports whether claim a is refused because of claim b: they conflict, or b is a duplicate of a that
// wins. Of two duplicates the older route wins, then the one whose name sorts first (the rule Gateway API
// uses for conflicting routes); the winner keeps its flows, so traffic does not move when a duplicate
// appears.
func loses(a, b Claim) bool {
	if conflicts(a, b) {
		return true
	}
	if !duplicates(a, b) {
		return false
	}
	return cmp.Or(b.Created.Compare(a.Created), cmp.Compare(b.Name, a.Name)) < 0
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
