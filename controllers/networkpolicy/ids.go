package networkpolicy

// conjIDs gives every rule (RuleKey) a conjunction id that stays the same while the rule exists,
// so that a change elsewhere does not rewrite its flows. Ids are not reused while the agent runs.
type conjIDs struct {
	ids  map[RuleKey]uint32
	next uint32
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

// keepOnly forgets the ids of rules no longer compiled (keep holds those of the last pass, the
// ids of rules merged into others included).
func (c *conjIDs) keepOnly(keep map[uint32]bool) {
	for k, id := range c.ids {
		if !keep[id] {
			delete(c.ids, k)
		}
	}
}
