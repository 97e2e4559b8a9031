//go:build linux

package service_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/winnet-io/winnet/controllers/service"
	"github.com/winnet-io/winnet/internal/hostnet"
	"github.com/winnet-io/winnet/internal/pipeline"
	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/simnode"
)

// slowRoutes is the real host network whose route listing waits until release is closed, once
// listing is closed.
type slowRoutes struct {
	hostnet.Routing
	listing, release chan struct{}
}

func (h *slowRoutes) Routes(ctx context.Context, f hostnet.RouteFilter) ([]hostnet.Route, error) {
	close(h.listing)
	<-h.release
	return h.Routing.Routes(ctx, f)
}

// TestDriftCheckListsRoutesWithoutHoldingPasses: the drift check reads the host's ClusterIP routes
// back (10,000 routes at 10,000 Services) without holding the reconciler's lock, so that an
// EndpointSlice change reaches the switch while the listing runs; the read-back then still repairs
// a route deleted behind the agent's back.
func TestDriftCheckListsRoutesWithoutHoldingPasses(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	u := simnode.NewUnderlay(t, netip.MustParsePrefix("192.168.64.0/24"))
	n := framework.StartPodNodeWith(t, server, u, "svcdrift-a", "192.168.64.11/24", "10.244.65.0/24", 30*time.Second,
		framework.PodNodeOptions{Agent: framework.AgentOptions{ResyncPeriod: time.Hour}})
	r := n.Agent.Services
	const ns = "svcdrift"
	g.Expect(server.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}, Spec: corev1.ServiceSpec{
		Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
	}}
	g.Expect(server.Client.Create(ctx, svc)).To(Succeed())
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(int32(8080))}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.244.66.10"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
	}
	g.Expect(server.Client.Create(ctx, slice)).To(Succeed())
	inGroups := func(addr string) func(Gomega) {
		return func(g Gomega) {
			groups, err := n.OVS.DumpGroups("br-int")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(strings.Join(groups, "\n")).To(ContainSubstring("nat(dst=" + addr + ":8080)"))
		}
	}
	g.Eventually(inGroups("10.244.66.10"), 30*time.Second, 50*time.Millisecond).Should(Succeed())

	var real hostnet.Routing
	slow := &slowRoutes{listing: make(chan struct{}), release: make(chan struct{})}
	r.WrapNet(func(h hostnet.Routing) hostnet.Routing {
		real, slow.Routing = h, h
		return slow
	})
	// The ClusterIP's route, deleted behind the agent's back: the read-back puts it back.
	g.Expect(server.Client.Get(ctx, client.ObjectKeyFromObject(svc), svc)).To(Succeed())
	rz, ok := r.State.Realized()
	g.Expect(ok).To(BeTrue())
	route := hostnet.Route{Dst: netip.PrefixFrom(netip.MustParseAddr(svc.Spec.ClusterIP), 32), Gateway: pipeline.ServiceNextHop, LinkIndex: rz.GatewayLinkIndex, OnLink: true}
	g.Expect(real.DeleteRoute(ctx, route)).To(Succeed())

	checked := make(chan error, 1)
	go func() {
		_, err := r.Reconcile(ctx, service.DriftCheck)
		checked <- err
	}()
	<-slow.listing
	// While the drift check lists the routes, a change of the Service's endpoints reaches the switch.
	slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.244.66.11"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	g.Expect(server.Client.Update(ctx, slice)).To(Succeed())
	g.Eventually(inGroups("10.244.66.11"), 10*time.Second, 50*time.Millisecond).Should(Succeed(),
		"the Service's pass waited for the drift check's route listing")
	close(slow.release)
	g.Eventually(checked, 30*time.Second).Should(Receive(BeNil()))
	routes, err := real.Routes(ctx, hostnet.RouteFilter{LinkIndex: rz.GatewayLinkIndex})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(routes).To(ContainElement(HaveField("Dst", route.Dst)), "the read-back repaired the ClusterIP route")
}
