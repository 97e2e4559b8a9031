package ovsdb

// InterfaceChanged exposes the monitor's Interface wake-up to the external tests.
func (c *Client) InterfaceChanged() <-chan struct{} { return c.interfaceChanged() }
