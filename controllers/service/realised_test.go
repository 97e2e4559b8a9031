package service

import (
	"context"
	"net/netip"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/winnet-io/winnet/controllers/nodenetwork"
	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/internal/pipeline"
)

// TestDesiredRecomputesOnlyChangedServices: a pass reuses what an unchanged Service came to (the
// very same groups, which the bridge then compares at no cost) and computes again only a Service
// whose EndpointSlice changed, and everything when the node network changed.
func TestDesiredRecomputesOnlyChangedServices(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	v4 := discoveryv1.AddressTypeIPv4
	rz := nodenetwork.Realized{Node: pipeline.Node{NodeIP: netip.MustParseAddr("192.168.1.10"),
		PodCIDR: netip.MustParsePrefix("10.244.1.0/24"), GatewayIP: netip.MustParseAddr("10.244.1.1")}}
	web := svc(func(s *corev1.Service) { s.UID, s.ResourceVersion = "web-uid", "1" })
	db := svc(func(s *corev1.Service) {
		s.Name, s.UID, s.ResourceVersion, s.Spec.ClusterIP = "db", "db-uid", "1", "10.96.0.11"
	})
	webSlice := slice(v4, "http", 8080, ep{ip: "10.244.2.5"})
	webSlice.UID, webSlice.ResourceVersion = "web-slice", "1"
	dbSlice := slice(v4, "http", 5432, ep{ip: "10.244.2.6"})
	dbSlice.UID, dbSlice.ResourceVersion = "db-slice", "1"
	services := []corev1.Service{*web, *db}
	bySvc := func() map[types.NamespacedName][]discoveryv1.EndpointSlice {
		return map[types.NamespacedName][]discoveryv1.EndpointSlice{
			{Namespace: "ns", Name: "web"}: {webSlice}, {Namespace: "ns", Name: "db"}: {dbSlice},
		}
	}
	r := &Reconciler{NodeName: "node"}
	first, _, _ := r.desired(ctx, rz, services, bySvc())
	g.Expect(r.totals).To(Equal(counts{services: 2, ports: 2, endpoints: 2}))
	g.Expect(first).To(HaveLen(2))

	same := func(a, b openflow.Group) bool { return &a.Buckets[0] == &b.Buckets[0] }
	again, _, _ := r.desired(ctx, rz, services, bySvc())
	g.Expect(same(again[0], first[0]) && same(again[1], first[1])).To(BeTrue(), "unchanged Services are not computed again")

	webSlice.Endpoints = append(webSlice.Endpoints, slice(v4, "http", 8080, ep{ip: "10.244.2.7"}).Endpoints...)
	webSlice.ResourceVersion = "2"
	changed, _, _ := r.desired(ctx, rz, services, bySvc())
	g.Expect(r.totals.endpoints).To(Equal(3))
	g.Expect(changed[0].Buckets).To(HaveLen(2), "web's new endpoint is in its group")
	g.Expect(same(changed[0], first[0])).To(BeFalse())
	g.Expect(same(changed[1], first[1])).To(BeTrue(), "db did not change")
	g.Expect(changed[1].ID).To(Equal(first[1].ID))

	rz.Node.NodeIP = netip.MustParseAddr("192.168.1.11")
	moved, _, _ := r.desired(ctx, rz, services, bySvc())
	g.Expect(same(moved[1], changed[1])).To(BeFalse(), "a changed node network computes every Service again")
	g.Expect(moved[1]).To(Equal(changed[1]))
}
