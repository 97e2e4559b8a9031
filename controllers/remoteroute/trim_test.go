package remoteroute

import (
	"net/netip"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/nodenetwork"
	"github.com/winnet-io/winnet/internal/pipeline"
)

// TestTrimRouteKeepsWhatTheReconcilerReads computes the node's routes, skips and kept versions from
// whole RemoteSubnetRoutes, as winnet-controller writes them, and from trimmed copies: they must be
// equal, and the trimmed ones must hold no labels, annotations, owners, finalizers or condition text.
func TestTrimRouteKeepsWhatTheReconcilerReads(t *testing.T) {
	g := NewWithT(t)
	now := metav1.NewTime(time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC))
	whole := func(r networkv1alpha1.RemoteSubnetRoute, gen, observed int64, accepted metav1.ConditionStatus, conflict bool) networkv1alpha1.RemoteSubnetRoute {
		r.UID = types.UID("uid-" + r.Name)
		r.Generation = gen
		r.CreationTimestamp = now
		r.Labels = map[string]string{"app.kubernetes.io/managed-by": "winnet-controller"}
		r.Annotations = map[string]string{"note": "x"}
		r.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: r.Spec.NodeName, UID: "node-uid"}}
		r.Finalizers = []string{"example.com/keep"}
		r.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "winnet-controller"}}
		r.Status.ObservedGeneration = observed
		r.Status.Conditions = []metav1.Condition{
			{Type: networkv1alpha1.ConflictCondition, Status: metav1.ConditionFalse, Reason: "NoConflict", Message: "no other route claims these CIDRs", LastTransitionTime: now, ObservedGeneration: observed},
			{Type: networkv1alpha1.AcceptedCondition, Status: accepted, Reason: "Accepted", Message: "the route is installed by every winnet node", LastTransitionTime: now, ObservedGeneration: observed},
		}
		if conflict {
			r.Status.Conditions[0].Status = metav1.ConditionTrue
		}
		return r
	}
	flannel := rsr("flannel", "f1", "192.168.30.5", networkv1alpha1.RouteModeTunnel, "10.244.4.0/24")
	flannel.Spec.VNI, flannel.Spec.VTEPMAC = ptr.To(networkv1alpha1.VNI(4096)), "0e:6a:5e:1b:23:9c"
	list := []networkv1alpha1.RemoteSubnetRoute{
		whole(rsr("b", "b", "192.168.10.12", "", "10.244.2.0/24"), 1, 1, metav1.ConditionTrue, false),
		whole(rsr("far", "far", "192.168.99.12", networkv1alpha1.RouteModeRoute, "10.244.3.0/24"), 1, 1, metav1.ConditionTrue, false),
		whole(flannel, 2, 2, metav1.ConditionTrue, false),
		whole(rsr("conflict", "c", "192.168.10.19", "", "10.244.9.0/24"), 1, 1, metav1.ConditionFalse, true),
		whole(rsr("changed", "d", "192.168.10.20", "", "10.244.10.0/24"), 3, 2, metav1.ConditionTrue, false),
		whole(rsr("self", "me", "192.168.10.11", "", "10.244.1.0/24"), 1, 1, metav1.ConditionTrue, false),
	}
	rz := nodenetwork.Realized{Mode: networkv1alpha1.EncapsulationModeHybrid, VNI: 1, NodeSubnet: netip.MustParsePrefix("192.168.10.11/24"), Node: pipeline.Node{TunnelOFPort: 1}}

	trimmed := make([]networkv1alpha1.RemoteSubnetRoute, len(list))
	for i := range list {
		c := list[i].DeepCopy()
		got, err := TrimRoute(c)
		g.Expect(err).NotTo(HaveOccurred())
		trimmed[i] = *got.(*networkv1alpha1.RemoteSubnetRoute)
		g.Expect(trimmed[i].Labels).To(BeNil())
		g.Expect(trimmed[i].Annotations).To(BeNil())
		g.Expect(trimmed[i].OwnerReferences).To(BeNil())
		g.Expect(trimmed[i].Finalizers).To(BeNil())
		g.Expect(trimmed[i].ManagedFields).To(BeNil())
		g.Expect(trimmed[i].Status.Conditions).To(HaveLen(1))
		g.Expect(trimmed[i].Status.Conditions[0]).To(Equal(metav1.Condition{Type: networkv1alpha1.AcceptedCondition, Status: list[i].Status.Conditions[1].Status}))
	}

	// A route last accepted at an older generation is kept as it was: the same for both.
	wholeKept, trimmedKept := map[string]networkv1alpha1.RemoteSubnetRoute{}, map[string]networkv1alpha1.RemoteSubnetRoute{}
	older := list[4].DeepCopy()
	older.Generation, older.Spec.NodeIP = 2, "192.168.10.21"
	wholeKept["changed"] = *older
	o, _ := TrimRoute(older.DeepCopy())
	trimmedKept["changed"] = *o.(*networkv1alpha1.RemoteSubnetRoute)

	wantRoutes, wantSkips := desiredRoutes("me", rz, keepAccepted(list, wholeKept, true))
	gotRoutes, gotSkips := desiredRoutes("me", rz, keepAccepted(trimmed, trimmedKept, true))
	g.Expect(wantRoutes).To(HaveLen(4), "b, far, flannel and changed (as last accepted)")
	g.Expect(gotRoutes).To(Equal(wantRoutes))
	g.Expect(gotSkips).To(Equal(wantSkips))
	g.Expect(wantSkips).To(HaveLen(1), "the conflicting route")
	g.Expect(len(trimmedKept)).To(Equal(len(wholeKept)))

	_, err := TrimRoute(&metav1.PartialObjectMetadata{})
	g.Expect(err).NotTo(HaveOccurred(), "another type passes through")
}
