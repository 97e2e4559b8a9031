package hostnet

import (
	"context"
	"fmt"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// WatchLinks subscribes to rtnetlink's link group (RTNLGRP_LINK) in the host's network namespace:
// every RTM_NEWLINK and RTM_DELLINK the kernel sends gives a value.
func (h *netlinkHost) WatchLinks(ctx context.Context) (<-chan struct{}, error) {
	opts := netlink.LinkSubscribeOptions{}
	if h.opts.NetNSPath != "" {
		target, err := netns.GetFromPath(h.opts.NetNSPath)
		if err != nil {
			return nil, fmt.Errorf("watching links: opening network namespace %s: %w", h.opts.NetNSPath, err)
		}
		// The subscription's socket is opened in the namespace before LinkSubscribeWithOptions
		// returns; the handle is not needed afterwards.
		defer target.Close()
		opts.Namespace = &target
	}
	updates := make(chan netlink.LinkUpdate, 64)
	done := make(chan struct{})
	if err := netlink.LinkSubscribeWithOptions(updates, done, opts); err != nil {
		return nil, fmt.Errorf("watching links: subscribing to rtnetlink: %w", err)
	}
	changed := make(chan struct{}, 1)
	stop := context.AfterFunc(ctx, func() { close(done) })
	go func() {
		defer close(changed)
		defer stop()
		// updates is closed once the socket is closed (ctx ended) or failed (its buffer overran).
		for range updates {
			select {
			case changed <- struct{}{}:
			default: // a value is pending: the watcher looks again anyway
			}
		}
	}()
	return changed, nil
}

// WatchAddresses subscribes to rtnetlink's IPv4 and IPv6 address groups and route groups in the
// host's network namespace: every RTM_NEWADDR and RTM_DELADDR, and every RTM_DELROUTE, gives a
// value when its link is one of links'.
func (h *netlinkHost) WatchAddresses(ctx context.Context, links func() []int) (<-chan struct{}, error) {
	var ns *netns.NsHandle
	if h.opts.NetNSPath != "" {
		target, err := netns.GetFromPath(h.opts.NetNSPath)
		if err != nil {
			return nil, fmt.Errorf("watching addresses and routes: opening network namespace %s: %w", h.opts.NetNSPath, err)
		}
		// The subscriptions' sockets are opened in the namespace before the calls return.
		defer target.Close()
		ns = &target
	}
	done := make(chan struct{})
	stop := context.AfterFunc(ctx, func() { close(done) })
	addrs := make(chan netlink.AddrUpdate, 64)
	if err := netlink.AddrSubscribeWithOptions(addrs, done, netlink.AddrSubscribeOptions{Namespace: ns}); err != nil {
		stop()
		return nil, fmt.Errorf("watching addresses: subscribing to rtnetlink: %w", err)
	}
	routes := make(chan netlink.RouteUpdate, 64)
	if err := netlink.RouteSubscribeWithOptions(routes, done, netlink.RouteSubscribeOptions{Namespace: ns}); err != nil {
		if stop() {
			close(done)
		}
		return nil, fmt.Errorf("watching routes: subscribing to rtnetlink: %w", err)
	}
	changed := make(chan struct{}, 1)
	signal := func() {
		select {
		case changed <- struct{}{}:
		default: // a value is pending: the watcher looks again anyway
		}
	}
	go func() {
		defer close(changed)
		defer func() {
			if stop() {
				close(done) // one subscription failed: end the other
			}
		}()
		// Each channel is closed once its socket is closed (ctx ended) or failed.
		for {
			select {
			case u, ok := <-addrs:
				if !ok {
					return
				}
				if watchedLink(links, u.LinkIndex) {
					signal()
				}
			case u, ok := <-routes:
				if !ok {
					return
				}
				if u.Type == unix.RTM_DELROUTE && watchedLink(links, u.LinkIndex) {
					signal()
				}
			}
		}
	}()
	return changed, nil
}
