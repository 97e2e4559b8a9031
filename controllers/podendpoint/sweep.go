package podendpoint

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/winnet-io/winnet/controllers/nodenetwork"
	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/internal/pipeline"
)

// removeOrphanedFlows removes the Pod flows of ofports no attachment has.
func (p *Pods) removeOrphanedFlows(ctx context.Context, n node, ofports map[uint64]bool) error {
	p.flowMu.Lock()
	defer p.flowMu.Unlock()
	done := map[uint64]bool{}
	for _, f := range n.realized.Flows.Installed(pipeline.CategoryPod) {
		obj := f.Cookie & openflow.ObjectMask
		if ofports[obj] || done[obj] {
			continue
		}
		done[obj] = true
		ctrl.LoggerFrom(ctx).Info("Removing orphaned Pod flows", "ofPort", obj)
		if _, err := n.realized.Flows.SyncObject(ctx, pipeline.CategoryPod, obj, nil); err != nil {
			return fmt.Errorf("removing orphaned flows of ofport %d: %w", obj, err)
		}
		delete(p.ofportOwner, int32(obj))
	}
	return nil
}

// Start is the agent's start-up pass over Pod attachments, run by the manager. When the node network
// is Ready it removes orphans and wakes the PodEndpoint reconciler for every attachment, which tears
// down those whose Pod is gone and repairs the others. On that bridge connection, and on every later
// one, it installs every attachment's flows and reports them to the node network's State, which
// deletes the previous round's flows once every flow owner has reported.
func (p *Pods) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("podendpoint")
	ctx = ctrl.LoggerInto(ctx, log)
	stale := newStaleCounter(p.opts.State)
	staleConnections.sources.Add(stale)
	defer staleConnections.sources.Remove(stale)
	changes := p.opts.State.Subscribe()
	started := false
	var synced *openflow.Bridge // the connection every attachment's flows were installed on
	for {
		n, err := p.node(ctx)
		if err == nil && !started {
			p.startUp(ctx, n)
			started = true
		}
		if err == nil && n.realized.Flows != synced {
			if err = p.installAllFlows(ctx, n); err != nil {
				log.Error(err, "Installing the flows of every Pod attachment failed; retrying")
			} else {
				synced = n.realized.Flows
				p.opts.State.FlowsSynced(ctx, nodenetwork.PodFlows, synced)
			}
		}
		var retry <-chan time.Time
		if err != nil {
			retry = time.After(200 * time.Millisecond)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changes:
		case <-retry:
		}
	}
}

// startUp removes orphans and wakes the PodEndpoint reconciler for every attachment.
func (p *Pods) startUp(ctx context.Context, n node) {
	log := ctrl.LoggerFrom(ctx)
	p.sweep.Lock()
	err := p.removeOrphans(ctx, n)
	p.sweep.Unlock()
	if err != nil {
		log.Error(err, "Removing orphaned Pod attachments at start-up failed; GC retries")
	}
	for _, a := range p.opts.Store.List() {
		if a.WaitingForVNIC && !a.Deleting {
			p.waitVNIC(a) // the agent restarted before the vNIC appeared
		}
		p.notify(a.Pod())
	}
	log.Info("Reconciled Pod attachments at start-up", "attachments", len(p.opts.Store.List()))
}

// installAllFlows installs the flows of every attachment but those being detached on the bridge
// connection. It holds the sweep lock, so that no attachment is made or detached meanwhile.
func (p *Pods) installAllFlows(ctx context.Context, n node) error {
	p.sweep.Lock()
	defer p.sweep.Unlock()
	attachments := p.opts.Store.List()
	var errs []error
	for _, a := range attachments {
		if a.Deleting || a.OFPort <= 0 {
			continue
		}
		_, err := p.installFlows(ctx, n.realized, a)
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	ctrl.LoggerFrom(ctx).Info("Installed the flows of every Pod attachment", "attachments", len(attachments), "round", n.realized.Flows.Round())
	return nil
}

// sameID compares HNS IDs, which are GUIDs compared case-insensitively.
func sameID(a, b string) bool { return strings.EqualFold(a, b) }
