//go:build !windows

package cluster_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/cluster"
	"github.com/winnet-io/winnet/internal/controller"
	"github.com/winnet-io/winnet/test/framework"
)

var server *framework.APIServer

// TestMain runs the real winnet-controller manager against a real API server for the whole package.
func TestMain(m *testing.M) {
	framework.Main(m, "cluster controller tests", &server, framework.MainOptions{
		Controller: &controller.Options{
			MetricsBindAddress: "0", HealthProbeBindAddress: "0",
			Defaults: cluster.NetworkDefaults{ClusterCIDRs: []string{"10.244.0.0/16"}, ServiceCIDRs: []string{"10.96.0.0/12"}},
		},
	})
}

const timeout = 10 * time.Second

func newNode(name, cidr, ip string, windows bool) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelOSStable: "linux"}}}
	if windows {
		n.Labels[corev1.LabelOSStable] = "windows"
	}
	if cidr != "" {
		n.Spec.PodCIDR, n.Spec.PodCIDRs = cidr, []string{cidr}
	}
	return n
}

// createNode creates the Node and sets its InternalIP through the status subresource, as kubelet does.
func createNode(t *testing.T, g Gomega, n *corev1.Node, ip string) {
	ctx := context.Background()
	g.Expect(server.Client.Create(ctx, n)).To(Succeed())
	t.Cleanup(func() { _ = server.Client.Delete(context.Background(), n) })
	if ip != "" {
		setInternalIP(g, n.Name, ip)
	}
}

func setInternalIP(g Gomega, name, ip string) {
	ctx := context.Background()
	n := &corev1.Node{}
	g.Expect(server.Client.Get(ctx, client.ObjectKey{Name: name}, n)).To(Succeed())
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}, {Type: corev1.NodeHostName, Address: name}}
	g.Expect(server.Client.Status().Update(ctx, n)).To(Succeed())
}

func getRoute(name string) func(g Gomega) *networkv1alpha1.RemoteSubnetRoute {
	return func(g Gomega) *networkv1alpha1.RemoteSubnetRoute {
		r := &networkv1alpha1.RemoteSubnetRoute{}
		g.Expect(server.Client.Get(context.Background(), client.ObjectKey{Name: name}, r)).To(Succeed())
		return r
	}
}

func getNodeNetwork(name string) func(g Gomega) *networkv1alpha1.WindowsNodeNetwork {
	return func(g Gomega) *networkv1alpha1.WindowsNodeNetwork {
		w := &networkv1alpha1.WindowsNodeNetwork{}
		g.Expect(server.Client.Get(context.Background(), client.ObjectKey{Name: name}, w)).To(Succeed())
		return w
	}
}

func exists(obj client.Object) func() bool {
	return func() bool {
		return server.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj) == nil
	}
}

func TestNodesYieldRoutesAndNodeNetworks(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()

	createNode(t, g, newNode("win-1", "10.244.1.0/24", "", true), "192.168.50.11")
	createNode(t, g, newNode("linux-1", "10.244.2.0/24", "", false), "192.168.50.21")
	createNode(t, g, newNode("no-cidr", "", "", true), "192.168.50.31")

	// Every node with Pod CIDRs and an address gets a route, owned by the Node.
	g.Eventually(getRoute("win-1")).WithTimeout(timeout).Should(HaveField("Spec", Equal(networkv1alpha1.RemoteSubnetRouteSpec{
		NodeName: "win-1", PodCIDRs: []networkv1alpha1.CIDR{"10.244.1.0/24"}, NodeIP: "192.168.50.11", Mode: networkv1alpha1.RouteModeAuto,
	})))
	g.Eventually(getRoute("linux-1")).WithTimeout(timeout).Should(HaveField("Spec.NodeIP", Equal(networkv1alpha1.IPAddress("192.168.50.21"))))
	linuxRoute := getRoute("linux-1")(g)
	g.Expect(linuxRoute.OwnerReferences).To(ConsistOf(HaveField("Name", "linux-1")))

	// Only the Windows node gets a WindowsNodeNetwork, with the cluster defaults and API defaults.
	g.Eventually(getNodeNetwork("win-1")).WithTimeout(timeout).Should(HaveField("Spec.NodeIP", Equal(networkv1alpha1.IPv4Address("192.168.50.11"))))
	wnn := getNodeNetwork("win-1")(g)
	g.Expect(wnn.Spec.PodCIDRs).To(Equal([]networkv1alpha1.CIDR{"10.244.1.0/24"}))
	g.Expect(wnn.Spec.NodeIP).To(Equal(networkv1alpha1.IPv4Address("192.168.50.11")))
	g.Expect(wnn.Spec.ClusterCIDRs).To(Equal([]networkv1alpha1.CIDR{"10.244.0.0/16"}))
	g.Expect(wnn.Spec.ServiceCIDRs).To(Equal([]networkv1alpha1.CIDR{"10.96.0.0/12"}))
	g.Expect(wnn.Spec.Bridge.Name).To(Equal(networkv1alpha1.InterfaceName("br-int")))
	g.Consistently(exists(&networkv1alpha1.WindowsNodeNetwork{ObjectMeta: metav1.ObjectMeta{Name: "linux-1"}})).WithTimeout(time.Second).Should(BeFalse())
	g.Expect(exists(&networkv1alpha1.RemoteSubnetRoute{ObjectMeta: metav1.ObjectMeta{Name: "no-cidr"}})()).To(BeFalse())

	// A new InternalIP moves the route's tunnel destination and the node's own nodeIP.
	setInternalIP(g, "win-1", "192.168.50.12")
	g.Eventually(getRoute("win-1")).WithTimeout(timeout).Should(HaveField("Spec.NodeIP", Equal(networkv1alpha1.IPAddress("192.168.50.12"))))
	g.Eventually(getNodeNetwork("win-1")).WithTimeout(timeout).Should(HaveField("Spec.NodeIP", Equal(networkv1alpha1.IPv4Address("192.168.50.12"))))

	// A route deleted by hand comes back.
	g.Expect(server.Client.Delete(ctx, linuxRoute)).To(Succeed())
	g.Eventually(getRoute("linux-1")).WithTimeout(timeout).Should(HaveField("UID", Not(Equal(linuxRoute.UID))))

	// Deleting the Node removes what was derived from it.
	g.Expect(server.Client.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "win-1"}})).To(Succeed())
	g.Eventually(exists(&networkv1alpha1.RemoteSubnetRoute{ObjectMeta: metav1.ObjectMeta{Name: "win-1"}})).WithTimeout(timeout).Should(BeFalse())
	g.Eventually(exists(&networkv1alpha1.WindowsNodeNetwork{ObjectMeta: metav1.ObjectMeta{Name: "win-1"}})).WithTimeout(timeout).Should(BeFalse())
}

func TestUserOwnedNodeIPIsKept(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	createNode(t, g, newNode("win-own", "10.244.5.0/24", "", true), "192.168.50.51")
	g.Eventually(getNodeNetwork("win-own")).WithTimeout(timeout).Should(HaveField("Spec.NodeIP", Equal(networkv1alpha1.IPv4Address("192.168.50.51"))))

	// The user pins the transport address to another adapter's address.
	wnn := getNodeNetwork("win-own")(g)
	wnn.Spec.NodeIP = "192.168.60.51"
	g.Expect(server.Client.Update(ctx, wnn, client.FieldOwner("kubectl-edit"))).To(Succeed())
	setInternalIP(g, "win-own", "192.168.50.52")

	g.Eventually(getRoute("win-own")).WithTimeout(timeout).Should(HaveField("Spec.NodeIP", Equal(networkv1alpha1.IPAddress("192.168.50.52"))))
	g.Consistently(getNodeNetwork("win-own")).WithTimeout(2 * time.Second).Should(HaveField("Spec.NodeIP", Equal(networkv1alpha1.IPv4Address("192.168.60.51"))))
}

func TestManualRoutesAndConflicts(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	createNode(t, g, newNode("linux-c", "10.244.7.0/24", "", false), "192.168.50.71")
	g.Eventually(conditionOf("linux-c", networkv1alpha1.AcceptedCondition)).WithTimeout(timeout).Should(Equal(metav1.ConditionTrue))

	// A manual route to a subnet outside the cluster is left alone and accepted.
	manual := &networkv1alpha1.RemoteSubnetRoute{
		ObjectMeta: metav1.ObjectMeta{Name: "storage"},
		Spec:       networkv1alpha1.RemoteSubnetRouteSpec{PodCIDRs: []networkv1alpha1.CIDR{"172.20.0.0/16"}, NodeIP: "192.168.50.1", Mode: networkv1alpha1.RouteModeRoute},
	}
	g.Expect(server.Client.Create(ctx, manual)).To(Succeed())
	t.Cleanup(func() { _ = server.Client.Delete(context.Background(), manual) })
	g.Eventually(conditionOf("storage", networkv1alpha1.ConflictCondition)).WithTimeout(timeout).Should(Equal(metav1.ConditionFalse))
	g.Expect(getRoute("storage")(g).Spec).To(Equal(manual.Spec))

	// A manual route that swallows a node's Pod CIDR conflicts, and so does the node's route; both
	// name the other object.
	wide := &networkv1alpha1.RemoteSubnetRoute{
		ObjectMeta: metav1.ObjectMeta{Name: "too-wide"},
		Spec:       networkv1alpha1.RemoteSubnetRouteSpec{PodCIDRs: []networkv1alpha1.CIDR{"10.244.0.0/16"}, NodeIP: "192.168.50.2"},
	}
	g.Expect(server.Client.Create(ctx, wide)).To(Succeed())
	g.Eventually(conditionOf("too-wide", networkv1alpha1.ConflictCondition)).WithTimeout(timeout).Should(Equal(metav1.ConditionTrue))
	wideConflict := meta.FindStatusCondition(getRoute("too-wide")(g).Status.Conditions, networkv1alpha1.ConflictCondition)
	g.Expect(wideConflict.Message).To(ContainSubstring("10.244.0.0/16 overlaps 10.244.7.0/24 of Node linux-c"))
	g.Expect(wideConflict.Reason).To(Equal(networkv1alpha1.OverlapReason))
	g.Eventually(conditionOf("linux-c", networkv1alpha1.ConflictCondition)).WithTimeout(timeout).Should(Equal(metav1.ConditionTrue))
	g.Expect(meta.FindStatusCondition(getRoute("linux-c")(g).Status.Conditions, networkv1alpha1.ConflictCondition).Message).
		To(ContainSubstring("10.244.7.0/24 overlaps 10.244.0.0/16 of RemoteSubnetRoute too-wide"))
	g.Expect(conditionOf("linux-c", networkv1alpha1.AcceptedCondition)(g)).To(Equal(metav1.ConditionFalse))
	g.Expect(conditionOf("storage", networkv1alpha1.ConflictCondition)(g)).To(Equal(metav1.ConditionFalse))

	// Removing the offending route clears the conflict.
	g.Expect(server.Client.Delete(ctx, wide)).To(Succeed())
	g.Eventually(conditionOf("linux-c", networkv1alpha1.ConflictCondition)).WithTimeout(timeout).Should(Equal(metav1.ConditionFalse))
	g.Expect(conditionOf("linux-c", networkv1alpha1.AcceptedCondition)(g)).To(Equal(metav1.ConditionTrue))

	// Editing a route into another's CIDR makes both conflict; editing it back clears both (the
	// other route is found through the edited route's claims before and after the change).
	setCIDR := func(cidr networkv1alpha1.CIDR) {
		rsr := getRoute("storage")(g)
		rsr.Spec.PodCIDRs = []networkv1alpha1.CIDR{cidr}
		g.Expect(server.Client.Update(ctx, rsr)).To(Succeed())
	}
	setCIDR("10.244.7.128/25")
	g.Eventually(conditionOf("linux-c", networkv1alpha1.ConflictCondition)).WithTimeout(timeout).Should(Equal(metav1.ConditionTrue))
	g.Eventually(conditionOf("storage", networkv1alpha1.ConflictCondition)).WithTimeout(timeout).Should(Equal(metav1.ConditionTrue))
	setCIDR("172.20.0.0/16")
	g.Eventually(conditionOf("linux-c", networkv1alpha1.ConflictCondition)).WithTimeout(timeout).Should(Equal(metav1.ConditionFalse))
	g.Eventually(conditionOf("storage", networkv1alpha1.ConflictCondition)).WithTimeout(timeout).Should(Equal(metav1.ConditionFalse))
	g.Expect(getRoute("storage")(g).Status.ObservedGeneration).To(Equal(getRoute("storage")(g).Generation))
}

func conditionOf(route, typ string) func(g Gomega) metav1.ConditionStatus {
	return func(g Gomega) metav1.ConditionStatus {
		c := meta.FindStatusCondition(getRoute(route)(g).Status.Conditions, typ)
		if c == nil {
			return metav1.ConditionUnknown
		}
		return c.Status
	}
}

// TestUninstallLeaseStopsDerivation: while the uninstall Lease exists in winnet-controller's
// namespace ("default" here: no leader election namespace, not in a Pod), a Windows node gets no
// WindowsNodeNetwork and no RemoteSubnetRoute; once it is gone, the next change of the Node does.
func TestUninstallLeaseStopsDerivation(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: cluster.UninstallLeaseName}}
	g.Expect(server.Client.Create(ctx, lease)).To(Succeed())
	t.Cleanup(func() { _ = server.Client.Delete(context.Background(), lease) })

	n := newNode("win-uninstalling", "10.244.77.0/24", "", true)
	createNode(t, g, n, "192.168.77.2")
	g.Consistently(func() bool {
		return apierrors.IsNotFound(server.Client.Get(ctx, client.ObjectKey{Name: n.Name}, &networkv1alpha1.WindowsNodeNetwork{})) &&
			apierrors.IsNotFound(server.Client.Get(ctx, client.ObjectKey{Name: n.Name}, &networkv1alpha1.RemoteSubnetRoute{}))
	}).WithTimeout(2*time.Second).Should(BeTrue(), "nothing is derived while winnet is being uninstalled")

	g.Expect(server.Client.Delete(ctx, lease)).To(Succeed())
	setInternalIP(g, n.Name, "192.168.77.3")
	g.Eventually(getNodeNetwork(n.Name)).WithTimeout(timeout).Should(HaveField("Spec.NodeIP", networkv1alpha1.IPv4Address("192.168.77.3")))
	g.Eventually(getRoute(n.Name)).WithTimeout(timeout).Should(HaveField("Spec.NodeIP", networkv1alpha1.IPAddress("192.168.77.3")))
}
