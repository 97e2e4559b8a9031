package service

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/winnet-io/winnet/internal/hostnet"
)

// FullPassFromScratch runs a full pass that computes every Service again, as if the reconciler had
// computed none before (their group ids and cookie objects stay theirs).
func (r *Reconciler) FullPassFromScratch(ctx context.Context) error {
	r.passes.Lock()
	defer r.passes.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	rz, ok := r.State.Realized()
	if !ok {
		return errors.New("the node network is not realised")
	}
	r.realised = nil
	return r.reconcileAll(ctx, rz)
}

// CheckDrift runs the drift check.
func (r *Reconciler) CheckDrift(ctx context.Context) error {
	r.passes.Lock()
	defer r.passes.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	rz, ok := r.State.Realized()
	if !ok {
		return errors.New("the node network is not realised")
	}
	return r.checkDrift(ctx, rz, nil)
}

// DriftCheck is the work item of the drift check.
var DriftCheck = driftCheck

// WrapNet replaces the host network the reconciler uses with wrap's, and has the next drift check
// read the host's routes back.
func (r *Reconciler) WrapNet(wrap func(hostnet.Routing) hostnet.Routing) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Net = wrap(r.Net)
	r.routed = nil
}

// WrapNodePorts replaces the host NAT of NodePorts the reconciler uses with wrap's.
func (r *Reconciler) WrapNodePorts(wrap func(hostnet.NodePortNAT) hostnet.NodePortNAT) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.NodePorts = wrap(r.NodePorts)
}

// FullPasses is the number of full passes that completed.
func (r *Reconciler) FullPasses() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fullPasses
}

// Computed returns, by Service, the inputs it was last computed from.
func (r *Reconciler) Computed() map[types.NamespacedName]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[types.NamespacedName]string{}
	for name, rs := range r.realised {
		out[name] = rs.inputs.String()
	}
	return out
}

// Inputs identifies the versions of a Service and of its EndpointSlices.
func Inputs(svc *corev1.Service, eps []discoveryv1.EndpointSlice) string {
	return serviceInputs(svc, eps).String()
}

// HeldFlows is the number of flows the realised Services hold themselves (none once the switch has
// them: the bridge keeps them).
func (r *Reconciler) HeldFlows() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, rs := range r.realised {
		n += len(rs.flows)
	}
	return n
}
