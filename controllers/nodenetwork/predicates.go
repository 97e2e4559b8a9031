package nodenetwork

import (
	"maps"
	"slices"

	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// notOwnStatusWrite passes the node's WindowsNodeNetwork's updates that change something the
// reconciler reads: its spec (generation), labels, annotations, finalizers or the start of its
// deletion. Not a status write alone: the reconciler is the status's only writer, and each of its
// writes came back as an update that ran a whole converge, which wrote the status again whenever a
// count in it (flows, Services, policies, routes) had moved meanwhile: while a cluster grows, a
// write every few hundred milliseconds from every agent (make bench-scale). A status someone else
// changed is written back by the next converge (every resync period at the latest).
func notOwnStatusWrite() predicate.Funcs {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		old, cur := e.ObjectOld, e.ObjectNew
		if old == nil || cur == nil {
			return true
		}
		return old.GetGeneration() != cur.GetGeneration() || !maps.Equal(old.GetLabels(), cur.GetLabels()) ||
			!maps.Equal(old.GetAnnotations(), cur.GetAnnotations()) || !slices.Equal(old.GetFinalizers(), cur.GetFinalizers()) ||
			old.GetDeletionTimestamp().IsZero() != cur.GetDeletionTimestamp().IsZero()
	}}
}
