package podendpoint

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/winnet-io/winnet/internal/hostnet"
	"github.com/winnet-io/winnet/internal/ovs/ovsdb"
)

// The Pod's vNIC comes after ADD. With containerd on Windows the endpoint's vNIC appears on the
// switch only when the runtime starts the sandbox, after ADD returned (containerd issue 4851; Antrea
// PR 6019). So ADD creates the OVS port unbound (type "": on Windows an internal port created before
// the vNIC exists makes OVS create a vNIC of its own, which never carries the Pod's traffic; Antrea
// PRs 1781 and 5947) with the Pod's flows already installed for the requested ofport, records the
// attachment as waiting for its vNIC, and returns (the steps of lifecycle.go). A waiter per
// attachment, started by the vNIC step, then watches for the vNIC; once it exists the port is bound (type internal
// on Windows), gets its ofport and forwards.
// Drift repair, CHECK and GC know the waiting state and leave such a Pod alone; a vNIC that never
// appears is reported on the PodEndpoint and cleaned up by DEL.

// DefaultVNICTimeout bounds how long the agent waits for a Pod's vNIC after ADD, as Antrea does.
const DefaultVNICTimeout = 60 * time.Second

// A waiter looks for its vNIC whenever a link of the host is added or changes, woken by one watch
// of the host's links that all waiters share (hostnet.Interface.WatchLinks: rtnetlink on Linux).
// Where the platform has no such watch (Windows, where Antrea's agent polls for the vNIC too) or it
// cannot start, a waiter looks every vnicPoll. vnicPoll is also how soon a failed bind is tried
// again, and vnicLatePoll how often a waiter polls once its wait timed out.
const (
	vnicPoll     = 5 * time.Millisecond
	vnicLatePoll = time.Second
)

// podPortTypeUnbound is the type of a Pod's port before its vNIC exists: "" in OVS, which binds
// to nothing until an interface of the port's name appears.
const podPortTypeUnbound = ovsdb.PortTypeSystem

// waitVNIC starts the waiter of the attachment's vNIC (see above), unless one runs. The waiter
// ends when the vNIC is bound, when the wait times out, or when the attachment is detached.
func (p *Pods) waitVNIC(a *Attachment) {
	p.vnicMu.Lock()
	defer p.vnicMu.Unlock()
	if _, running := p.vnicWaiters[a.SandboxID]; running {
		return
	}
	ctx, cancel := context.WithCancel(p.baseCtx)
	p.vnicWaiters[a.SandboxID] = cancel
	since := a.Created
	if since.IsZero() {
		since = time.Now()
	}
	go p.runVNICWaiter(ctx, a.SandboxID, a.EndpointName, since)
}

// stopVNICWaiter stops the attachment's waiter, if one runs, and the watch of the host's links
// with the last waiter.
func (p *Pods) stopVNICWaiter(sandbox string) {
	p.vnicMu.Lock()
	defer p.vnicMu.Unlock()
	if cancel, ok := p.vnicWaiters[sandbox]; ok {
		cancel()
		delete(p.vnicWaiters, sandbox)
	}
	if len(p.vnicWaiters) == 0 {
		p.links.stop() // the next waiter starts it again
	}
}

func (p *Pods) runVNICWaiter(ctx context.Context, sandbox, port string, since time.Time) {
	defer p.stopVNICWaiter(sandbox)
	log := ctrl.LoggerFrom(ctx).WithValues("sandbox", sandbox, "port", port)
	ctx = ctrl.LoggerInto(ctx, log)
	if !p.awaitPolicies(ctx, sandbox) {
		return
	}
	deadline := since.Add(p.opts.VNICTimeout)
	missing := false
	for {
		changed, watching := p.links.next(ctx, p.opts.Host.Net) // before the look, so a change after it is not missed
		retry := false
		_, err := p.opts.Host.Net.LinkByName(ctx, vnicName(port))
		switch {
		case err == nil:
			if err := p.bindVNIC(ctx, sandbox, time.Now()); err != nil {
				if ctx.Err() != nil {
					return
				}
				log.Error(err, "Binding the Pod's vNIC to its OVS port failed; retrying")
				retry = true
				break
			}
			return
		case !errors.Is(err, hostnet.ErrNotFound):
			log.Error(err, "Looking for the Pod's vNIC failed; retrying")
			retry = true
		}
		if !missing && time.Now().After(deadline) {
			// Reported once; a vNIC that comes late is still bound.
			p.markVNICMissing(ctx, sandbox)
			missing = true
		}
		wait := vnicPoll
		switch {
		case retry:
		case missing:
			wait = vnicLatePoll
		case watching:
			wait = time.Until(deadline) // the watch wakes the waiter before, when the vNIC appears
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-changed:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// linkWatch shares one watch of the host's links among the vNIC waiters.
type linkWatch struct {
	mu sync.Mutex
	// started records that a watch was started; running that it runs; cancel ends it. changed is
	// closed, and replaced, on every change the watch reports and when it ends.
	started, running bool
	cancel           context.CancelFunc
	changed          chan struct{}
}

// next returns a channel that is closed at the next change of the host's links, and whether a
// watch reports them; it starts the watch on first use, and again after it ended.
func (w *linkWatch) next(ctx context.Context, h hostnet.Watches) (<-chan struct{}, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.changed == nil {
		w.changed = make(chan struct{})
	}
	if !w.started {
		w.started = true
		wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		updates, err := h.WatchLinks(wctx)
		if err != nil {
			cancel()
			if !errors.Is(err, errors.ErrUnsupported) {
				ctrl.LoggerFrom(ctx).Error(err, "Watching the host's links failed; waiting for Pods' vNICs by polling")
			}
			return w.changed, false
		}
		w.running, w.cancel = true, cancel
		go w.relay(updates)
	}
	return w.changed, w.running
}

// relay wakes the waiters on every update until the watch ends; then they look once more, and the
// next of them starts a new watch.
func (w *linkWatch) relay(updates <-chan struct{}) {
	for range updates {
		w.wake()
	}
	w.mu.Lock()
	w.started, w.running = false, false
	if w.cancel != nil {
		w.cancel()
		w.cancel = nil
	}
	w.mu.Unlock()
	w.wake()
}

// stop ends the watch, when no waiter needs it.
func (w *linkWatch) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cancel != nil {
		w.cancel()
		w.cancel = nil
	}
}

func (w *linkWatch) wake() {
	w.mu.Lock()
	defer w.mu.Unlock()
	close(w.changed)
	w.changed = make(chan struct{})
}

// bindVNIC binds the vNIC that appeared to the attachment's port: it becomes a switch port, the
// port takes its bound type and OVS gives it the ofport the flows were installed for (the flows
// follow when OVS gives another), and the Pod's interface gets its MTU.
func (p *Pods) bindVNIC(ctx context.Context, sandbox string, appeared time.Time) error {
	p.sweep.RLock()
	defer p.sweep.RUnlock()
	defer p.locks.Lock(sandbox)()
	a, ok := p.opts.Store.Get(sandbox)
	if !ok || a.Deleting || !a.WaitingForVNIC {
		return nil // detached, or bound by a repair meanwhile
	}
	n, err := p.node(ctx)
	if err != nil {
		return err
	}
	requested := a.OFPort
	a.Bridge = n.bridge
	// OVS tried to open the port's interface before the vNIC existed and recorded the failure;
	// the write that binds the port makes it try again, and createPort waits for that pass.
	wctx, cancel := context.WithTimeout(ctx, portTimeout)
	_, err = p.createPort(wctx, a, true)
	cancel()
	if err != nil {
		return err
	}
	ofport, err := p.waitPort(ctx, a)
	if err != nil {
		return err
	}
	switch gate := p.policyGate(); {
	case gate != nil && (ofport != requested || a.PolicyPending):
		if err := p.moveFlowsGated(ctx, n, a, ofport, gate); err != nil {
			return err
		}
	case ofport != requested:
		if err := p.moveFlows(ctx, n, a, ofport); err != nil {
			return err
		}
	}
	if err := p.configurePodInterface(ctx, a); err != nil {
		return err
	}
	pending := a.WaitingForVNIC && p.policyGate() != nil
	a.WaitingForVNIC, a.VNICMissing, a.PolicyPending = false, false, false
	if pending {
		// The Pod's policies hold (awaitPolicies): its flows stop refusing what is sent to it.
		if _, err := p.installFlows(ctx, n.realized, a); err != nil {
			a.WaitingForVNIC = true
			return err
		}
	}
	took := time.Since(appeared)
	a.VNICToForwarding = took.Round(time.Microsecond)
	if err := p.opts.Store.Put(a); err != nil {
		return err
	}
	observeVNIC(took)
	p.markVerified(a.SandboxID, n.realized.Flows)
	ctrl.LoggerFrom(ctx).V(1).Info("The Pod's vNIC forwards", "ofPort", a.OFPort, "vnicToForwarding", took)
	p.notify(a.Pod())
	return nil
}

// awaitPolicies waits, before the port is bound, until the NetworkPolicy flows for the Pod are
// committed (PolicyGate): a Pod that policies select is isolated from its first packet. The port
// is unbound meanwhile, so nothing reaches the Pod. After Options.PolicyTimeout the attachment
// records PolicyPending (its PodEndpoint says why) and the wait goes on: the Pod stays isolated
// until its policies hold. It returns false when the waiter is stopped.
func (p *Pods) awaitPolicies(ctx context.Context, sandbox string) bool {
	gate := p.policyGate()
	if gate == nil {
		return true
	}
	a, ok := p.opts.Store.Get(sandbox)
	if !ok || a.Deleting || !a.WaitingForVNIC {
		return true // bindVNIC finds out
	}
	pod, ofport := a.Pod(), a.OFPort
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, p.opts.PolicyTimeout)
	err := gate.WaitPolicies(wctx, pod, ofport)
	cancel()
	if err != nil && ctx.Err() == nil {
		p.setPolicyPending(ctx, sandbox, true)
		err = gate.WaitPolicies(ctx, pod, ofport)
	}
	if err != nil {
		return false // stopped
	}
	if a.PolicyPending {
		p.setPolicyPending(ctx, sandbox, false)
	}
	observePolicyWait(time.Since(start))
	ctrl.LoggerFrom(ctx).V(1).Info("The Pod's NetworkPolicy flows are committed; binding its port when its vNIC appears", "waited", time.Since(start))
	return true
}

// moveFlowsGated moves the flows of a Pod whose port OVS gave another ofport than requested, when
// policy gates new Pods: the policies were compiled for the requested ofport, so the Pod's flows
// (without which nothing reaches it, or leaves it) go, the attachment records the new ofport (the
// next policy pass compiles them for it), and the flows come back at the new ofport once that pass
// is committed. The caller holds the sandbox's lock, so a DEL waits for this (at most
// PolicyTimeout); past it the attachment stays PolicyPending with no flows and the bind is
// retried, which ends here again.
func (p *Pods) moveFlowsGated(ctx context.Context, n node, a *Attachment, ofport int32, gate PolicyGate) error {
	if a.OFPort != ofport {
		ctrl.LoggerFrom(ctx).Info("OVS gave the Pod's port another ofport than requested; its flows wait for its NetworkPolicy flows there", "port", a.EndpointName, "requested", a.OFPort, "ofPort", ofport)
		if err := p.removeFlows(ctx, a.OFPort, a.SandboxID); err != nil {
			return err
		}
		p.releaseOFPort(a.OFPort, a.SandboxID)
		a.OFPort, a.PolicyPending = ofport, true
		if err := p.opts.Store.Put(a); err != nil {
			return err
		}
		p.notify(a.Pod())
	}
	wctx, cancel := context.WithTimeout(ctx, p.opts.PolicyTimeout)
	err := gate.WaitPolicies(wctx, a.Pod(), ofport)
	cancel()
	if err != nil {
		return fmt.Errorf("waiting for the NetworkPolicy flows of the Pod at ofport %d: %w", ofport, err)
	}
	_, err = p.installFlows(ctx, n.realized, a)
	return err
}

// setPolicyPending records whether the Pod's port still waits for its NetworkPolicy flows.
func (p *Pods) setPolicyPending(ctx context.Context, sandbox string, pending bool) {
	p.sweep.RLock()
	defer p.sweep.RUnlock()
	defer p.locks.Lock(sandbox)()
	a, ok := p.opts.Store.Get(sandbox)
	if !ok || a.Deleting || a.PolicyPending == pending {
		return
	}
	a.PolicyPending = pending
	if err := p.opts.Store.Put(a); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Recording the wait for the Pod's NetworkPolicy flows failed")
	}
	if pending {
		ctrl.LoggerFrom(ctx).Info("The Pod's NetworkPolicy flows are not committed yet; its port stays unbound", "timeout", p.opts.PolicyTimeout)
	}
	p.notify(a.Pod())
}

// markVNICMissing records that the vNIC did not appear in time; the PodEndpoint says so, and DEL
// removes the attachment as usual.
func (p *Pods) markVNICMissing(ctx context.Context, sandbox string) {
	p.sweep.RLock()
	defer p.sweep.RUnlock()
	defer p.locks.Lock(sandbox)()
	a, ok := p.opts.Store.Get(sandbox)
	if !ok || a.Deleting || !a.WaitingForVNIC || a.VNICMissing {
		return
	}
	a.VNICMissing = true
	if err := p.opts.Store.Put(a); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Recording a missing vNIC failed")
	}
	ctrl.LoggerFrom(ctx).Info("The Pod's vNIC did not appear; the runtime's DEL removes the attachment", "timeout", p.opts.VNICTimeout)
	p.notify(a.Pod())
}
