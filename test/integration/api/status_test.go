//go:build !windows

package api

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
)

// TestStatusSubresource proves that status and spec are written through separate endpoints: an agent
// writing status cannot change the spec, a user editing the spec cannot fake status, and only spec
// changes advance the generation.
func TestStatusSubresource(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	c := server.Client

	wnn := &networkv1alpha1.WindowsNodeNetwork{
		ObjectMeta: metav1.ObjectMeta{Name: "status-node"},
		Spec:       networkv1alpha1.WindowsNodeNetworkSpec{PodCIDRs: []networkv1alpha1.CIDR{"10.244.8.0/24"}, NodeIP: "192.168.10.18"},
	}
	g.Expect(c.Create(ctx, wnn)).To(Succeed())
	t.Cleanup(func() { _ = c.Delete(ctx, wnn) })
	g.Expect(wnn.Generation).To(Equal(int64(1)))

	// The agent writes status; a spec change riding along is ignored.
	wnn.Status = networkv1alpha1.WindowsNodeNetworkStatus{
		ObservedGeneration: 1,
		HNSNetworkID:       "6f2c1a9e-3b4d-4e5f-8a7b-9c0d1e2f3a4b",
		Uplink:             &networkv1alpha1.PortStatus{Name: "Ethernet 2", MAC: "00:15:5d:01:02:03", OFPort: 32770},
		Gateway:            &networkv1alpha1.GatewayStatus{IP: "10.244.8.1", MAC: "02:42:0a:f4:08:01", OFPort: 32769},
		Tunnel:             &networkv1alpha1.TunnelStatus{Type: networkv1alpha1.TunnelTypeVXLAN, Port: 4789, OFPort: 32768},
		MTU:                1450,
		FlowCount:          42,
		RemoteRoutes:       networkv1alpha1.RemoteRoutesStatus{Desired: 3, Installed: 2, Failed: 1},
	}
	meta.SetStatusCondition(&wnn.Status.Conditions, metav1.Condition{
		Type: networkv1alpha1.RoutesReadyCondition, Status: metav1.ConditionFalse,
		Reason: networkv1alpha1.RoutesFailedReason, Message: "route linux-node-3 failed", ObservedGeneration: 1,
	})
	meta.SetStatusCondition(&wnn.Status.Conditions, metav1.Condition{
		Type: networkv1alpha1.ReadyCondition, Status: metav1.ConditionFalse,
		Reason: networkv1alpha1.ComponentsNotReadyReason, Message: "RoutesReady is False", ObservedGeneration: 1,
	})
	wantStatus := *wnn.Status.DeepCopy()
	wnn.Spec.NodeIP = "192.168.10.99"
	g.Expect(c.Status().Update(ctx, wnn)).To(Succeed())

	got := &networkv1alpha1.WindowsNodeNetwork{}
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(wnn), got)).To(Succeed())
	g.Expect(got.Spec.NodeIP).To(Equal(networkv1alpha1.IPv4Address("192.168.10.18")), "a status write must not change the spec")
	g.Expect(got.Generation).To(Equal(int64(1)), "a status write must not advance the generation")
	g.Expect(got.Status.RemoteRoutes).To(Equal(wantStatus.RemoteRoutes))
	g.Expect(got.Status.Uplink).To(Equal(wantStatus.Uplink))
	g.Expect(meta.FindStatusCondition(got.Status.Conditions, networkv1alpha1.RoutesReadyCondition).Message).To(Equal("route linux-node-3 failed"))

	// A user edits the spec; a status change riding along is ignored and the generation advances.
	got.Spec.Encapsulation.TunnelType = networkv1alpha1.TunnelTypeGeneve
	got.Status.FlowCount = 1
	g.Expect(c.Update(ctx, got)).To(Succeed())
	again := &networkv1alpha1.WindowsNodeNetwork{}
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(wnn), again)).To(Succeed())
	g.Expect(again.Spec.Encapsulation.TunnelType).To(Equal(networkv1alpha1.TunnelTypeGeneve))
	g.Expect(again.Status.FlowCount).To(Equal(int32(42)), "a spec write must not change the status")
	g.Expect(again.Generation).To(Equal(int64(2)))

	// Conditions are a map keyed by type: two conditions of one type are refused.
	again.Status.Conditions = append(again.Status.Conditions, metav1.Condition{
		Type: networkv1alpha1.ReadyCondition, Status: metav1.ConditionTrue, Reason: networkv1alpha1.ReadyReason,
		LastTransitionTime: metav1.Now(),
	})
	err := c.Status().Update(ctx, again)
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
	g.Expect(err.Error()).To(ContainSubstring(`status.conditions[2]: Duplicate value: {"type":"Ready"}`))
}

// TestStatusSubresourceOnEveryKind writes status on RemoteSubnetRoute and PodEndpoint.
func TestStatusSubresourceOnEveryKind(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	c := server.Client

	rsr := &networkv1alpha1.RemoteSubnetRoute{
		ObjectMeta: metav1.ObjectMeta{Name: "status-route"},
		Spec:       networkv1alpha1.RemoteSubnetRouteSpec{PodCIDRs: []networkv1alpha1.CIDR{"10.244.9.0/24"}, NodeIP: "192.168.10.29"},
	}
	g.Expect(c.Create(ctx, rsr)).To(Succeed())
	t.Cleanup(func() { _ = c.Delete(ctx, rsr) })
	meta.SetStatusCondition(&rsr.Status.Conditions, metav1.Condition{
		Type: networkv1alpha1.ConflictCondition, Status: metav1.ConditionTrue, Reason: networkv1alpha1.OverlapReason,
		Message: "10.244.9.0/24 overlaps RemoteSubnetRoute other",
	})
	rsr.Status.ObservedGeneration = 1
	g.Expect(c.Status().Update(ctx, rsr)).To(Succeed())
	gotRSR := &networkv1alpha1.RemoteSubnetRoute{}
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(rsr), gotRSR)).To(Succeed())
	g.Expect(meta.IsStatusConditionTrue(gotRSR.Status.Conditions, networkv1alpha1.ConflictCondition)).To(BeTrue())

	pep := &networkv1alpha1.PodEndpoint{
		ObjectMeta: metav1.ObjectMeta{Name: "status-pod", Namespace: "default"},
		Spec: networkv1alpha1.PodEndpointSpec{
			PodName: "status-pod", PodUID: "0d1e2f3a-4b5c-4d6e-8f70-8192a3b4c5d6", NodeName: "win-node-1",
			SandboxID: "abc123", IPs: []networkv1alpha1.InterfaceAddress{"10.244.1.10/24"}, MAC: "02:42:0a:f4:01:0a",
		},
	}
	g.Expect(c.Create(ctx, pep)).To(Succeed())
	t.Cleanup(func() { _ = c.Delete(ctx, pep) })
	pep.Status = networkv1alpha1.PodEndpointStatus{
		HNSEndpointID: "9a8b7c6d", OVSPort: "status-pod-abc1", OFPort: 12,
		AttachedContainers: []string{"abc123", "def456"},
	}
	g.Expect(c.Status().Update(ctx, pep)).To(Succeed())
	gotPEP := &networkv1alpha1.PodEndpoint{}
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(pep), gotPEP)).To(Succeed())
	g.Expect(gotPEP.Status.AttachedContainers).To(Equal([]string{"abc123", "def456"}))
	g.Expect(gotPEP.Status.OFPort).To(Equal(int32(12)))
}
