package cluster

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

func TestNodePredicates(t *testing.T) {
	base := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"kubernetes.io/os": "windows"},
			Annotations: map[string]string{"a": "1"}},
		Spec: corev1.NodeSpec{PodCIDR: "10.244.1.0/24", PodCIDRs: []string{"10.244.1.0/24"}},
		Status: corev1.NodeStatus{
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.1.1"}},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
	now := metav1.NewTime(time.Now())
	// A WindowsNodeSelector of the operator's: its keys are read besides kubernetes.io/os.
	selector, err := labels.Parse("pool in (windows, win2022)")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name         string
		change       func(n *corev1.Node)
		facts, cidrs bool
	}{
		{"heartbeat", func(n *corev1.Node) {
			n.Status.Conditions[0].LastHeartbeatTime = now
			n.ResourceVersion = "2"
		}, false, false},
		{"images and capacity", func(n *corev1.Node) {
			n.Status.Images = []corev1.ContainerImage{{Names: []string{"pause"}}}
			n.Status.Capacity = corev1.ResourceList{}
		}, false, false},
		{"the os label", func(n *corev1.Node) { n.Labels["kubernetes.io/os"] = "linux" }, true, false},
		{"the os label removed", func(n *corev1.Node) { delete(n.Labels, "kubernetes.io/os") }, true, false},
		{"a label the WindowsNodeSelector reads", func(n *corev1.Node) { n.Labels["pool"] = "windows" }, true, false},
		// kube-controller-manager, on every new Node some seconds after it registers: nothing
		// winnet-controller reads.
		{"kube-controller-manager's beta os label", func(n *corev1.Node) { n.Labels["beta.kubernetes.io/os"] = "windows" }, false, false},
		{"another label", func(n *corev1.Node) { n.Labels["x"] = "y" }, false, false},
		{"annotation", func(n *corev1.Node) { n.Annotations["a"] = "2" }, true, false},
		{"annotation removed", func(n *corev1.Node) { delete(n.Annotations, "a") }, true, false},
		{"flannel's annotation", func(n *corev1.Node) { n.Annotations["flannel.alpha.coreos.com/public-ip"] = "192.168.1.1" }, true, false},
		// kube-controller-manager's TTL controller, on every Node as the cluster grows: nothing
		// winnet-controller reads.
		{"kube-controller-manager's TTL", func(n *corev1.Node) { n.Annotations["node.alpha.kubernetes.io/ttl"] = "15" }, false, false},
		{"a Kubernetes annotation", func(n *corev1.Node) { n.Annotations["volumes.kubernetes.io/controller-managed-attach-detach"] = "true" }, false, false},
		{"a k8s.io annotation", func(n *corev1.Node) { n.Annotations["csi.volume.k8s.io/nodeid"] = "x" }, false, false},
		{"address", func(n *corev1.Node) { n.Status.Addresses[0].Address = "192.168.1.2" }, true, false},
		{"pod CIDRs", func(n *corev1.Node) { n.Spec.PodCIDRs = append(n.Spec.PodCIDRs, "fd00::/64") }, true, true},
		{"deletion", func(n *corev1.Node) { n.DeletionTimestamp = &now }, true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			cur := base.DeepCopy()
			tc.change(cur)
			e := event.UpdateEvent{ObjectOld: base, ObjectNew: cur}
			g.Expect(nodeFactsChanged(nodeLabelsRead(selector)).Update(e)).To(Equal(tc.facts), "node reconciler")
			g.Expect(nodeCIDRsChanged().Update(e)).To(Equal(tc.cidrs), "route conflict reconciler")
		})
	}
}

// TestRoutePredicate: a RemoteSubnetRoute's creation and its status writes queue no Node (the apply
// would change nothing); its deletion, a spec change (generation), a label or an owner change do.
func TestRoutePredicate(t *testing.T) {
	g := NewWithT(t)
	p := routeChangedByOthers()
	base := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "n", Generation: 1, ResourceVersion: "1",
		Labels: map[string]string{ManagedByLabel: ManagedByValue}, OwnerReferences: []metav1.OwnerReference{{UID: "node-uid", Name: "n"}}}}
	g.Expect(p.Create(event.CreateEvent{Object: base})).To(BeFalse(), "created by winnet-controller's own apply")
	g.Expect(p.Delete(event.DeleteEvent{Object: base})).To(BeTrue(), "a deleted route comes back")
	for _, tc := range []struct {
		name   string
		change func(o *metav1.PartialObjectMetadata)
		want   bool
	}{
		{"status written", func(o *metav1.PartialObjectMetadata) { o.ResourceVersion = "2" }, false},
		{"spec edited", func(o *metav1.PartialObjectMetadata) { o.Generation = 2 }, true},
		{"label removed", func(o *metav1.PartialObjectMetadata) { o.Labels = nil }, true},
		{"owner removed", func(o *metav1.PartialObjectMetadata) { o.OwnerReferences = nil }, true},
		{"deletion started", func(o *metav1.PartialObjectMetadata) { now := metav1.Now(); o.DeletionTimestamp = &now }, true},
	} {
		cur := base.DeepCopy()
		tc.change(cur)
		g.Expect(p.Update(event.UpdateEvent{ObjectOld: base, ObjectNew: cur})).To(Equal(tc.want), tc.name)
	}
}
