//go:build !windows

// envtest does not compile for windows in controller-runtime v0.25 (see LIBS.md).

package controller_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/cluster"
	"github.com/winnet-io/winnet/internal/controller"
	"github.com/winnet-io/winnet/internal/egress"
	"github.com/winnet-io/winnet/test/framework"
)

var server *framework.APIServer

func TestMain(m *testing.M) {
	framework.Main(m, "uninstall tests", &server, framework.MainOptions{})
}

// TestUninstallReportsNodesThatDidNotFinish: with no agent to remove its finalizer, a node's
// WindowsNodeNetwork outlives the timeout. The uninstall names the node, still removes every winnet
// object (finalizers included) and winnet's flannel annotations, deletes its Lease (no controller
// Deployment owns it) and fails with ErrNodesNotRestored; run again, it succeeds with nothing to do.
func TestUninstallReportsNodesThatDidNotFinish(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	const ns = "default"
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "win-stuck",
		Annotations: map[string]string{controller.FlannelAnnotationPrefix + "public-ip": "192.168.9.2", "other": "kept"}}}
	g.Expect(server.Client.Create(ctx, node)).To(Succeed())
	t.Cleanup(func() { _ = server.Client.Delete(context.Background(), node) })
	wnn := &networkv1alpha1.WindowsNodeNetwork{
		ObjectMeta: metav1.ObjectMeta{Name: node.Name, Finalizers: []string{"network.winnet.io/node-network"}},
		Spec:       networkv1alpha1.WindowsNodeNetworkSpec{PodCIDRs: []networkv1alpha1.CIDR{"10.244.9.0/24"}},
	}
	g.Expect(server.Client.Create(ctx, wnn)).To(Succeed())
	pep := &networkv1alpha1.PodEndpoint{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", Finalizers: []string{"network.winnet.io/pod-endpoint"}},
		Spec: networkv1alpha1.PodEndpointSpec{PodName: "web", PodUID: "0a0a0a0a-0000-0000-0000-000000000001", NodeName: node.Name,
			SandboxID: "sandbox", InterfaceName: "eth0", IPs: []networkv1alpha1.InterfaceAddress{"10.244.9.5/24"},
			MAC: "aa:bb:cc:00:09:05", Gateway: "10.244.9.1"},
	}
	g.Expect(server.Client.Create(ctx, pep)).To(Succeed())
	// The node's Egress Lease, as its agent renews it; another Lease of the namespace is not winnet's.
	egressLease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: egress.LeaseName(node.Name)},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node.Name), LeaseDurationSeconds: ptr.To[int32](10)}}
	g.Expect(server.Client.Create(ctx, egressLease)).To(Succeed())
	otherLease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "someone-elses"}}
	g.Expect(server.Client.Create(ctx, otherLease)).To(Succeed())
	t.Cleanup(func() { _ = server.Client.Delete(context.Background(), otherLease) })

	var out bytes.Buffer
	opts := controller.UninstallOptions{Namespace: ns, ControllerDeployment: "winnet-controller", AgentDaemonSet: "winnet-agent",
		Timeout: time.Second, PollInterval: 100 * time.Millisecond, Out: &out}
	err := controller.Uninstall(ctx, server.Client, opts)
	g.Expect(err).To(MatchError(controller.ErrNodesNotRestored))
	g.Expect(err).To(MatchError(ContainSubstring("win-stuck")))
	g.Expect(out.String()).To(ContainSubstring("node win-stuck: its agent did not give the node its network back within 1s"))
	g.Expect(out.String()).To(ContainSubstring("run `winnet-agent reset` on it"))

	for _, obj := range []client.Object{&networkv1alpha1.WindowsNodeNetwork{}, &networkv1alpha1.PodEndpoint{}} {
		key := client.ObjectKey{Name: node.Name}
		if _, ok := obj.(*networkv1alpha1.PodEndpoint); ok {
			key = client.ObjectKeyFromObject(pep)
		}
		err := server.Client.Get(ctx, key, obj)
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%T %s is gone: %v", obj, key, err)
	}
	g.Expect(server.Client.Get(ctx, client.ObjectKeyFromObject(node), node)).To(Succeed())
	g.Expect(node.Annotations).To(Equal(map[string]string{"other": "kept"}))
	err = server.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: cluster.UninstallLeaseName}, &coordinationv1.Lease{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no controller Deployment owns the Lease: the uninstall deletes it")
	err = server.Client.Get(ctx, client.ObjectKeyFromObject(egressLease), &coordinationv1.Lease{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the node's Egress Lease is gone: %v", err)
	g.Expect(server.Client.Get(ctx, client.ObjectKeyFromObject(otherLease), &coordinationv1.Lease{})).To(Succeed(), "another Lease is kept")

	out.Reset()
	g.Expect(controller.Uninstall(ctx, server.Client, opts)).To(Succeed())
	g.Expect(out.String()).To(HaveSuffix("winnet is uninstalled\n"))
}
