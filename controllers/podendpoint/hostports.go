package podendpoint

import (
	"context"
	"maps"
	"net/netip"
	"slices"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/winnet-io/winnet/internal/hostport"
)

// The hostPorts step: the runtime's portMappings (the "portMappings" capability) claimed on the
// node for the sandbox, once it has its address, and recorded beside its attachment (in
// hostport.Records, never in the attachment record: see hostport.DirName). The Service reconciler
// realises the claims (controllers/service, hostports.go); a claim that overlaps another Pod's,
// takes a port the node needs or a Service's NodePort fails the ADD, which undoes the address.

// doHostPorts checks the call's mappings against the node (its addresses, its tunnel port) and the
// other Pods' claims, claims them and records them.
func doHostPorts(_ context.Context, r *podRun) error {
	hp := r.p.opts.HostPorts
	mappings := r.c.conf.mappings
	if len(mappings) == 0 || hp == nil {
		return nil
	}
	if err := hostport.CheckHostIPs(mappings, nodeAddresses(r.n)); err != nil {
		return err
	}
	var extra []hostport.Reserved
	if r.n.tunnelPort != 0 {
		extra = append(extra, hostport.Reserved{Protocol: "UDP", Port: r.n.tunnelPort, What: "the node's tunnel"})
	}
	if err := hp.Claim(hostport.Entry{Sandbox: r.a.SandboxID, Pod: r.a.Pod().String(), PodUID: r.a.PodUID, IP: r.a.IP.Addr(), Mappings: mappings}, extra...); err != nil {
		return err
	}
	if err := r.p.opts.HostPortRecords.Put(r.a.SandboxID, mappings); err != nil {
		hp.Release(r.a.SandboxID)
		return err
	}
	return nil
}

// undoHostPorts releases the sandbox's claims and forgets its record.
func undoHostPorts(_ context.Context, r *podRun) error {
	if r.p.opts.HostPorts == nil {
		return nil
	}
	r.p.opts.HostPorts.Release(r.a.SandboxID)
	return r.p.opts.HostPortRecords.Delete(r.a.SandboxID)
}

// orphanedHostPorts forgets the records of sandboxes the agent has no attachment for.
func orphanedHostPorts(ctx context.Context, s *orphanSweep) {
	if s.p.opts.HostPorts == nil {
		return
	}
	records, bad, err := s.p.opts.HostPortRecords.Load()
	if err != nil {
		s.errs = append(s.errs, err)
		return
	}
	for sandbox := range records {
		if s.bySandbox[sandbox] == nil {
			ctrl.LoggerFrom(ctx).Info("Removing the hostPort record of a sandbox without attachment", "sandbox", sandbox)
			s.p.opts.HostPorts.Release(sandbox)
			s.errs = append(s.errs, s.p.opts.HostPortRecords.Delete(sandbox))
		}
	}
	for sandbox := range bad {
		if s.bySandbox[sandbox] == nil {
			s.errs = append(s.errs, s.p.opts.HostPortRecords.Delete(sandbox))
		}
	}
}

// restoreHostPorts claims again, at start-up, the recorded mappings of the attached sandboxes
// (the agent restarted, or the node rebooted and the attachments are being restored). A record
// that cannot be read, or whose claim now fails, is reported and left: its Pod's hostPorts are not
// served until the sandbox is added again.
func (p *Pods) restoreHostPorts() {
	if p.opts.HostPorts == nil {
		return
	}
	log := ctrl.Log.WithName("hostports")
	records, bad, err := p.opts.HostPortRecords.Load()
	if err != nil {
		log.Error(err, "Cannot read the hostPort records; no hostPort is served until the Pods are added again")
		return
	}
	for sandbox, err := range bad {
		log.Error(err, "Ignoring an unreadable hostPort record", "sandbox", sandbox)
	}
	for _, sandbox := range slices.Sorted(maps.Keys(records)) {
		a, ok := p.opts.Store.Get(sandbox)
		if !ok || a.Deleting {
			continue // an orphan: the start-up sweep removes it
		}
		if err := p.opts.HostPorts.Restore(hostport.Entry{Sandbox: sandbox, Pod: a.Pod().String(), PodUID: a.PodUID, IP: a.IP.Addr(), Mappings: records[sandbox]}); err != nil {
			log.Error(err, "Cannot restore the hostPorts of a Pod", "sandbox", sandbox, "pod", a.Pod())
		}
	}
}

// nodeAddresses are the node's addresses a hostIP may name: the node IP and the other IPv4
// addresses of the bridge interface (the NodePorts' addresses, controllers/service nodeIPs) but
// the gateway's and the Pod subnet's.
func nodeAddresses(n node) []netip.Addr {
	rz := n.realized
	ips := []netip.Addr{rz.Node.NodeIP}
	for _, p := range rz.BridgeAddresses {
		ip := p.Addr().Unmap()
		if !ip.Is4() || ip.IsLinkLocalUnicast() || ip.IsMulticast() || ip == rz.Node.GatewayIP || rz.Node.PodCIDR.Contains(ip) || slices.Contains(ips, ip) {
			continue
		}
		ips = append(ips, ip)
	}
	return ips
}
