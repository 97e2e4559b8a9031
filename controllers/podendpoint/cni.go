package podendpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	cnitypes "github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/winnet-io/winnet/internal/cni"
	"github.com/winnet-io/winnet/internal/cni/ipam"
	"github.com/winnet-io/winnet/internal/hns"
)

var _ cni.Handler = (*Pods)(nil)

// Handle answers one CNI request of the shim.
func (p *Pods) Handle(ctx context.Context, req cni.Request) cni.Response {
	var (
		result []byte
		err    error
	)
	start, command := time.Now(), string(req.Command)
	switch req.Command {
	case cni.CommandAdd:
		result, err = p.add(ctx, req)
	case cni.CommandDel:
		err = p.del(ctx, req)
	case cni.CommandCheck:
		err = p.check(ctx, req)
	case cni.CommandGC:
		err = p.gc(ctx, req)
	case cni.CommandStatus:
		err = p.status(ctx, req)
	default:
		command = "other" // not a label value per unknown command
		err = cnitypes.NewError(cnitypes.ErrInvalidEnvironmentVariables, fmt.Sprintf("the winnet agent does not handle CNI_COMMAND %s", req.Command), "")
	}
	if err != nil {
		cniErr := asCNIError(ctx, req, err)
		observeRequest(command, time.Since(start), cniErr.Code)
		return cni.Response{Error: cniErr}
	}
	observeRequest(command, time.Since(start), 0)
	return cni.Response{Result: result}
}

// asCNIError turns err into the CNI error the shim prints: errors that are CNI errors already keep
// their code; timeouts ask the runtime to try again; anything else is internal.
func asCNIError(ctx context.Context, req cni.Request, err error) *cnitypes.Error {
	var cniErr *cnitypes.Error
	if errors.As(err, &cniErr) {
		return cniErr
	}
	ctrl.LoggerFrom(ctx).Error(err, "CNI request failed", "command", req.Command, "containerID", req.ContainerID)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.Is(err, hns.ErrTimeout) {
		return cnitypes.NewError(cnitypes.ErrTryAgainLater, fmt.Sprintf("winnet agent: %s timed out; try again later", req.Command), err.Error())
	}
	return cnitypes.NewError(cnitypes.ErrInternal, fmt.Sprintf("winnet agent: %s failed: %v", req.Command, err), "")
}

// add attaches the sandbox, or answers from the attachment that exists: a repeated ADD for the
// sandbox, or an ADD for one of the Pod's workload containers, which joins the sandbox's endpoint.
func (p *Pods) add(ctx context.Context, req cni.Request) ([]byte, error) {
	c, err := parseCall(req)
	if err != nil {
		return nil, err
	}
	p.sweep.RLock()
	defer p.sweep.RUnlock()
	defer p.locks.Lock(c.sandbox)()
	ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues("sandbox", c.sandbox, "pod", c.args.Namespace+"/"+c.args.Name))

	n, err := p.waitNode(ctx)
	if err != nil {
		return nil, err
	}
	a, ok := p.opts.Store.Get(c.sandbox)
	if ok && a.Deleting {
		// A DEL of this sandbox failed half-way: finish it, then attach anew.
		if err := p.detach(ctx, a); err != nil {
			return nil, err
		}
		ok = false
	}
	switch {
	case ok:
		if a, err = p.join(ctx, n, c, a); err != nil {
			return nil, err
		}
	case !c.forSandbox():
		return nil, cnitypes.NewError(cnitypes.ErrUnknownContainer,
			fmt.Sprintf("container %s belongs to sandbox %s, which has no network: ADD the sandbox first", req.ContainerID, c.sandbox), "")
	default:
		if a, err = p.attach(ctx, n, c); err != nil {
			return nil, err
		}
		ctrl.LoggerFrom(ctx).V(1).Info("Attached Pod sandbox", "ip", a.IP, "endpoint", a.EndpointName, "ofPort", a.OFPort)
	}
	p.notify(a.Pod())
	return addResult(c, a)
}

// join answers an ADD for a sandbox that is attached: what exists is repaired if it drifted, the
// endpoint is attached to the call's network namespace (a no-op for the namespace it is in) and the
// container recorded.
func (p *Pods) join(ctx context.Context, n node, c *call, a *Attachment) (*Attachment, error) {
	if a.IfName != c.req.IfName {
		return nil, cnitypes.NewError(cnitypes.ErrInvalidEnvironmentVariables,
			fmt.Sprintf("sandbox %s is attached as %s; winnet gives a Pod one interface, not %s", c.sandbox, a.IfName, c.req.IfName), "")
	}
	if repaired, err := p.repair(ctx, n, a); err != nil {
		return nil, fmt.Errorf("repairing the network of sandbox %s: %w", c.sandbox, err)
	} else if len(repaired) > 0 {
		ctrl.LoggerFrom(ctx).Info("Repaired the network of an attached sandbox on ADD", "repaired", repaired)
	}
	netns := c.req.Netns
	if strings.HasPrefix(netns, containerNetnsPrefix) {
		netns = a.Netns // the workload container shares the sandbox's namespace
	}
	if err := p.opts.Host.HNS.AttachEndpoint(ctx, a.EndpointID, netns); err != nil {
		if errors.Is(err, hns.ErrNotFound) {
			return nil, cnitypes.NewError(cnitypes.ErrInvalidNetNS, fmt.Sprintf("attaching the endpoint of sandbox %s to %q", c.sandbox, netns), err.Error())
		}
		return nil, fmt.Errorf("attaching HNS endpoint %s to %s: %w", a.EndpointName, netns, err)
	}
	if slices.Contains(a.Containers, c.req.ContainerID) {
		return a, nil
	}
	a.Containers = append(a.Containers, c.req.ContainerID)
	if err := p.opts.Store.Put(a); err != nil {
		return nil, err
	}
	return a, nil
}

// addResult is the CNI result of an ADD, in the newest version; the shim converts it to the
// configuration's.
func addResult(c *call, a *Attachment) ([]byte, error) {
	mac, err := net.ParseMAC(a.MAC)
	if err != nil {
		return nil, fmt.Errorf("MAC of endpoint %s: %w", a.EndpointName, err)
	}
	gw := net.IP(a.Gateway.AsSlice())
	res := &types100.Result{
		CNIVersion: types100.ImplementedSpecVersion,
		Interfaces: []*types100.Interface{{Name: a.IfName, Mac: mac.String(), Mtu: a.MTU, Sandbox: c.req.Netns}},
		IPs: []*types100.IPConfig{{
			Interface: types100.Int(0),
			Address:   net.IPNet{IP: net.IP(a.IP.Addr().AsSlice()), Mask: net.CIDRMask(a.IP.Bits(), a.IP.Addr().BitLen())},
			Gateway:   gw,
		}},
		Routes: []*cnitypes.Route{{Dst: net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}, GW: gw}},
		DNS:    c.conf.dns(),
	}
	b, err := json.Marshal(res)
	if err != nil {
		return nil, fmt.Errorf("encoding the CNI result: %w", err)
	}
	return b, nil
}

// del detaches the sandbox, or forgets a workload container; it succeeds when nothing exists.
func (p *Pods) del(ctx context.Context, req cni.Request) error {
	c, err := parseCall(req)
	if err != nil {
		return err
	}
	p.sweep.RLock()
	defer p.sweep.RUnlock()
	defer p.locks.Lock(c.sandbox)()

	a, ok := p.opts.Store.Get(c.sandbox)
	if !ok {
		return p.releaseUnattached(ctx, c)
	}
	if !c.forSandbox() {
		if i := slices.Index(a.Containers, req.ContainerID); i >= 0 {
			a.Containers = slices.Delete(a.Containers, i, i+1)
			return p.opts.Store.Put(a)
		}
		return nil
	}
	if err := p.detach(ctx, a); err != nil {
		return err
	}
	p.notify(a.Pod())
	return nil
}

// releaseUnattached releases an address IPAM may hold for a container the agent has no attachment
// for (an ADD that did not finish).
func (p *Pods) releaseUnattached(ctx context.Context, c *call) error {
	allocs, err := p.opts.Host.IPAM.Allocations()
	if err != nil {
		return err
	}
	for _, al := range allocs {
		if al.ContainerID == c.sandbox && al.IfName == c.req.IfName {
			return p.opts.Host.IPAM.Release(ctx, ipam.Request{ContainerID: c.sandbox, IfName: c.req.IfName})
		}
	}
	return nil
}

// check verifies that the sandbox's attachment is whole and matches prevResult.
func (p *Pods) check(ctx context.Context, req cni.Request) error {
	c, err := parseCall(req)
	if err != nil {
		return err
	}
	p.sweep.RLock()
	defer p.sweep.RUnlock()
	defer p.locks.Lock(c.sandbox)()

	a, ok := p.opts.Store.Get(c.sandbox)
	if !ok {
		return cnitypes.NewError(cnitypes.ErrUnknownContainer, fmt.Sprintf("sandbox %s has no network attachment", c.sandbox), "")
	}
	n, err := p.node(ctx)
	if err != nil {
		return cnitypes.NewError(cnitypes.ErrTryAgainLater, "cannot check the Pod's network: "+err.Error(), "")
	}
	var problems []string
	if c.conf.PrevResult != nil {
		prev, err := types100.NewResultFromResult(c.conf.PrevResult)
		if err != nil {
			return cnitypes.NewError(cnitypes.ErrDecodingFailure, fmt.Sprintf("converting prevResult: %v", err), "")
		}
		if !resultHasIP(prev, a) {
			problems = append(problems, fmt.Sprintf("prevResult does not hold the Pod's address %s", a.IP))
		}
	}
	problems = append(problems, p.verify(ctx, n, a)...)
	if len(problems) > 0 {
		return cnitypes.NewError(cnitypes.ErrInternal,
			fmt.Sprintf("the network of sandbox %s is damaged: %s", c.sandbox, strings.Join(problems, "; ")), "")
	}
	return nil
}

func resultHasIP(r *types100.Result, a *Attachment) bool {
	for _, ip := range r.IPs {
		if ip.Address.IP.Equal(net.IP(a.IP.Addr().AsSlice())) {
			return true
		}
	}
	return false
}

// gc detaches every sandbox the runtime no longer lists and removes orphans.
func (p *Pods) gc(ctx context.Context, req cni.Request) error {
	conf, err := parseNetConf(req)
	if err != nil {
		return err
	}
	type key struct{ id, ifName string }
	valid := map[key]bool{}
	for _, v := range conf.ValidAttachments {
		valid[key{v.ContainerID, v.IfName}] = true
	}
	p.sweep.Lock()
	defer p.sweep.Unlock()
	var errs []error
	for _, a := range p.opts.Store.List() {
		if valid[key{a.SandboxID, a.IfName}] {
			continue
		}
		ctrl.LoggerFrom(ctx).Info("Detaching a sandbox the runtime no longer lists", "sandbox", a.SandboxID, "pod", a.Pod())
		if err := p.detach(ctx, a); err != nil {
			errs = append(errs, err)
			continue
		}
		p.notify(a.Pod())
	}
	if n, err := p.node(ctx); err == nil {
		errs = append(errs, p.removeOrphans(ctx, n))
	}
	return errors.Join(errs...)
}

// status reports whether ADD can be served: only when the node network is Ready.
func (p *Pods) status(ctx context.Context, req cni.Request) error {
	if _, err := parseNetConf(req); err != nil {
		return err
	}
	if _, err := p.node(ctx); err != nil {
		return cnitypes.NewError(cnitypes.ErrPluginNotAvailable,
			fmt.Sprintf("the network of node %s is not ready", p.opts.NodeName), err.Error())
	}
	return nil
}
