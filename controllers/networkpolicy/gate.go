package networkpolicy

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
)

// The policy gate: a new local Pod's port is bound (it forwards) only once a pass that knew the
// Pod, at its ofport, has committed its flows. The pass decides whether policies select the Pod
// and installs their isolation and rules for it in the same bundle as every other policy flow, so
// a Pod no policy selects waits for one pass too (it cannot be known without one); the Pod network
// asks through WaitPolicies (podendpoint.PolicyGate).

// gate is what the last committed pass covered.
type gate struct {
	mu sync.Mutex
	// covered maps each local Pod the last committed pass compiled, with its labels known, to
	// its ofport.
	covered map[types.NamespacedName]uint32
	// passed is closed, and replaced, at every committed pass.
	passed chan struct{}
	// wake asks for a full pass (SetupWithManager relays it to the work queue).
	wake chan struct{}
}

func (g *gate) init() {
	if g.passed == nil {
		g.passed = make(chan struct{})
	}
	if g.wake == nil {
		g.wake = make(chan struct{}, 1)
	}
}

// covered records the local Pods of a pass whose flows are committed: those attached with an
// ofport and known from the Pod cache, whose labels Compute matched against every policy.
func (r *Reconciler) covered(in Inputs) {
	known := make(map[types.NamespacedName]bool, len(in.Pods))
	for i := range in.Pods {
		known[types.NamespacedName{Namespace: in.Pods[i].Namespace, Name: in.Pods[i].Name}] = true
	}
	covered := make(map[types.NamespacedName]uint32, len(in.Local))
	for _, lp := range in.Local {
		if known[lp.Key] {
			covered[lp.Key] = lp.Pod.OFPort
		}
	}
	g := &r.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	g.init()
	g.covered = covered
	close(g.passed)
	g.passed = make(chan struct{})
}

// WaitPolicies returns once a committed pass has compiled the policies of local Pod pod at ofport
// (its flows, isolation included, are in the switch), or with ctx's error. It asks for a pass when
// the last one did not cover the Pod. A Pod the API server does not have (read past the cache,
// after a pass that did not cover it) is selected by no policy and does not wait: kubelet creates
// a Pod before its sandbox, so only a sandbox of no Pod, or of a Pod already deleted, is such.
func (r *Reconciler) WaitPolicies(ctx context.Context, pod types.NamespacedName, ofport int32) error {
	g := &r.gate
	for passes := 0; ; passes++ {
		g.mu.Lock()
		g.init()
		ok := ofport > 0 && g.covered[pod] == uint32(ofport)
		passed := g.passed
		g.mu.Unlock()
		if ok {
			return nil
		}
		if passes == 1 && r.APIReader != nil {
			err := r.APIReader.Get(ctx, pod, &corev1.Pod{})
			if apierrors.IsNotFound(err) {
				ctrl.LoggerFrom(ctx).Info("The API server has no such Pod: no NetworkPolicy selects it", "pod", pod)
				return nil
			}
		}
		if passes == 0 {
			r.markChanged(nil)
			select {
			case g.wake <- struct{}{}:
			default: // a pass is asked for already
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-passed:
		}
	}
}
