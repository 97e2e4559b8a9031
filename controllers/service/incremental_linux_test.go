//go:build linux

package service_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/winnet-io/winnet/controllers/service"
	"github.com/winnet-io/winnet/internal/ovs/ovstest"
	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/simnode"
)

var server *framework.APIServer

func TestMain(m *testing.M) {
	framework.Main(m, "Service reconciler tests", &server, framework.MainOptions{})
}

// TestIncrementalPassesMatchAFullPass: random changes to Services and EndpointSlices (created,
// deleted, endpoints added, removed, made local or not ready, slices added, removed and moved to
// another Service, ports, types, affinity and traffic policy changed) are realised by per-Service
// passes only, and after each round the switch holds exactly what a full pass that computes every
// Service from scratch installs: that pass changes nothing in the switch's flows and groups. The
// periodic drift check runs a full pass only when the bridge's flows were found drifted.
func TestIncrementalPassesMatchAFullPass(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	m := &model{rng: rand.New(rand.NewPCG(seed, 0)), node: "svcinc-a", g: g}
	u := simnode.NewUnderlay(t, netip.MustParsePrefix("192.168.63.0/24"))
	// No periodic full pass: what the switch gets between the checks comes from per-Service passes.
	n := framework.StartPodNodeWith(t, server, u, m.node, "192.168.63.11/24", "10.244.63.0/24", 30*time.Second,
		framework.PodNodeOptions{Agent: framework.AgentOptions{ResyncPeriod: time.Hour}})
	r := n.Agent.Services
	g.Expect(server.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNamespace}})).To(Succeed())

	dump := func() []string { return switchState(g, n.OVS) }
	for range 6 {
		m.create(ctx)
	}
	waitComputed(t, r)
	passes := r.FullPasses()
	for round := range 6 {
		for range 12 {
			m.change(ctx)
		}
		waitComputed(t, r)
		g.Expect(r.FullPasses()).To(Equal(passes), "round %d was realised by per-Service passes only", round)
		incremental := dump()
		g.Expect(incremental).To(ContainElement(HavePrefix("group_id=")), "round %d: the Services have groups", round)
		g.Expect(r.FullPassFromScratch(ctx)).To(Succeed())
		passes++
		full := dump()
		g.Expect(without(full, incremental)).To(BeEmpty(), "round %d: a full pass from scratch added these (seed %d)", round, seed)
		g.Expect(without(incremental, full)).To(BeEmpty(), "round %d: a full pass from scratch removed these (seed %d)", round, seed)
	}

	// The drift check runs no full pass while nothing asks for one, and one once the bridge's flows
	// were found drifted (invalidated): a per-Service pass would send the stale flows of its own
	// Service only.
	g.Expect(r.CheckDrift(ctx)).To(Succeed())
	g.Expect(r.FullPasses()).To(Equal(passes))
	rz, ok := n.Agent.Services.State.Realized()
	g.Expect(ok).To(BeTrue())
	// The realised Services hold no flows of their own once the switch has them; a full pass that
	// reuses them takes their flows from the bridge, and changes nothing.
	g.Expect(r.HeldFlows()).To(BeZero())
	before := dump()
	rz.Flows.Invalidate()
	g.Expect(r.CheckDrift(ctx)).To(Succeed())
	g.Expect(r.FullPasses()).To(Equal(passes + 1))
	g.Expect(dump()).To(Equal(before))
	g.Expect(r.HeldFlows()).To(BeZero())
	g.Expect(r.CheckDrift(ctx)).To(Succeed())
	g.Expect(r.FullPasses()).To(Equal(passes + 1))
}

const testNamespace = "svcinc"

// without returns the lines of a that b has not.
// switchState returns the switch's flows and groups, sorted.
func switchState(g Gomega, o *ovstest.OVS) []string {
	flows, err := o.Ofctl("dump-flows", "br-int", "--no-stats")
	g.Expect(err).NotTo(HaveOccurred())
	groups, err := o.DumpGroups("br-int")
	g.Expect(err).NotTo(HaveOccurred())
	lines := append(strings.Split(strings.TrimSpace(flows), "\n"), groups...)
	slices.Sort(lines)
	return lines
}

func without(a, b []string) []string {
	var out []string
	for _, l := range a {
		if !slices.Contains(b, l) {
			out = append(out, l)
		}
	}
	return out
}

// waitComputed waits until the reconciler has computed every Service from the versions of it and
// of its EndpointSlices that the API server has, and holds nothing of Services that are gone.
func waitComputed(t *testing.T, r *service.Reconciler) {
	t.Helper()
	NewWithT(t).Eventually(func(g Gomega) {
		ctx := context.Background()
		services := &corev1.ServiceList{}
		g.Expect(server.Client.List(ctx, services)).To(Succeed())
		slicesList := &discoveryv1.EndpointSliceList{}
		g.Expect(server.Client.List(ctx, slicesList)).To(Succeed())
		bySvc := map[types.NamespacedName][]discoveryv1.EndpointSlice{}
		for _, s := range slicesList.Items {
			if name, ok := s.Labels[discoveryv1.LabelServiceName]; ok {
				key := types.NamespacedName{Namespace: s.Namespace, Name: name}
				bySvc[key] = append(bySvc[key], s)
			}
		}
		want := map[types.NamespacedName]string{}
		for i := range services.Items {
			s := &services.Items[i]
			key := types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
			want[key] = service.Inputs(s, bySvc[key])
		}
		g.Expect(r.Computed()).To(Equal(want))
	}).WithTimeout(30 * time.Second).WithPolling(50 * time.Millisecond).Should(Succeed())
}

// model makes random changes to the test's Services and EndpointSlices.
type model struct {
	rng  *rand.Rand
	node string
	g    Gomega
	next int
}

func (m *model) services(ctx context.Context) []corev1.Service {
	list := &corev1.ServiceList{}
	m.g.Expect(server.Client.List(ctx, list, client.InNamespace(testNamespace))).To(Succeed())
	return list.Items
}

func (m *model) slices(ctx context.Context) []discoveryv1.EndpointSlice {
	list := &discoveryv1.EndpointSliceList{}
	m.g.Expect(server.Client.List(ctx, list, client.InNamespace(testNamespace))).To(Succeed())
	return list.Items
}

// servicePorts are the ports a Service picks from; its slices carry target ports of the same names.
var servicePorts = []corev1.ServicePort{
	{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80},
	{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53},
	{Name: "https", Protocol: corev1.ProtocolTCP, Port: 443},
}

// create creates a Service of random shape with one or two EndpointSlices.
func (m *model) create(ctx context.Context) {
	m.next++
	name := fmt.Sprintf("s%d", m.next)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: name}}
	for _, p := range servicePorts {
		if m.rng.IntN(2) == 0 || len(svc.Spec.Ports) == 0 && p.Name == "https" {
			p.TargetPort = intstr.FromString(p.Name)
			svc.Spec.Ports = append(svc.Spec.Ports, p)
		}
	}
	m.shape(svc)
	// An external IP of its own: two Services on one address and port would be one flow.
	svc.Spec.ExternalIPs = nil
	if m.rng.IntN(3) == 0 {
		svc.Spec.ExternalIPs = []string{fmt.Sprintf("192.168.200.%d", m.next%250+1)}
	}
	m.g.Expect(server.Client.Create(ctx, svc)).To(Succeed())
	for range 1 + m.rng.IntN(2) {
		m.createSlice(ctx, name)
	}
}

// shape sets the Service's type, session affinity and internal traffic policy at random.
func (m *model) shape(svc *corev1.Service) {
	svc.Spec.Type = corev1.ServiceTypeClusterIP
	if m.rng.IntN(2) == 0 {
		svc.Spec.Type = corev1.ServiceTypeNodePort
	}
	for i := range svc.Spec.Ports {
		if svc.Spec.Type == corev1.ServiceTypeClusterIP {
			svc.Spec.Ports[i].NodePort = 0
		}
	}
	svc.Spec.SessionAffinity, svc.Spec.SessionAffinityConfig = corev1.ServiceAffinityNone, nil
	if m.rng.IntN(3) == 0 {
		svc.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	}
	svc.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyCluster)
	if m.rng.IntN(4) == 0 {
		svc.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
	}
}

func (m *model) createSlice(ctx context.Context, service string) {
	m.next++
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: fmt.Sprintf("%s-%d", service, m.next),
			Labels: map[string]string{discoveryv1.LabelServiceName: service}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	for i, p := range servicePorts {
		s.Ports = append(s.Ports, discoveryv1.EndpointPort{Name: ptr.To(p.Name), Protocol: ptr.To(p.Protocol), Port: ptr.To(int32(8080 + i))})
	}
	for range m.rng.IntN(4) {
		s.Endpoints = append(s.Endpoints, m.endpoint())
	}
	m.g.Expect(server.Client.Create(ctx, s)).To(Succeed())
}

// endpoint is an endpoint on this node (its address then needs hairpin flows) or on another, most
// often ready, else serving and terminating, or neither.
func (m *model) endpoint() discoveryv1.Endpoint {
	e := discoveryv1.Endpoint{Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}
	if m.rng.IntN(2) == 0 {
		e.Addresses = []string{fmt.Sprintf("10.244.63.%d", 10+m.rng.IntN(8))}
		e.NodeName = ptr.To(m.node)
	} else {
		e.Addresses = []string{fmt.Sprintf("10.244.64.%d", 10+m.rng.IntN(200))}
		e.NodeName = ptr.To("elsewhere")
	}
	switch m.rng.IntN(6) {
	case 0:
		e.Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)}
	case 1:
		e.Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(false)}
	}
	return e
}

// change makes one random change.
func (m *model) change(ctx context.Context) {
	services, eps := m.services(ctx), m.slices(ctx)
	if len(services) < 3 {
		m.create(ctx)
		return
	}
	svc := &services[m.rng.IntN(len(services))]
	var s *discoveryv1.EndpointSlice
	if len(eps) > 0 {
		s = &eps[m.rng.IntN(len(eps))]
	}
	switch op := m.rng.IntN(10); {
	case op == 0:
		m.create(ctx)
	case op == 1:
		m.g.Expect(server.Client.Delete(ctx, svc)).To(Succeed())
		for i := range eps {
			if eps[i].Labels[discoveryv1.LabelServiceName] == svc.Name {
				m.g.Expect(server.Client.Delete(ctx, &eps[i])).To(Succeed())
			}
		}
	case op == 2:
		// A new port, a port gone, or a port number changed.
		switch {
		case len(svc.Spec.Ports) < len(servicePorts) && m.rng.IntN(2) == 0:
			for _, p := range servicePorts {
				if !slices.ContainsFunc(svc.Spec.Ports, func(q corev1.ServicePort) bool { return q.Name == p.Name }) {
					p.TargetPort = intstr.FromString(p.Name)
					svc.Spec.Ports = append(svc.Spec.Ports, p)
					break
				}
			}
		case len(svc.Spec.Ports) > 1 && m.rng.IntN(2) == 0:
			svc.Spec.Ports = svc.Spec.Ports[1:]
		default:
			svc.Spec.Ports[0].Port = int32(1000 + m.rng.IntN(1000))
		}
		m.update(ctx, svc)
	case op == 3:
		m.shape(svc)
		m.update(ctx, svc)
	case op == 4 && s != nil:
		m.g.Expect(server.Client.Delete(ctx, s)).To(Succeed())
	case op == 5:
		m.createSlice(ctx, svc.Name)
	case op == 6 && s != nil:
		// The slice moves to another Service: both change.
		s.Labels[discoveryv1.LabelServiceName] = svc.Name
		m.update(ctx, s)
	case s != nil:
		// An endpoint added, removed or replaced (local or not, ready or not).
		switch {
		case len(s.Endpoints) == 0 || m.rng.IntN(3) == 0:
			s.Endpoints = append(s.Endpoints, m.endpoint())
		case m.rng.IntN(2) == 0:
			s.Endpoints = slices.Delete(s.Endpoints, 0, 1)
		default:
			s.Endpoints[m.rng.IntN(len(s.Endpoints))] = m.endpoint()
		}
		m.update(ctx, s)
	}
}

// update writes an object the test read just before; nothing else writes the test's objects.
func (m *model) update(ctx context.Context, o client.Object) {
	err := server.Client.Update(ctx, o)
	if apierrors.IsInvalid(err) {
		return // a change the API refuses (a duplicate endpoint address, say) is no change
	}
	m.g.Expect(err).NotTo(HaveOccurred())
}
