package hostnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// foreverLifetime is the valid lifetime the kernel reports for a static address.
const foreverLifetime = 0xFFFFFFFF

func (h *netlinkHost) RenameLink(ctx context.Context, linkIndex int, name string) error {
	l, err := h.link(linkIndex)
	if err != nil {
		return fmt.Errorf("renaming link to %q: %w", name, err)
	}
	old := l.Attrs().Name
	if old == name {
		return nil
	}
	// The kernel renames only links that are down, and taking a link down deletes the routes
	// through it and its IPv6 addresses: read the configuration first and put it back, so that
	// the rename keeps it as it does on Windows.
	cfg, err := h.ReadIPConfig(ctx, linkIndex)
	if err != nil {
		return fmt.Errorf("renaming %q to %q: %w", old, name, err)
	}
	wasUp := l.Attrs().Flags&net.FlagUp != 0
	if wasUp {
		if err := h.nl.LinkSetDown(l); err != nil {
			return fmt.Errorf("renaming %q to %q: setting it down: %w", old, name, err)
		}
	}
	if err := h.nl.LinkSetName(l, name); err != nil {
		if wasUp {
			_ = h.nl.LinkSetUp(l)
		}
		return fmt.Errorf("renaming %q to %q: %w", old, name, err)
	}
	if wasUp {
		if err := h.nl.LinkSetUp(l); err != nil {
			return fmt.Errorf("renaming %q to %q: setting it up: %w", old, name, err)
		}
	}
	if !wasUp {
		return nil
	}
	if err := h.ApplyIPConfig(ctx, linkIndex, cfg); err != nil {
		return fmt.Errorf("renaming %q to %q: %w", old, name, err)
	}
	return nil
}

func (h *netlinkHost) ReadIPConfig(ctx context.Context, linkIndex int) (IPConfig, error) {
	l, err := h.link(linkIndex)
	if err != nil {
		return IPConfig{}, fmt.Errorf("reading IP configuration: %w", err)
	}
	addrs, err := retryDump(func() ([]netlink.Addr, error) { return h.nl.AddrList(l, netlink.FAMILY_ALL) })
	if err != nil {
		return IPConfig{}, fmt.Errorf("listing addresses of %q: %w", l.Attrs().Name, err)
	}
	var cfg IPConfig
	for _, a := range addrs {
		p, ok := toPrefix(a.IPNet)
		if !ok || !Movable(p) {
			continue
		}
		cfg.Addresses = append(cfg.Addresses, p)
		if p.Addr().Is4() && a.ValidLft != foreverLifetime && a.ValidLft > 0 {
			cfg.DHCP = true
		}
	}
	if cfg.Routes, err = h.Routes(ctx, RouteFilter{LinkIndex: linkIndex}); err != nil {
		return IPConfig{}, fmt.Errorf("reading IP configuration of %q: %w", l.Attrs().Name, err)
	}
	return cfg, nil
}

func (h *netlinkHost) ApplyIPConfig(ctx context.Context, linkIndex int, cfg IPConfig) error {
	l, err := h.link(linkIndex)
	if err != nil {
		return fmt.Errorf("applying IP configuration: %w", err)
	}
	name := l.Attrs().Name
	if err := h.SetUp(ctx, linkIndex); err != nil {
		return err
	}
	existing, err := h.addresses(l)
	if err != nil {
		return err
	}
	for _, a := range cfg.Addresses {
		if !cfg.DHCP || !a.Addr().Is4() {
			if err := h.EnsureAddress(ctx, linkIndex, a); err != nil {
				return fmt.Errorf("applying IP configuration to %q: %w", name, err)
			}
			continue
		}
		if slices.Contains(existing, a) {
			continue
		}
		// No DHCP client runs here: the lease is re-added as the server would give it again.
		lft := int(DHCPLeaseLifetime.Seconds())
		nl := &netlink.Addr{IPNet: toIPNet(a), ValidLft: lft, PreferedLft: lft}
		if err := h.nl.AddrReplace(l, nl); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("applying IP configuration to %q: adding leased address %s: %w", name, a, err)
		}
	}
	return applyRoutes(ctx, h, linkIndex, cfg.Routes)
}
