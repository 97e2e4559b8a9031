package ovsdb

// InterfaceChanged exposes the monitor's Interface wake-up to the external tests.
func (c *Client) InterfaceChanged() <-chan struct{} { return c.interfaceChanged() }

// AnyTableChanged exposes the monitor's wake-up for a change to any table, which a transaction waits on.
func (c *Client) AnyTableChanged() <-chan struct{} { return c.tableChanged(anyTable) }
