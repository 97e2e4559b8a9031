//go:build !windows

package api

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
)

// TestDefaultsAreApplied creates minimal objects with the typed client and reads back the defaults
// the API server filled in.
func TestDefaultsAreApplied(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()

	wnn := &networkv1alpha1.WindowsNodeNetwork{
		ObjectMeta: metav1.ObjectMeta{Name: "defaults-node"},
		Spec:       networkv1alpha1.WindowsNodeNetworkSpec{PodCIDRs: []networkv1alpha1.CIDR{"10.244.5.0/24"}},
	}
	g.Expect(server.Client.Create(ctx, wnn)).To(Succeed())
	t.Cleanup(func() { _ = server.Client.Delete(ctx, wnn) })
	g.Expect(wnn.Spec).To(Equal(networkv1alpha1.WindowsNodeNetworkSpec{
		PodCIDRs:   []networkv1alpha1.CIDR{"10.244.5.0/24"},
		HNSNetwork: networkv1alpha1.HNSNetworkSpec{Name: networkv1alpha1.DefaultHNSNetworkName, Type: networkv1alpha1.HNSNetworkTypeTransparent},
		Bridge:     networkv1alpha1.BridgeSpec{Name: networkv1alpha1.DefaultBridgeName, DatapathType: networkv1alpha1.DatapathTypeSystem},
		Gateway:    networkv1alpha1.GatewaySpec{Name: networkv1alpha1.DefaultGatewayName},
		Encapsulation: networkv1alpha1.EncapsulationSpec{
			Mode:       networkv1alpha1.EncapsulationModeEncap,
			TunnelType: networkv1alpha1.TunnelTypeVXLAN,
			VNI:        networkv1alpha1.DefaultVNI,
			// Tunnel admission is on unless turned off (docs/tunnel-admission.md).
			TunnelAdmission: networkv1alpha1.TunnelAdmissionEnforce,
		},
		SNAT: networkv1alpha1.SNATSpec{Enabled: ptr.To(true)},
	}))

	rsr := &networkv1alpha1.RemoteSubnetRoute{
		ObjectMeta: metav1.ObjectMeta{Name: "defaults-route"},
		Spec:       networkv1alpha1.RemoteSubnetRouteSpec{PodCIDRs: []networkv1alpha1.CIDR{"10.244.6.0/24"}, NodeIP: "192.168.10.26"},
	}
	g.Expect(server.Client.Create(ctx, rsr)).To(Succeed())
	t.Cleanup(func() { _ = server.Client.Delete(ctx, rsr) })
	g.Expect(rsr.Spec.Mode).To(Equal(networkv1alpha1.RouteModeAuto))

	pep := &networkv1alpha1.PodEndpoint{
		ObjectMeta: metav1.ObjectMeta{Name: "defaults-pod", Namespace: "default"},
		Spec: networkv1alpha1.PodEndpointSpec{
			PodName: "defaults-pod", PodUID: "0d1e2f3a-4b5c-4d6e-8f70-8192a3b4c5d6", NodeName: "win-node-1",
			SandboxID: "abc123", IPs: []networkv1alpha1.InterfaceAddress{"10.244.1.9/24"}, MAC: "02:42:0a:f4:01:09",
		},
	}
	g.Expect(server.Client.Create(ctx, pep)).To(Succeed())
	t.Cleanup(func() { _ = server.Client.Delete(ctx, pep) })
	g.Expect(pep.Spec.InterfaceName).To(Equal("eth0"))

	fi := &networkv1alpha1.FlannelInterop{ObjectMeta: metav1.ObjectMeta{Name: networkv1alpha1.FlannelInteropName}}
	g.Expect(server.Client.Create(ctx, fi)).To(Succeed())
	t.Cleanup(func() { _ = server.Client.Delete(ctx, fi) })
	g.Expect(fi.Spec).To(Equal(networkv1alpha1.FlannelInteropSpec{VNI: 4096, AnnotationPrefix: networkv1alpha1.DefaultFlannelAnnotationPrefix}),
		"an empty FlannelInterop joins flannel's defaults: VNI 4096 as flannel's Windows support needs, flanneld's default prefix")
}
