package cluster

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
		{"label", func(n *corev1.Node) { n.Labels["x"] = "y" }, true, false},
		{"annotation", func(n *corev1.Node) { n.Annotations["a"] = "2" }, true, false},
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
			g.Expect(nodeFactsChanged().Update(e)).To(Equal(tc.facts), "node reconciler")
			g.Expect(nodeCIDRsChanged().Update(e)).To(Equal(tc.cidrs), "route conflict reconciler")
		})
	}
}
