package ovsdb

// AnyTableChanged exposes the monitor's wake-up for a change to any table, which a transaction waits on.
func (c *Client) AnyTableChanged() <-chan struct{} { return c.tableChanged(anyTable) }

// HoldPortCommits keeps port changes queued, as a transaction in flight does, until release.
func (c *Client) HoldPortCommits() (release func()) {
	c.portMu.Lock()
	return c.portMu.Unlock
}

// QueuedPortChanges is the number of port changes waiting for a transaction.
func (c *Client) QueuedPortChanges() int { return c.portQueue.Len() }

// Transactions counts the transactions that changed the database.
func (c *Client) Transactions() uint64 { return c.transactions.Load() }

// OpenvSwitchChanged exposes the monitor's wake-up for a change to the Open_vSwitch row; updates
// are handled in order, so once it fires every earlier update was handled too.
func (c *Client) OpenvSwitchChanged() <-chan struct{} { return c.tableChanged("Open_vSwitch") }
