package ovsdb

import (
	"context"
	"fmt"

	"github.com/winnet-io/winnet/internal/ovs/ovsdb/vswitchd"
)

// Snapshot is the rows of the tables the client monitors, as its cache holds them: every bridge,
// port and interface of the switch (winnet's or not), with their external IDs and options.
type Snapshot struct {
	Bridges    []vswitchd.Bridge
	Ports      []vswitchd.Port
	Interfaces []vswitchd.Interface
}

// Snapshot returns the monitored rows; it changes nothing (the support bundle reads it beside the
// agent).
func (c *Client) Snapshot(ctx context.Context) (Snapshot, error) {
	var s Snapshot
	if err := c.ovs.List(ctx, &s.Bridges); err != nil {
		return s, fmt.Errorf("listing OVSDB bridges: %w", err)
	}
	if err := c.ovs.List(ctx, &s.Ports); err != nil {
		return s, fmt.Errorf("listing OVSDB ports: %w", err)
	}
	if err := c.ovs.List(ctx, &s.Interfaces); err != nil {
		return s, fmt.Errorf("listing OVSDB interfaces: %w", err)
	}
	return s, nil
}
