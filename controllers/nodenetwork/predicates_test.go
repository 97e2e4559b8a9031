package nodenetwork

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
)

// TestNotOwnStatusWrite: the node's own status writes do not run a converge; what the reconciler
// reads does.
func TestNotOwnStatusWrite(t *testing.T) {
	base := &networkv1alpha1.WindowsNodeNetwork{ObjectMeta: metav1.ObjectMeta{Name: "n", Generation: 3, ResourceVersion: "10",
		Labels: map[string]string{"a": "1"}, Annotations: map[string]string{"b": "2"}, Finalizers: []string{"f"}}}
	now := metav1.NewTime(time.Now())
	for _, tc := range []struct {
		name   string
		change func(w *networkv1alpha1.WindowsNodeNetwork)
		want   bool
	}{
		{"status written", func(w *networkv1alpha1.WindowsNodeNetwork) { w.Status.FlowCount, w.ResourceVersion = 120, "11" }, false},
		{"spec changed", func(w *networkv1alpha1.WindowsNodeNetwork) { w.Generation = 4 }, true},
		{"label", func(w *networkv1alpha1.WindowsNodeNetwork) { w.Labels["a"] = "2" }, true},
		{"annotation", func(w *networkv1alpha1.WindowsNodeNetwork) { w.Annotations["c"] = "3" }, true},
		{"finalizer removed", func(w *networkv1alpha1.WindowsNodeNetwork) { w.Finalizers = nil }, true},
		{"deletion", func(w *networkv1alpha1.WindowsNodeNetwork) { w.DeletionTimestamp = &now }, true},
	} {
		cur := base.DeepCopy()
		tc.change(cur)
		if got := notOwnStatusWrite().Update(event.UpdateEvent{ObjectOld: base, ObjectNew: cur}); got != tc.want {
			t.Errorf("%s: converge %v, want %v", tc.name, got, tc.want)
		}
	}
}
