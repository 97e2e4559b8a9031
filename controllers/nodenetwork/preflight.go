package nodenetwork

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
)

// Preflight holds the latest result of the agent's preflight (internal/preflight) as a condition:
// the reconciler writes it into the status with the rest, in its one patch (a second writer of the
// conditions list would race the reconciler's merge patch, which replaces the list), and records an
// Event for each new result. Safe for concurrent use.
type Preflight struct {
	mu      sync.Mutex
	cond    *metav1.Condition
	seq     int
	changed chan event.GenericEvent
}

// NewPreflight returns an empty holder.
func NewPreflight() *Preflight {
	return &Preflight{changed: make(chan event.GenericEvent, 1)}
}

// Set records a new result (Type, ObservedGeneration and LastTransitionTime are the reconciler's
// to set) and wakes the reconciler of node.
func (p *Preflight) Set(node string, c metav1.Condition) {
	p.mu.Lock()
	p.cond, p.seq = &c, p.seq+1
	p.mu.Unlock()
	wnn := &networkv1alpha1.WindowsNodeNetwork{}
	wnn.Name = node
	select {
	case p.changed <- event.GenericEvent{Object: wnn}:
	default: // a wake is pending
	}
}

func (p *Preflight) latest() (*metav1.Condition, int) {
	if p == nil {
		return nil, 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cond, p.seq
}

// setPreflightCondition writes the latest preflight result into the status; it returns the result
// when it is newer than reported (the caller records its Event).
func (r *Reconciler) setPreflightCondition(w *networkv1alpha1.WindowsNodeNetwork) *metav1.Condition {
	c, seq := r.Preflight.latest()
	if c == nil {
		return nil
	}
	cond := *c
	cond.Type, cond.ObservedGeneration = networkv1alpha1.PreflightCondition, w.Generation
	meta.SetStatusCondition(&w.Status.Conditions, cond)
	if seq == r.preflightReported {
		return nil
	}
	r.preflightReported = seq
	return &cond
}

// preflightEvent records the Event of a new preflight result on the node network: Normal when
// every check passed, Warning otherwise. The chart's admission policy admits notes of at most 1024
// characters.
func (r *Reconciler) preflightEvent(w *networkv1alpha1.WindowsNodeNetwork, c *metav1.Condition) {
	typ := corev1.EventTypeWarning
	if c.Reason == networkv1alpha1.PreflightPassedReason {
		typ = corev1.EventTypeNormal
	}
	note := c.Message
	if len(note) > 1000 {
		note = note[:1000] + "..."
	}
	r.Recorder.Eventf(w, nil, typ, c.Reason, "Preflight", "%s", note)
}
