package podendpoint

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/cni/ipam"
	"github.com/winnet-io/winnet/internal/hns"
)

// The lifecycle of a Pod's attachment: one ordered list of steps, podSteps, that every path drives.
//
//   - ADD (attach) runs each step's do in order; when one fails it undoes, in reverse, every step it
//     began (each undo is idempotent and does nothing for what was not made).
//   - DEL (detach), and the PodEndpoint reconciler's teardown, record that the attachment is being
//     detached, then run every undo in reverse, stopping at the first failure so that a repeated DEL
//     finishes the work; the attachment is forgotten once every undo succeeded.
//   - CHECK (verify) runs every check in order and reports every problem.
//   - Drift repair (the PodEndpoint reconciler, an ADD of an attached sandbox) runs every repair in
//     order.
//   - GC and start-up (removeOrphans) run every step's orphans in reverse order, as DEL does.
//
// A step may start work that a later step waits for (podRun.start and podRun.wait): ADD installs the
// flows while the endpoint is attached and the port created, and DEL removes the flows while the port
// goes. The vNIC step's do records the attachment and starts the waiter that binds the port once the
// vNIC appears (see vnic.go); an attachment waiting for its vNIC is a state every check and repair
// knows, and the port's repair leaves such a port to its waiter. Repair installs missing flows before
// it repairs the port, and moves them when the port's ofport or bridge changed.
//
// The caller holds the sandbox's lock and the sweep lock for reading (for writing in GC and
// start-up).

// podStep is one step of a Pod's attachment. Any of its functions may be nil: nothing to do.
type podStep struct {
	// name names the step in logs.
	name string
	// addStep and delStep are the step's labels in winnet_cni_step_duration_seconds for ADD and
	// DEL; without one the step's time counts toward the next label recorded (work a step starts is
	// recorded under the label it is started with, when it is waited for).
	addStep, delStep string
	// do makes the step's part of a new attachment (ADD).
	do func(ctx context.Context, r *podRun) error
	// undo removes it; it is idempotent and does nothing for what does not exist (DEL, rollback).
	undo func(ctx context.Context, r *podRun) error
	// check reports how the host differs from the attachment (CHECK).
	check func(ctx context.Context, r *podRun) []string
	// repair converges the host toward the attachment and returns the reasons of what it repaired.
	repair func(ctx context.Context, r *podRun) ([]string, error)
	// orphans removes what the step makes but no attachment records (GC, start-up).
	orphans func(ctx context.Context, s *orphanSweep)
}

// podSteps is a Pod's attachment, in the order ADD makes it.
var podSteps = []podStep{
	{
		// An address from host-local's allocator, in the agent. It goes back last: HNS may refuse an address an
		// endpoint still has.
		name: "address", addStep: "ipam", delStep: "ipam",
		do: doAddress, undo: undoAddress, check: checkAddress, orphans: orphanedAddresses,
	},
	{
		// The Pod's hostPorts (runtimeConfig.portMappings) claimed on the node and recorded
		// (hostports.go), before anything else is made: a conflict costs only the address.
		name: "hostPorts",
		do:   doHostPorts, undo: undoHostPorts, orphans: orphanedHostPorts,
	},
	{
		// The HNS endpoint, with the Pod's address and DNS settings.
		name: "endpoint", addStep: "endpoint", delStep: "endpoint",
		do: doEndpoint, undo: undoEndpoint, check: checkEndpoint, repair: repairEndpoint, orphans: orphanedEndpoints,
	},
	{
		// The endpoint attached to the Pod's network namespace; it goes with the endpoint.
		name: "namespace",
		do:   doNamespace, check: checkNamespace, repair: repairNamespace,
	},
	{
		// The Pod's flows for the ofport the agent requests for its port; the ofport is free for
		// another Pod once the flows and the port are gone.
		name: "flows", delStep: "flows+port",
		do: doFlows, undo: undoFlows, check: checkFlows, repair: repairFlows, orphans: orphanedFlows,
	},
	{
		// The OVS port of the endpoint's name, unbound until the vNIC appears.
		name: "port", addStep: "port",
		do: doPort, undo: undoPort, check: checkPort, repair: repairPort, orphans: orphanedPorts,
	},
	{
		// The vNIC binding: the attachment is recorded as waiting for its vNIC and a waiter binds
		// the port once the vNIC appears (vnic.go).
		name: "vnic", addStep: "store",
		do: doVNIC, undo: undoVNIC, repair: repairVNIC,
	},
}

// podRun is one pass of the lifecycle over one attachment.
type podRun struct {
	p *Pods
	n node
	a *Attachment
	c *call // ADD only
	// steps times ADD and DEL; nil otherwise.
	steps *stepTimer
	// ep is the endpoint the endpoint step made or found, for the steps after it.
	ep *hns.Endpoint
	// changed records that a repair changed the attachment, which the vNIC step stores.
	changed bool
	// rollingBack is set while a failed ADD is undone.
	rollingBack bool
	pending     []pendingWork
}

// pendingWork is work a step started and a later step waits for.
type pendingWork struct {
	step string
	done chan error
}

// start runs f alongside the steps that follow; step labels its time when it is waited for.
func (r *podRun) start(step string, f func() error) {
	done := make(chan error, 1)
	go func() { done <- f() }()
	r.pending = append(r.pending, pendingWork{step: step, done: done})
}

// wait waits for the started work labelled step, or for all of it without a label, records its
// time and returns the first error.
func (r *podRun) wait(step ...string) error {
	var first error
	rest := r.pending[:0]
	for _, w := range r.pending {
		if len(step) > 0 && w.step != step[0] {
			rest = append(rest, w)
			continue
		}
		err := <-w.done
		if r.steps != nil && w.step != "" {
			r.steps.done(w.step)
		}
		if first == nil {
			first = err
		}
	}
	r.pending = rest
	return first
}

// attach makes a new attachment for the call's sandbox (ADD); on any failure it undoes what it did.
func (p *Pods) attach(ctx context.Context, n node, c *call) (_ *Attachment, retErr error) {
	log := ctrl.LoggerFrom(ctx)
	r := &podRun{p: p, n: n, c: c, steps: newStepTimer(cniCommandAdd), a: &Attachment{
		SandboxID: c.sandbox, PodNamespace: c.args.Namespace, PodName: c.args.Name, PodUID: c.args.UID,
		Netns: c.req.Netns, IfName: c.req.IfName, EndpointName: EndpointName(c.sandbox),
		NetworkID: n.networkID, Bridge: n.bridge, Gateway: n.realized.Node.GatewayIP, MTU: n.mtu,
		Containers: []string{c.sandbox}, Created: time.Now().UTC(), WaitingForVNIC: true,
	}}
	defer func() { log.V(1).Info("ADD steps", "took", r.steps.String()) }()
	for i, s := range podSteps {
		if s.do == nil {
			continue
		}
		err := s.do(ctx, r)
		if err == nil && s.addStep != "" {
			r.steps.done(s.addStep)
		}
		if err != nil {
			_ = r.wait() // the error of the step that failed is the one ADD reports
			if uerr := r.rollback(ctx, i); uerr != nil {
				log.Error(uerr, "Rolling back a failed ADD left something behind; the next sweep removes it", "sandbox", r.a.SandboxID, "failedStep", s.name)
			}
			return nil, err
		}
	}
	return r.a, nil
}

// rollback undoes steps last down to the first, in reverse, after a failed ADD; it runs every undo
// and joins their errors.
func (r *podRun) rollback(ctx context.Context, last int) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	r.rollingBack = true
	var errs []error
	for i := last; i >= 0; i-- {
		if u := podSteps[i].undo; u != nil {
			errs = append(errs, u(ctx, r))
		}
	}
	errs = append(errs, r.wait())
	return errors.Join(errs...)
}

// detach removes everything of the attachment and forgets it (DEL, teardown, GC). Each undo is
// idempotent, so a detach that failed half-way can be repeated.
func (p *Pods) detach(ctx context.Context, a *Attachment) error {
	r := &podRun{p: p, a: a, steps: newStepTimer(cniCommandDel)}
	defer func() { ctrl.LoggerFrom(ctx).V(1).Info("DEL steps", "took", r.steps.String()) }()
	if !a.Deleting {
		a.Deleting = true
		if err := p.opts.Store.Put(a); err != nil {
			return err
		}
	}
	for i := len(podSteps) - 1; i >= 0; i-- {
		s := podSteps[i]
		if s.undo == nil {
			continue
		}
		if err := s.undo(ctx, r); err != nil {
			_ = r.wait()
			return err
		}
		if s.delStep != "" {
			r.steps.done(s.delStep)
		}
	}
	if err := r.wait(); err != nil {
		return err
	}
	if err := p.opts.Store.Delete(a.SandboxID); err != nil {
		return err
	}
	p.forgetVerified(a.SandboxID)
	r.steps.done("store")
	ctrl.LoggerFrom(ctx).V(1).Info("Detached Pod sandbox", "sandbox", a.SandboxID, "pod", a.Pod(), "ip", a.IP)
	return nil
}

// verify compares the attachment with the host and returns what is wrong, for CHECK.
func (p *Pods) verify(ctx context.Context, n node, a *Attachment) []string {
	r := &podRun{p: p, n: n, a: a}
	var problems []string
	for _, s := range podSteps {
		if s.check != nil {
			problems = append(problems, s.check(ctx, r)...)
		}
	}
	return problems
}

// repair converges the host toward the attachment and returns the reasons of what it repaired; the
// caller holds the sandbox's lock.
func (p *Pods) repair(ctx context.Context, n node, a *Attachment) ([]string, error) {
	r := &podRun{p: p, n: n, a: a}
	var repaired []string
	for _, s := range podSteps {
		if s.repair == nil {
			continue
		}
		reasons, err := s.repair(ctx, r)
		repaired = append(repaired, reasons...)
		if err != nil {
			return repaired, err
		}
	}
	return repaired, nil
}

// orphanSweep is one pass over what no attachment records.
type orphanSweep struct {
	p         *Pods
	n         node
	byName    map[string]*Attachment
	bySandbox map[string]*Attachment
	ofports   map[uint64]bool
	errs      []error
}

// removeOrphans removes what carries winnet's marks but belongs to no attachment: OVS ports and HNS
// endpoints named like Pods' endpoints, Pod flows and IPAM allocations. The caller holds the sweep
// lock for writing, so no attachment is being made meanwhile.
func (p *Pods) removeOrphans(ctx context.Context, n node) error {
	s := &orphanSweep{p: p, n: n, byName: map[string]*Attachment{}, bySandbox: map[string]*Attachment{}, ofports: map[uint64]bool{}}
	for _, a := range p.opts.Store.List() {
		s.byName[a.EndpointName], s.bySandbox[a.SandboxID] = a, a
		s.ofports[uint64(a.OFPort)] = true
	}
	for i := len(podSteps) - 1; i >= 0; i-- {
		if o := podSteps[i].orphans; o != nil {
			o(ctx, s)
		}
	}
	return errors.Join(s.errs...)
}

// The address step.

func ipamRequest(a *Attachment) ipam.Request {
	return ipam.Request{ContainerID: a.SandboxID, IfName: a.IfName, Subnet: a.IP.Masked()}
}

func doAddress(ctx context.Context, r *podRun) error {
	ip, err := r.p.opts.Host.IPAM.Allocate(ctx, ipam.Request{
		ContainerID: r.a.SandboxID, IfName: r.a.IfName, Subnet: r.n.realized.Node.PodCIDR, Gateway: r.a.Gateway,
		Preferred: r.p.previousAddress(ctx, r.a),
	})
	if err != nil {
		return err
	}
	r.a.IP = ip
	// The attachment's incarnation of the address, kept before its flows are installed.
	if r.p.opts.Incarnations != nil {
		if _, err := r.p.opts.Incarnations.Assign(r.a.SandboxID, ip.Addr()); err != nil {
			return err
		}
	}
	return nil
}

func undoAddress(ctx context.Context, r *podRun) error {
	if !r.a.IP.IsValid() {
		return nil // no address was allocated
	}
	if err := r.p.opts.Host.IPAM.Release(ctx, ipamRequest(r.a)); err != nil {
		return err
	}
	if r.p.opts.Incarnations != nil {
		return r.p.opts.Incarnations.Forget(r.a.SandboxID)
	}
	return nil
}

func checkAddress(_ context.Context, r *podRun) []string {
	allocs, err := r.p.opts.Host.IPAM.Allocations()
	if err != nil {
		return []string{err.Error()}
	}
	for _, al := range allocs {
		if al.IP == r.a.IP.Addr() && al.ContainerID == r.a.SandboxID {
			return nil
		}
	}
	return []string{fmt.Sprintf("IPAM holds no allocation of %s for the sandbox", r.a.IP.Addr())}
}

func orphanedAddresses(ctx context.Context, s *orphanSweep) {
	allocs, err := s.p.opts.Host.IPAM.Allocations()
	if err != nil {
		s.errs = append(s.errs, err)
	}
	for _, al := range allocs {
		if a := s.bySandbox[al.ContainerID]; a != nil && a.IfName == al.IfName {
			continue
		}
		ctrl.LoggerFrom(ctx).Info("Releasing an orphaned IPAM allocation", "ip", al.IP, "containerID", al.ContainerID)
		if err := s.p.opts.Host.IPAM.Release(ctx, ipam.Request{ContainerID: al.ContainerID, IfName: al.IfName, Subnet: s.n.realized.Node.PodCIDR}); err != nil {
			s.errs = append(s.errs, err)
		}
	}
}

// The endpoint step.

func doEndpoint(ctx context.Context, r *podRun) error {
	a := r.a
	ep, err := r.p.createEndpoint(ctx, hns.EndpointSpec{
		Name: a.EndpointName, NetworkID: a.NetworkID, IP: a.IP.Addr(), PrefixLength: a.IP.Bits(), Gateway: a.Gateway,
		DNS: r.c.conf.endpointDNS(),
	})
	if err != nil {
		return err
	}
	r.ep, a.EndpointID, a.MAC = ep, ep.ID, ep.MAC.String()
	return nil
}

func undoEndpoint(ctx context.Context, r *podRun) error {
	if r.a.EndpointID == "" {
		return nil // no endpoint was created
	}
	if err := r.p.opts.Host.HNS.DeleteEndpoint(ctx, r.a.EndpointID); err != nil {
		return fmt.Errorf("deleting HNS endpoint %s: %w", r.a.EndpointName, err)
	}
	return nil
}

func checkEndpoint(ctx context.Context, r *podRun) []string {
	a := r.a
	ep, err := r.p.opts.Host.HNS.GetEndpointByName(ctx, a.EndpointName)
	switch {
	case errors.Is(err, hns.ErrNotFound):
		return []string{fmt.Sprintf("HNS endpoint %s is missing", a.EndpointName)}
	case err != nil:
		return []string{fmt.Sprintf("looking up HNS endpoint %s: %v", a.EndpointName, err)}
	}
	r.ep = ep
	if ep.IP != a.IP.Addr() {
		return []string{fmt.Sprintf("HNS endpoint %s has address %s, not %s", a.EndpointName, ep.IP, a.IP.Addr())}
	}
	return nil
}

// repairEndpoint recreates a missing HNS endpoint with the same address and MAC; the port, bound to
// the endpoint that is gone, is deleted so that the port step recreates it for the new one.
func repairEndpoint(ctx context.Context, r *podRun) ([]string, error) {
	a, n := r.a, r.n
	ep, err := r.p.opts.Host.HNS.GetEndpointByName(ctx, a.EndpointName)
	switch {
	case errors.Is(err, hns.ErrNotFound):
	case err != nil:
		return nil, fmt.Errorf("looking up HNS endpoint %s: %w", a.EndpointName, err)
	default:
		r.ep = ep
		return nil, nil
	}
	mac, err := net.ParseMAC(a.MAC)
	if err != nil {
		return nil, fmt.Errorf("MAC of endpoint %s: %w", a.EndpointName, err)
	}
	ep, err = r.p.opts.Host.HNS.CreateEndpoint(ctx, hns.EndpointSpec{
		Name: a.EndpointName, NetworkID: n.networkID, IP: a.IP.Addr(), PrefixLength: a.IP.Bits(), MAC: mac, Gateway: a.Gateway,
	})
	if err != nil {
		return nil, fmt.Errorf("recreating HNS endpoint %s: %w", a.EndpointName, err)
	}
	r.ep, a.EndpointID, a.NetworkID, r.changed = ep, ep.ID, n.networkID, true
	repaired := []string{networkv1alpha1.EndpointMissingReason}
	// The port was bound to the endpoint that is gone: bind it to the new one. ovs-vswitchd must
	// have closed the old interface before the new one of the same name appears.
	if err := r.p.deletePort(ctx, a); err != nil {
		return repaired, err
	}
	wctx, cancel := context.WithTimeout(ctx, portTimeout)
	err = r.p.opts.Host.OVSDB.WaitApplied(wctx)
	cancel()
	return repaired, err
}

func orphanedEndpoints(ctx context.Context, s *orphanSweep) {
	endpoints, err := s.p.opts.Host.HNS.ListEndpoints(ctx, s.n.networkID)
	if err != nil {
		s.errs = append(s.errs, fmt.Errorf("listing HNS endpoints: %w", err))
	}
	for _, ep := range endpoints {
		if !endpointNamePattern.MatchString(ep.Name) {
			continue
		}
		if a := s.byName[ep.Name]; a != nil && sameID(a.EndpointID, ep.ID) {
			continue
		}
		ctrl.LoggerFrom(ctx).Info("Deleting an orphaned HNS endpoint", "endpoint", ep.Name, "endpointID", ep.ID, "ip", ep.IP)
		if err := setSwitchPort(ctx, s.p.opts.Host.Net, ep.Name, false); err != nil {
			s.errs = append(s.errs, err)
		}
		if err := s.p.opts.Host.HNS.DeleteEndpoint(ctx, ep.ID); err != nil {
			s.errs = append(s.errs, fmt.Errorf("deleting orphaned HNS endpoint %s: %w", ep.Name, err))
		}
	}
}

// The namespace step.

// doNamespace starts attaching the endpoint to the Pod's network namespace; the vNIC step waits
// for it.
func doNamespace(ctx context.Context, r *podRun) error {
	ep := r.ep
	r.start("attach", func() error { return r.p.attachPod(ctx, ep, r.a) })
	return nil
}

func checkNamespace(_ context.Context, r *podRun) []string {
	if r.ep == nil {
		return nil // the endpoint step reported it
	}
	if !sameID(r.ep.NamespaceID, r.a.Netns) {
		return []string{fmt.Sprintf("HNS endpoint %s is not attached to %s", r.a.EndpointName, r.a.Netns)}
	}
	return nil
}

// repairNamespace attaches an endpoint that is attached to no namespace; its vNIC comes when HNS
// attaches it to the running sandbox, so the attachment waits for it again.
func repairNamespace(ctx context.Context, r *podRun) ([]string, error) {
	a := r.a
	if r.ep.NamespaceID != "" {
		return nil, nil
	}
	if err := r.p.opts.Host.HNS.AttachEndpoint(ctx, r.ep.ID, a.Netns); err != nil {
		return nil, fmt.Errorf("attaching HNS endpoint %s to the Pod's network namespace %s: %w", a.EndpointName, a.Netns, err)
	}
	if !a.WaitingForVNIC {
		a.WaitingForVNIC, r.changed = true, true
	}
	return nil, nil
}

// The flows step.

// doFlows claims the ofport the port will request and starts installing the flows for it: they
// depend only on that number, so they are installed while the endpoint is attached and the port
// created, and follow the port if OVS gives it another number. The vNIC step waits for them.
func doFlows(ctx context.Context, r *podRun) error {
	r.a.OFPort = r.p.claimOFPort(r.a.SandboxID)
	r.start("flows", func() error {
		_, err := r.p.installFlows(ctx, r.n.realized, r.a)
		return err
	})
	return nil
}

// undoFlows removes the flows while the port goes (the port's undo started that), and gives the
// ofport back once both are gone (in a rollback, always: no attachment records it).
func undoFlows(ctx context.Context, r *podRun) error {
	err := r.p.removeFlows(ctx, r.a.OFPort, r.a.SandboxID)
	if perr := r.wait(); perr != nil {
		err = perr
	}
	if err != nil && !r.rollingBack {
		return err
	}
	if r.a.OFPort > 0 {
		r.p.releaseOFPort(r.a.OFPort, r.a.SandboxID)
	}
	return err
}

func checkFlows(ctx context.Context, r *podRun) []string { return r.p.verifyFlows(ctx, r.n, r.a) }

func repairFlows(ctx context.Context, r *podRun) ([]string, error) {
	added, err := r.p.syncFlows(ctx, r.n, r.a)
	if added {
		return []string{"FlowsMissing"}, err
	}
	return nil, err
}

func orphanedFlows(ctx context.Context, s *orphanSweep) {
	s.errs = append(s.errs, s.p.removeOrphanedFlows(ctx, s.n, s.ofports))
}

// The port step.

// doPort creates the OVS port, unbound, while the endpoint is being attached: an unbound port
// binds to nothing until its vNIC appears, so it does not wait for the attach (only an internal
// port created before the vNIC falls into the trap of vnic.go). The vNIC step waits for the attach.
func doPort(ctx context.Context, r *podRun) error {
	_, err := r.p.createPort(ctx, r.a, false)
	return err
}

// undoPort starts deleting the port; the flows' undo waits for it.
func undoPort(ctx context.Context, r *podRun) error {
	r.start("", func() error { return r.p.deletePort(ctx, r.a) })
	return nil
}

// checkPort checks that the port exists with its ofport; a port waiting for its vNIC has none yet.
func checkPort(ctx context.Context, r *podRun) []string {
	a := r.a
	if a.WaitingForVNIC {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, portCheckTimeout)
	ofport, err := r.p.opts.Host.OVSDB.WaitOFPort(wctx, a.EndpointName)
	cancel()
	switch {
	case err != nil:
		return []string{fmt.Sprintf("OVS port %s is missing", a.EndpointName)}
	case ofport != a.OFPort:
		return []string{fmt.Sprintf("OVS port %s has ofport %d, not %d", a.EndpointName, ofport, a.OFPort)}
	}
	return nil
}

// repairPort makes the port of an attachment whose vNIC exists exist, bound, on the node's bridge;
// when OVS gives it another ofport, or the bridge changed, the flows move to it. Nothing is
// repaired on a port waiting for its vNIC: its waiter binds it.
func repairPort(ctx context.Context, r *podRun) ([]string, error) {
	a := r.a
	if a.WaitingForVNIC {
		return nil, nil
	}
	var repaired []string
	oldPort, oldBridge := a.OFPort, a.Bridge
	a.Bridge = r.n.bridge
	portChanged, err := r.p.ensurePort(ctx, a)
	if err != nil {
		return nil, err
	}
	if portChanged {
		repaired = append(repaired, networkv1alpha1.PortMissingReason)
	}
	if a.OFPort == oldPort && a.Bridge == oldBridge {
		return repaired, nil
	}
	r.changed = true
	if err := r.p.removeFlows(ctx, oldPort, a.SandboxID); err != nil {
		return repaired, err
	}
	r.p.releaseOFPort(oldPort, a.SandboxID)
	reasons, err := repairFlows(ctx, r)
	return append(repaired, reasons...), err
}

func orphanedPorts(ctx context.Context, s *orphanSweep) {
	ports, err := s.p.opts.Host.OVSDB.OwnedPorts(ctx, s.n.bridge)
	if err != nil {
		s.errs = append(s.errs, fmt.Errorf("listing OVS ports: %w", err))
	}
	for _, port := range ports {
		if !endpointNamePattern.MatchString(port.Name) || s.byName[port.Name] != nil {
			continue
		}
		ctrl.LoggerFrom(ctx).Info("Deleting an orphaned OVS port", "port", port.Name, "ofPort", port.OFPort)
		if err := setSwitchPort(ctx, s.p.opts.Host.Net, port.Name, false); err != nil {
			s.errs = append(s.errs, err)
		}
		if _, err := s.p.opts.Host.OVSDB.DeletePort(ctx, s.n.bridge, port.Name); err != nil {
			s.errs = append(s.errs, fmt.Errorf("deleting orphaned OVS port %s: %w", port.Name, err))
		}
	}
}

// The vNIC step.

// doVNIC records the attachment, waiting for its vNIC, once the endpoint is attached and its flows
// installed, and starts the waiter that binds the port when the vNIC appears.
func doVNIC(_ context.Context, r *podRun) error {
	if err := r.wait(); err != nil {
		return err
	}
	if err := r.p.opts.Store.Put(r.a); err != nil {
		return err
	}
	r.p.markVerified(r.a.SandboxID, r.n.realized.Flows)
	r.p.waitVNIC(r.a)
	return nil
}

func undoVNIC(_ context.Context, r *podRun) error {
	r.p.stopVNICWaiter(r.a.SandboxID)
	return nil
}

// repairVNIC records what the repair changed; an attachment waiting for its vNIC gets its waiter
// (again), one whose vNIC is bound is verified.
func repairVNIC(_ context.Context, r *podRun) ([]string, error) {
	if r.changed {
		if err := r.p.opts.Store.Put(r.a); err != nil {
			return nil, err
		}
	}
	if r.a.WaitingForVNIC {
		r.p.waitVNIC(r.a)
	} else {
		r.p.markVerified(r.a.SandboxID, r.n.realized.Flows)
	}
	return nil, nil
}

// previousAddress is the IPv4 address the Pod's status gives it, when the Pod had a sandbox before
// this one (kubelet makes a Pod's sandbox again when it dies, or after a reboot): the new sandbox
// keeps it if it is free. Every node matches the Pod by that address (NetworkPolicy peers,
// Service endpoints), and until kubelet writes the new one — not before the API server answers —
// a new address would be matched as nobody's, and the old one as the Pod's. Read from the cache:
// ADD never waits for the API server. Invalid when the cache has no such Pod, or a Pod of another
// UID (a Pod of the same name made again is a new Pod).
func (p *Pods) previousAddress(ctx context.Context, a *Attachment) netip.Addr {
	if p.opts.Reader == nil || a.PodName == "" {
		return netip.Addr{}
	}
	pod := &corev1.Pod{}
	if err := p.opts.Reader.Get(ctx, client.ObjectKey{Namespace: a.PodNamespace, Name: a.PodName}, pod); err != nil {
		return netip.Addr{}
	}
	if a.PodUID != "" && string(pod.UID) != a.PodUID {
		return netip.Addr{}
	}
	for _, ip := range pod.Status.PodIPs {
		if addr, err := netip.ParseAddr(ip.IP); err == nil && addr.Is4() {
			return addr
		}
	}
	return netip.Addr{}
}
