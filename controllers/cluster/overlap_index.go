package cluster

import (
	"cmp"
	"net/netip"
	"slices"
)

// owner is the object a claim belongs to.
type owner struct{ kind, name string }

// claimIndex holds the cluster's CIDR claims so that the overlaps of one object's claims are found
// without a pass over all of them: the claims containing a CIDR are found by one map lookup per
// shorter prefix length, and the claims it contains by a binary search in the sorted prefixes and a
// scan of the range it covers. A change to one route or Node costs O(log n) lookups plus the
// overlaps found (and a copy within the sorted slice of prefixes when a prefix appears or goes).
// It answers exactly what FindOverlaps computes in one sweep over all claims.
type claimIndex struct {
	byPrefix map[netip.Prefix][]Claim
	// prefixes are the keys of byPrefix ordered by address, then length.
	prefixes []netip.Prefix
	byOwner  map[owner][]Claim
}

func newClaimIndex(claims []Claim) *claimIndex {
	x := &claimIndex{byPrefix: map[netip.Prefix][]Claim{}, byOwner: map[owner][]Claim{}}
	for _, c := range claims {
		c.CIDR = c.CIDR.Masked()
		o := owner{c.Kind, c.Name}
		x.byOwner[o] = append(x.byOwner[o], c)
		if len(x.byPrefix[c.CIDR]) == 0 {
			x.prefixes = append(x.prefixes, c.CIDR)
		}
		x.byPrefix[c.CIDR] = append(x.byPrefix[c.CIDR], c)
	}
	slices.SortFunc(x.prefixes, comparePrefixes)
	return x
}

func comparePrefixes(a, b netip.Prefix) int {
	return cmp.Or(a.Addr().Compare(b.Addr()), cmp.Compare(a.Bits(), b.Bits()))
}

// claimsOf returns the claims of one object.
func (x *claimIndex) claimsOf(o owner) []Claim { return x.byOwner[o] }

// set replaces the claims of one object (none: the object is gone) and returns its previous ones.
func (x *claimIndex) set(o owner, claims []Claim) []Claim {
	before := x.byOwner[o]
	for _, c := range before {
		x.remove(c)
	}
	delete(x.byOwner, o)
	for _, c := range claims {
		c.CIDR = c.CIDR.Masked()
		x.byOwner[o] = append(x.byOwner[o], c)
		x.add(c)
	}
	return before
}

func (x *claimIndex) add(c Claim) {
	if len(x.byPrefix[c.CIDR]) == 0 {
		i, _ := slices.BinarySearchFunc(x.prefixes, c.CIDR, comparePrefixes)
		x.prefixes = slices.Insert(x.prefixes, i, c.CIDR)
	}
	x.byPrefix[c.CIDR] = append(x.byPrefix[c.CIDR], c)
}

func (x *claimIndex) remove(c Claim) {
	same := x.byPrefix[c.CIDR]
	if i := slices.Index(same, c); i >= 0 {
		same = slices.Delete(same, i, i+1)
	}
	if len(same) > 0 {
		x.byPrefix[c.CIDR] = same
		return
	}
	delete(x.byPrefix, c.CIDR)
	if i, found := slices.BinarySearchFunc(x.prefixes, c.CIDR, comparePrefixes); found {
		x.prefixes = slices.Delete(x.prefixes, i, i+1)
	}
}

// conflicting returns the claims in the index related to c (they conflict, or are its duplicates, see
// related), c itself excepted once: an object listing the same CIDR twice conflicts with itself, as in
// FindOverlaps.
func (x *claimIndex) conflicting(c Claim) []Claim {
	c.CIDR = c.CIDR.Masked()
	var out []Claim
	collect := func(others []Claim) {
		for _, o := range others {
			if related(c, o) {
				out = append(out, o)
			}
		}
	}
	// Claims containing c, c's own prefix included.
	for bits := range c.CIDR.Bits() + 1 {
		p := netip.PrefixFrom(c.CIDR.Addr(), bits).Masked()
		others := x.byPrefix[p]
		if p == c.CIDR {
			if i := slices.Index(others, c); i >= 0 {
				others = slices.Concat(others[:i], others[i+1:])
			}
		}
		collect(others)
	}
	// Claims inside c, longer than it; they start at or after c's address.
	i, _ := slices.BinarySearchFunc(x.prefixes, c.CIDR, comparePrefixes)
	for ; i < len(x.prefixes) && c.CIDR.Contains(x.prefixes[i].Addr()); i++ {
		if x.prefixes[i].Bits() > c.CIDR.Bits() {
			collect(x.byPrefix[x.prefixes[i]])
		}
	}
	return out
}

// overlaps returns the overlaps of a route's claims, ordered as FindOverlaps orders them.
func (x *claimIndex) overlaps(route string) []Overlap {
	var out []Overlap
	for _, c := range x.byOwner[owner{routeKind, route}] {
		for _, o := range x.conflicting(c) {
			if loses(c, o) {
				out = append(out, Overlap{CIDR: c.CIDR, Other: o})
			}
		}
	}
	slices.SortFunc(out, compareOverlaps)
	return out
}
