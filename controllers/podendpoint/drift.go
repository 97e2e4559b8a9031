package podendpoint

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/hns"
	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/internal/pipeline"
)

// portCheckTimeout bounds looking for a Pod's port in CHECK: a port that exists has its ofport.
const portCheckTimeout = 200 * time.Millisecond

// verify compares the attachment with the host and returns what is wrong, for CHECK: the HNS
// endpoint (present, same address, attached to the Pod's namespace), the OVS port (present, same
// ofport), the flows (in the switch, not only in the agent's cache) and the IPAM allocation.
func (p *Pods) verify(ctx context.Context, n node, a *Attachment) []string {
	var problems []string
	ep, err := p.opts.Host.HNS.GetEndpointByName(ctx, a.EndpointName)
	switch {
	case errors.Is(err, hns.ErrNotFound):
		problems = append(problems, fmt.Sprintf("HNS endpoint %s is missing", a.EndpointName))
	case err != nil:
		problems = append(problems, fmt.Sprintf("looking up HNS endpoint %s: %v", a.EndpointName, err))
	default:
		if ep.IP != a.IP.Addr() {
			problems = append(problems, fmt.Sprintf("HNS endpoint %s has address %s, not %s", a.EndpointName, ep.IP, a.IP.Addr()))
		}
		if !sameID(ep.NamespaceID, a.Netns) {
			problems = append(problems, fmt.Sprintf("HNS endpoint %s is not attached to %s", a.EndpointName, a.Netns))
		}
	}

	var ofport int32
	err = nil
	if !a.WaitingForVNIC { // a port waiting for its vNIC has no ofport yet
		wctx, cancel := context.WithTimeout(ctx, portCheckTimeout)
		ofport, err = p.opts.Host.OVSDB.WaitOFPort(wctx, a.EndpointName)
		cancel()
	}
	switch {
	case a.WaitingForVNIC:
	case err != nil:
		problems = append(problems, fmt.Sprintf("OVS port %s is missing", a.EndpointName))
	case ofport != a.OFPort:
		problems = append(problems, fmt.Sprintf("OVS port %s has ofport %d, not %d", a.EndpointName, ofport, a.OFPort))
	}

	problems = append(problems, p.verifyFlows(ctx, n, a)...)

	allocs, err := p.opts.Host.IPAM.Allocations()
	if err != nil {
		problems = append(problems, err.Error())
	}
	allocated := false
	for _, al := range allocs {
		allocated = allocated || (al.IP == a.IP.Addr() && al.ContainerID == a.SandboxID)
	}
	if err == nil && !allocated {
		problems = append(problems, fmt.Sprintf("IPAM holds no allocation of %s for the sandbox", a.IP.Addr()))
	}
	return problems
}

// verifyFlows checks that the Pod's flows are installed in the switch.
func (p *Pods) verifyFlows(ctx context.Context, n node, a *Attachment) []string {
	want, err := podFlows(n.realized, a)
	if err != nil {
		return []string{err.Error()}
	}
	flows := n.realized.Flows
	installed := 0
	for _, f := range flows.Installed(pipeline.CategoryPod) {
		if f.Cookie&openflow.ObjectMask == uint64(a.OFPort) {
			installed++
		}
	}
	if installed != len(want) {
		return []string{fmt.Sprintf("%d of the Pod's %d flows are installed", installed, len(want))}
	}
	diffs, err := flows.Verify(ctx)
	if err != nil {
		return []string{fmt.Sprintf("reading the switch's flows: %v", err)}
	}
	cookie := fmt.Sprintf("cookie=%#x,", openflow.MakeCookie(flows.Round(), pipeline.CategoryPod, uint64(a.OFPort)))
	missing := 0
	for _, d := range diffs {
		if d.Kind == openflow.Missing && strings.HasPrefix(d.Flow, cookie) {
			missing++
		}
	}
	if missing > 0 {
		return []string{fmt.Sprintf("%d of the Pod's %d flows are missing from the switch", missing, len(want))}
	}
	return nil
}

// repair converges the host toward the attachment: it recreates a missing HNS endpoint with the
// same address and MAC and attaches it again, recreates a missing OVS port, and installs the flows
// (again, if the node network reconciler found them drifted). It returns the reasons of what it
// repaired; the caller holds the sandbox's lock.
func (p *Pods) repair(ctx context.Context, n node, a *Attachment) ([]string, error) {
	var repaired []string
	changed := false
	ep, err := p.opts.Host.HNS.GetEndpointByName(ctx, a.EndpointName)
	switch {
	case errors.Is(err, hns.ErrNotFound):
		mac, err := net.ParseMAC(a.MAC)
		if err != nil {
			return nil, fmt.Errorf("MAC of endpoint %s: %w", a.EndpointName, err)
		}
		ep, err = p.opts.Host.HNS.CreateEndpoint(ctx, hns.EndpointSpec{
			Name: a.EndpointName, NetworkID: n.networkID, IP: a.IP.Addr(), PrefixLength: a.IP.Bits(), MAC: mac, Gateway: a.Gateway,
		})
		if err != nil {
			return nil, fmt.Errorf("recreating HNS endpoint %s: %w", a.EndpointName, err)
		}
		a.EndpointID, a.NetworkID, changed = ep.ID, n.networkID, true
		repaired = append(repaired, networkv1alpha1.EndpointMissingReason)
		// The port was bound to the endpoint that is gone: bind it to the new one. ovs-vswitchd
		// must have closed the old interface before the new one of the same name appears.
		if err := p.deletePort(ctx, a); err != nil {
			return repaired, err
		}
		wctx, cancel := context.WithTimeout(ctx, portTimeout)
		err = p.opts.Host.OVSDB.WaitApplied(wctx)
		cancel()
		if err != nil {
			return repaired, err
		}
	case err != nil:
		return nil, fmt.Errorf("looking up HNS endpoint %s: %w", a.EndpointName, err)
	}
	if ep.NamespaceID == "" {
		if err := p.opts.Host.HNS.AttachEndpoint(ctx, ep.ID, a.Netns); err != nil {
			return repaired, fmt.Errorf("attaching HNS endpoint %s to the Pod's network namespace %s: %w", a.EndpointName, a.Netns, err)
		}
		if !a.WaitingForVNIC {
			// The recreated endpoint's vNIC comes when HNS attaches it to the running sandbox.
			a.WaitingForVNIC, changed = true, true
		}
	}
	if a.WaitingForVNIC {
		// Nothing to repair on a port whose vNIC has not appeared: its waiter binds it.
		added, err := p.syncFlows(ctx, n, a)
		if err != nil {
			return repaired, err
		}
		if added {
			repaired = append(repaired, "FlowsMissing")
		}
		if changed {
			if err := p.opts.Store.Put(a); err != nil {
				return repaired, err
			}
		}
		p.waitVNIC(a)
		return repaired, nil
	}

	oldPort, oldBridge := a.OFPort, a.Bridge
	a.Bridge = n.bridge
	portChanged, err := p.ensurePort(ctx, a)
	if err != nil {
		return repaired, err
	}
	if portChanged {
		repaired = append(repaired, networkv1alpha1.PortMissingReason)
	}
	if a.OFPort != oldPort || a.Bridge != oldBridge {
		changed = true
		if err := p.removeFlows(ctx, oldPort, a.SandboxID); err != nil {
			return repaired, err
		}
		p.releaseOFPort(oldPort, a.SandboxID)
	}
	added, err := p.syncFlows(ctx, n, a)
	if err != nil {
		return repaired, err
	}
	if added {
		repaired = append(repaired, "FlowsMissing")
	}
	if changed {
		if err := p.opts.Store.Put(a); err != nil {
			return repaired, err
		}
	}
	p.markVerified(a.SandboxID, n.realized.Flows)
	return repaired, nil
}

// syncFlows installs the attachment's flows where they are missing and reports whether any were.
func (p *Pods) syncFlows(ctx context.Context, n node, a *Attachment) (bool, error) {
	res, err := p.installFlows(ctx, n.realized, a)
	return res.Added > 0, err
}
