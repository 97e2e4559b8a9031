package hostnet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/google/nftables"
	"github.com/vishvananda/netns"
)

// switchPortTable is the nftables netdev table holding one drop-all ingress chain per switch port,
// named chainPrefix and the port's name.
const (
	switchPortTable = "winnet"
	chainPrefix     = "port-"
)

// SetSwitchPort keeps the kernel from processing packets on a port OVS reads (on) or gives the link
// back to the host (off), with a drop-all ingress chain in the netdev table. Each nftables
// transaction that removes a chain waits for an RCU grace period (about 15 ms here) under the
// namespace's nftables lock, so concurrent calls share one transaction (group commit): each call
// queues its change, and whoever takes the lock next commits every queued change at once. If that
// transaction fails, each change is committed on its own, so that only a bad one fails.
//
// The kernel keeps a netdev chain when its device goes away (and hooks it to the next device of
// that name), so every transaction also deletes the chains of links that no longer exist: the
// chain of a Pod's port whose interface went with the Pod's namespace does not outlive it.
func (h *netlinkHost) SetSwitchPort(_ context.Context, linkIndex int, on bool) error {
	l, err := h.link(linkIndex)
	if err != nil {
		return fmt.Errorf("setting switch port: %w", err)
	}
	req := &switchPortReq{name: l.Attrs().Name, on: on, done: make(chan struct{})}
	b := &h.switchPorts
	b.queueMu.Lock()
	b.queued = append(b.queued, req)
	b.queueMu.Unlock()

	b.commitMu.Lock()
	b.queueMu.Lock()
	batch := b.queued
	b.queued = nil
	b.queueMu.Unlock()
	if len(batch) > 0 {
		h.commitSwitchPorts(batch)
	}
	b.commitMu.Unlock()
	<-req.done // committed by this call or by one that took the lock before it
	return req.err
}

// switchPortBatcher queues SetSwitchPort changes for the next nftables transaction.
type switchPortBatcher struct {
	commitMu sync.Mutex // held while a transaction is built and committed
	queueMu  sync.Mutex
	queued   []*switchPortReq
}

// switchPortReq is one SetSwitchPort call waiting for its transaction.
type switchPortReq struct {
	name string
	on   bool
	err  error
	done chan struct{}
}

// commitSwitchPorts commits the changes in one transaction, or one by one if it fails.
func (h *netlinkHost) commitSwitchPorts(batch []*switchPortReq) {
	err := h.applySwitchPorts(batch)
	if err == nil || len(batch) == 1 {
		for _, r := range batch {
			r.err = err
			close(r.done)
		}
		return
	}
	for _, r := range batch {
		r.err = h.applySwitchPorts([]*switchPortReq{r})
		close(r.done)
	}
}

// applySwitchPorts adds or deletes the chains of the requests in one nftables transaction; a chain
// that is already as asked costs nothing.
func (h *netlinkHost) applySwitchPorts(batch []*switchPortReq) error {
	var opts []nftables.ConnOption
	if h.opts.NetNSPath != "" {
		target, err := netns.GetFromPath(h.opts.NetNSPath)
		if err != nil {
			return fmt.Errorf("opening network namespace %s: %w", h.opts.NetNSPath, err)
		}
		defer target.Close()
		opts = append(opts, nftables.WithNetNSFd(int(target)))
	}
	conn, err := nftables.New(opts...)
	if err != nil {
		return fmt.Errorf("opening nftables: %w", err)
	}
	chains, err := conn.ListChainsOfTableFamily(nftables.TableFamilyNetdev)
	if err != nil {
		return fmt.Errorf("listing nftables chains: %w", err)
	}
	existing := map[string]*nftables.Chain{}
	for _, c := range chains {
		if c.Table.Name == switchPortTable {
			existing[c.Name] = c
		}
	}
	// Without a complete list of links, no chain counts as orphaned this time.
	links, linksErr := retryDump(h.nl.LinkList)
	present := map[string]bool{}
	for _, l := range links {
		present[chainPrefix+l.Attrs().Name] = true
	}
	table := &nftables.Table{Family: nftables.TableFamilyNetdev, Name: switchPortTable}
	changed := false
	for _, r := range batch {
		chainName := chainPrefix + r.name
		c, exists := existing[chainName]
		switch {
		case r.on && !exists:
			drop := nftables.ChainPolicyDrop
			conn.AddTable(table)
			c = &nftables.Chain{
				Name: chainName, Table: table, Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookIngress,
				Priority: nftables.ChainPriorityFilter, Device: r.name, Policy: &drop,
			}
			conn.AddChain(c)
			existing[chainName] = c
		case !r.on && exists:
			conn.DelChain(c)
			delete(existing, chainName)
		default:
			continue
		}
		changed = true
	}
	for chainName, c := range existing {
		if linksErr == nil && strings.HasPrefix(chainName, chainPrefix) && !present[chainName] && !requested(batch, chainName) {
			conn.DelChain(c) // its link is gone
			changed = true
		}
	}
	if !changed {
		return nil
	}
	if err := conn.Flush(); err != nil {
		if len(batch) == 1 {
			return fmt.Errorf("setting %q as a switch port (%t): %w", batch[0].name, batch[0].on, err)
		}
		return errors.Join(fmt.Errorf("setting %d switch ports in one transaction", len(batch)), err)
	}
	return nil
}

// requested reports whether a request of the batch turns the chain on.
func requested(batch []*switchPortReq, chainName string) bool {
	for _, r := range batch {
		if r.on && chainPrefix+r.name == chainName {
			return true
		}
	}
	return false
}
