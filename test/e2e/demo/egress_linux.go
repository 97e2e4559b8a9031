package main

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/test/e2e/cluster"
)

// egressName and egressIP are the demo's Egress: pod-a2's connections to outside leave from egressIP.
const egressName = "demo-egress"

var egressIP = netip.MustParseAddr("192.168.77.150")

// egressDemo labels pod-a2 egress=demo and creates an Egress giving the Pods so labelled in the default
// namespace the source address egressIP, held by node-a (the Egresses of this release SNAT only their
// holder's own Pods: docs/egress.md), and waits until node-a reports it Ready.
func egressDemo(ctx context.Context, c *cluster.Cluster, pods map[string]*cluster.Pod) error {
	obj := &corev1.Pod{}
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: pods["pod-a2"].Namespace, Name: "pod-a2"}, obj); err != nil {
		return err
	}
	before := obj.DeepCopy()
	if obj.Labels == nil {
		obj.Labels = map[string]string{}
	}
	obj.Labels["egress"] = "demo"
	if err := c.Client.Patch(ctx, obj, client.MergeFrom(before)); err != nil {
		return fmt.Errorf("labelling Pod pod-a2: %w", err)
	}
	eg := &networkv1alpha1.Egress{ObjectMeta: metav1.ObjectMeta{Name: egressName}, Spec: networkv1alpha1.EgressSpec{
		PodSelector: networkv1alpha1.LabelSelector{MatchLabels: map[string]networkv1alpha1.LabelValue{"egress": "demo"}},
		NamespaceSelector: networkv1alpha1.LabelSelector{MatchLabels: map[string]networkv1alpha1.LabelValue{
			"kubernetes.io/metadata.name": networkv1alpha1.LabelValue(cluster.PodNamespace)}},
		EgressIP:     networkv1alpha1.IPv4Address(egressIP.String()),
		NodeSelector: &networkv1alpha1.LabelSelector{MatchLabels: map[string]networkv1alpha1.LabelValue{corev1.LabelHostname: "node-a"}},
	}}
	if err := c.Client.Create(ctx, eg); err != nil {
		return fmt.Errorf("creating Egress %s: %w", egressName, err)
	}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if err := c.Client.Get(ctx, client.ObjectKeyFromObject(eg), eg); err == nil &&
			meta.IsStatusConditionTrue(eg.Status.Conditions, networkv1alpha1.ReadyCondition) {
			return nil
		}
	}
	return fmt.Errorf("Egress %s is not Ready within a minute: %v", egressName, eg.Status.Conditions)
}
