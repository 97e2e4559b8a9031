package hostnet

import (
	"context"
	"fmt"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
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
