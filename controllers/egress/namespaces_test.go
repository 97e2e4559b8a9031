package egress

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// TestNamespaceEvents checks that a Namespace wakes the Egress pass only while an Egress exists, and
// then on its creation, deletion and label changes, not on other updates.
func TestNamespaceEvents(t *testing.T) {
	g := NewWithT(t)
	ns := func(labels map[string]string, annotations map[string]string) *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Labels: labels, Annotations: annotations}}
	}
	old := ns(map[string]string{"team": "a"}, nil)
	relabelled := ns(map[string]string{"team": "b"}, nil)
	annotated := ns(map[string]string{"team": "a"}, map[string]string{"note": "x"})
	for _, egresses := range []bool{false, true} {
		p := namespaceEvents(func() bool { return egresses })
		g.Expect(p.Create(event.CreateEvent{Object: old})).To(Equal(egresses), "created, Egresses: %t", egresses)
		g.Expect(p.Delete(event.DeleteEvent{Object: old})).To(Equal(egresses), "deleted, Egresses: %t", egresses)
		g.Expect(p.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: relabelled})).To(Equal(egresses), "relabelled, Egresses: %t", egresses)
		g.Expect(p.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: annotated})).To(BeFalse(), "annotated, Egresses: %t", egresses)
	}
}
