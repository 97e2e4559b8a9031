package networkpolicy

import (
	"net/netip"

	"github.com/winnet-io/winnet/internal/pipeline"
)

// conjIDs gives every rule (RuleKey) a conjunction id that stays the same while the rule exists,
// so that a change elsewhere does not rewrite its flows, and every prefix of the peer class stage
// a class id that stays the same while the prefix is in the stage. Ids are not reused while the
// agent runs.
type conjIDs struct {
	ids  map[RuleKey]uint32
	next uint32
	// classes and nextClass are the same for the peer classes.
	classes   map[classKey]uint32
	nextClass uint32
}

type classKey struct {
	dir    pipeline.PolicyDirection
	prefix netip.Prefix
}

// ID returns the rule's id, allocating one the first time.
func (c *conjIDs) ID(k RuleKey) uint32 {
	if c.ids == nil {
		c.ids = map[RuleKey]uint32{}
	}
	if id, ok := c.ids[k]; ok {
		return id
	}
	c.next++
	c.ids[k] = c.next
	return c.next
}

// ClassID returns the class id of a prefix of the peer class stage, allocating one the first time.
func (c *conjIDs) ClassID(dir pipeline.PolicyDirection, p netip.Prefix) uint32 {
	if c.classes == nil {
		c.classes = map[classKey]uint32{}
	}
	k := classKey{dir, p}
	if id, ok := c.classes[k]; ok {
		return id
	}
	c.nextClass++
	c.classes[k] = c.nextClass
	return c.nextClass
}

// keepOnly forgets the ids of rules no longer compiled (keep holds those of the last pass, the
// ids of rules merged into others included), and of the prefixes no longer in the peer class
// stage (classes: the last pass's stage).
func (c *conjIDs) keepOnly(keep map[uint32]bool, classes ...[]pipeline.PeerClass) {
	for k, id := range c.ids {
		if !keep[id] {
			delete(c.ids, k)
		}
	}
	inStage := map[classKey]bool{}
	for dir, cs := range classes {
		for _, pc := range cs {
			inStage[classKey{pipeline.PolicyDirection(dir), pc.Prefix}] = true
		}
	}
	for k := range c.classes {
		if !inStage[k] {
			delete(c.classes, k)
		}
	}
}
