package nodenetwork

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/winnet-io/winnet/internal/hns"
	"github.com/winnet-io/winnet/internal/hostnet"
	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/internal/ovs/ovsdb"
)

// Host is the node's host plumbing the reconciler converges.
type Host struct {
	HNS   hns.Interface
	OVSDB *ovsdb.Client
	Net   hostnet.Interface
	// StateDir is where the agent records the uplink adapter's IP configuration before HNS takes it
	// (see AdapterRecordFile); empty keeps the record in memory only.
	StateDir string
	// OpenFlowAddress returns the OpenFlow management socket (named pipe on Windows) of a bridge;
	// nil or "" means the platform default.
	OpenFlowAddress func(bridge string) string
}

// flowConn holds the OpenFlow connection to the node's bridge, opened once the bridge exists.
type flowConn struct {
	mu     sync.Mutex
	bridge string
	conn   *openflow.Bridge
}

// get returns the connection to bridge, connecting on first use.
func (c *flowConn) get(ctx context.Context, h Host, bridge string) (*openflow.Bridge, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != nil && c.bridge == bridge {
		return c.conn, nil
	}
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
	addr := ""
	if h.OpenFlowAddress != nil {
		addr = h.OpenFlowAddress(bridge)
	}
	conn, err := openflow.Connect(ctx, openflow.Options{Bridge: bridge, Address: addr, Rounds: h.OVSDB})
	if err != nil {
		return nil, fmt.Errorf("connecting OpenFlow to bridge %q: %w", bridge, err)
	}
	c.conn, c.bridge = conn, bridge
	return conn, nil
}

// close drops the connection (the bridge is being deleted).
func (c *flowConn) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
}

// waitLink waits for an interface OVS creates (the bridge's LOCAL port, an internal port) to appear.
func waitLink(ctx context.Context, h hostnet.Links, name string) (hostnet.Link, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		l, err := h.LinkByName(ctx, name)
		if err == nil || !errors.Is(err, hostnet.ErrNotFound) {
			return l, err
		}
		select {
		case <-ctx.Done():
			return hostnet.Link{}, fmt.Errorf("waiting for interface %q: %w", name, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitLinkGone waits for an interface OVS removes (the LOCAL port of a deleted bridge) to disappear,
// so that a bridge recreated under the same name is not confused with the old one.
func waitLinkGone(ctx context.Context, h hostnet.Links, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		_, err := h.LinkByName(ctx, name)
		if errors.Is(err, hostnet.ErrNotFound) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for interface %q to go away: %w", name, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// addressOf returns the link's address holding ip, with its prefix length; invalid when none does.
func addressOf(ctx context.Context, h hostnet.Links, link int, ip netip.Addr) (netip.Prefix, error) {
	addrs, err := h.Addresses(ctx, link)
	if err != nil {
		return netip.Prefix{}, err
	}
	for _, a := range addrs {
		if a.Addr() == ip {
			return a, nil
		}
	}
	return netip.Prefix{}, nil
}
