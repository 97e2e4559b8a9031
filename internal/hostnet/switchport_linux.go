package hostnet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netns"

	"github.com/winnet-io/winnet/internal/groupcommit"
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
// that name): the chains of links that no longer exist are deleted in the background, with the
// released ones (ReleaseSwitchPort), so that neither a CNI ADD nor a DEL waits for a grace period.
func (h *netlinkHost) SetSwitchPort(_ context.Context, linkIndex int, on bool) error {
	l, err := h.link(linkIndex)
	if err != nil {
		return fmt.Errorf("setting switch port: %w", err)
	}
	req := &switchPortReq{name: l.Attrs().Name, on: on}
	h.switchPorts.queue.Do(&h.switchPorts.commitMu, req, h.commitSwitchPorts)
	return req.err
}

// switchPortBatcher queues SetSwitchPort changes for the next nftables transaction, and released
// chains for the next background sweep.
type switchPortBatcher struct {
	commitMu sync.Mutex // held while a transaction is built and committed
	queue    groupcommit.Queue[*switchPortReq]

	releaseMu      sync.Mutex
	released       map[string]bool // link names whose chains the next sweep deletes
	sweepScheduled bool

	linkDumps atomic.Uint64 // listings of the links, for the orphaned chains
}

// sweepDelay is how long released and orphaned chains wait for the sweep that deletes them: one
// transaction, and one grace period, for all that were released meanwhile.
const sweepDelay = 200 * time.Millisecond

// ReleaseSwitchPort schedules the deletion of the link's chain.
func (h *netlinkHost) ReleaseSwitchPort(_ context.Context, name string) error {
	b := &h.switchPorts
	b.releaseMu.Lock()
	defer b.releaseMu.Unlock()
	if b.released == nil {
		b.released = map[string]bool{}
	}
	b.released[name] = true
	h.scheduleSweepLocked()
	return nil
}

// scheduleSweepLocked starts the timer of the next sweep unless it runs already; the caller holds
// releaseMu.
func (h *netlinkHost) scheduleSweepLocked() {
	if !h.switchPorts.sweepScheduled {
		h.switchPorts.sweepScheduled = true
		time.AfterFunc(sweepDelay, h.sweepSwitchPorts)
	}
}

// sweepSwitchPorts deletes the released chains and those whose link is gone, in one transaction
// (one by one if it fails). What it cannot delete, the next sweep tries again if the link is gone.
func (h *netlinkHost) sweepSwitchPorts() {
	b := &h.switchPorts
	b.commitMu.Lock()
	defer b.commitMu.Unlock()
	b.releaseMu.Lock()
	names := b.released
	b.released = nil
	b.sweepScheduled = false
	b.releaseMu.Unlock()
	batch := make([]*switchPortReq, 0, len(names))
	for name := range names {
		batch = append(batch, &switchPortReq{name: name, on: false})
	}
	h.applyBatch(batch, true)
}

// switchPortReq is one SetSwitchPort call waiting for its transaction, and then its result.
type switchPortReq struct {
	name string
	on   bool
	err  error
}

// commitSwitchPorts commits SetSwitchPort's queued changes.
func (h *netlinkHost) commitSwitchPorts(batch []*switchPortReq) { h.applyBatch(batch, false) }

// applyBatch applies the changes in one transaction, or one by one if it fails, and records each
// one's outcome.
func (h *netlinkHost) applyBatch(batch []*switchPortReq, sweep bool) {
	err := h.applySwitchPorts(batch, sweep)
	if err == nil || len(batch) == 1 {
		for _, r := range batch {
			r.err = err
		}
		return
	}
	for _, r := range batch {
		r.err = h.applySwitchPorts([]*switchPortReq{r}, false)
	}
}

// applySwitchPorts adds or deletes the chains of the requests in one nftables transaction; a chain
// that is already as asked costs nothing. Turning a chain on cancels its release. Chains whose link
// is gone are deleted when sweep is set, and left to a background sweep otherwise; the caller
// holds commitMu.
func (h *netlinkHost) applySwitchPorts(batch []*switchPortReq, sweep bool) error {
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
	table := &nftables.Table{Family: nftables.TableFamilyNetdev, Name: switchPortTable}
	changed := false
	for _, r := range batch {
		chainName := chainPrefix + r.name
		c, exists := existing[chainName]
		if r.on {
			h.switchPorts.releaseMu.Lock()
			delete(h.switchPorts.released, r.name)
			h.switchPorts.releaseMu.Unlock()
		}
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
	if !changed && !sweep {
		// Every port is as asked (a Pod's periodic repair): the links are listed, to find the
		// chains whose link went, only with a change or a sweep. A listing per call made most of an
		// idle agent's allocations with 30 Pods (bench-scale, issue 64).
		return nil
	}
	// Without a complete list of links, no chain counts as orphaned this time.
	h.switchPorts.linkDumps.Add(1)
	links, linksErr := retryDump(h.nl.LinkList)
	present := map[string]bool{}
	for _, l := range links {
		present[chainPrefix+l.Attrs().Name] = true
	}
	for chainName, c := range existing {
		if linksErr != nil || !strings.HasPrefix(chainName, chainPrefix) || present[chainName] || requested(batch, chainName) {
			continue
		}
		if !sweep {
			h.switchPorts.releaseMu.Lock()
			h.scheduleSweepLocked() // its link is gone
			h.switchPorts.releaseMu.Unlock()
			break
		}
		conn.DelChain(c) // its link is gone
		changed = true
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
