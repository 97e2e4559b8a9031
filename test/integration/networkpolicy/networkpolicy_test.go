//go:build linux

package networkpolicy_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	. "github.com/onsi/gomega/gstruct"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/networkpolicy"
	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/internal/pipeline"
	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/simnode"
)

const (
	otherPort = 9090 // served by web over TCP and UDP, allowed by no rule once web is isolated
	echoPort  = 7070 // web's echo server, inside the endPort range 7000-7100
	probePort = 6060 // where client-b probes a new Pod from before its vNIC exists
)

// exceptPolicy admits TCP otherPort to web from 0.0.0.0/0 except n /32s: excepted first, then
// addresses of 172.16.0.0/12.
func exceptPolicy(name string, n int, excepted netip.Addr) *networkingv1.NetworkPolicy {
	excepts := []string{excepted.String() + "/32"}
	for i := 0; len(excepts) < n; i++ {
		excepts = append(excepts, netip.AddrFrom4([4]byte{172, byte(16 + i>>16), byte(i >> 8), byte(i)}).String()+"/32")
	}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "np-x", Name: name},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: excepts}}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(otherPort))}},
			}},
		},
	}
}

// expectAllowed waits until a new connection from the namespace to addr is answered by want.
func expectAllowed(t *testing.T, nsName, network string, addr netip.AddrPort, want string) {
	t.Helper()
	NewWithT(t).Eventually(func() error {
		answer, err := framework.Ask(nsName, network, addr)
		if err != nil {
			return err
		}
		if !strings.HasPrefix(answer, want+" ") {
			return fmt.Errorf("answered by %q, want %s", answer, want)
		}
		return nil
	}).WithTimeout(converge).WithPolling(200*time.Millisecond).Should(Succeed(), "%s %s -> %s", network, nsName, addr)
}

// expectRefused waits until new connections from the namespace to addr get no answer, then checks
// that the next one gets none either.
func expectRefused(t *testing.T, nsName, network string, addr netip.AddrPort) {
	t.Helper()
	g := NewWithT(t)
	g.Eventually(func() error {
		_, err := framework.Ask(nsName, network, addr)
		return err
	}).WithTimeout(converge).WithPolling(200*time.Millisecond).Should(HaveOccurred(), "%s %s -> %s is refused", network, nsName, addr)
	_, err := framework.Ask(nsName, network, addr)
	g.Expect(err).To(HaveOccurred(), "%s %s -> %s stays refused", network, nsName, addr)
}

func setLabels(t *testing.T, obj client.Object, labels map[string]string) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	g.Expect(server.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
	before := obj.DeepCopyObject().(client.Object)
	obj.SetLabels(labels)
	g.Expect(server.Client.Patch(ctx, obj, client.MergeFrom(before))).To(Succeed())
}

func createPolicy(t *testing.T, np *networkingv1.NetworkPolicy) {
	t.Helper()
	NewWithT(t).Expect(server.Client.Create(context.Background(), np)).To(Succeed())
	t.Cleanup(func() { _ = server.Client.Delete(context.Background(), np) })
}

// passCount is the agents' NetworkPolicy passes of a kind (both agents of the test run in this
// process).
func passCount(t *testing.T, kind string) float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	var n float64
	for _, f := range families {
		if f.GetName() != "winnet_networkpolicy_passes_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" && l.GetValue() == kind {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// metricSum is the sum of a counter's or gauge's series over the agents of the test (both run in
// this process).
func metricSum(t *testing.T, name string) float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	var n float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			n += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return n
}

// clusterIPService creates a ClusterIP Service with a TCP and a UDP port 80 to the Pod's port and,
// as the EndpointSlice controller would, its EndpointSlice; it returns the ClusterIP.
func clusterIPService(t *testing.T, name string, p *framework.TestPod, port int32) netip.Addr {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: name},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{
			{Name: "tcp", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(port)},
			{Name: "udp", Protocol: corev1.ProtocolUDP, Port: 80, TargetPort: intstr.FromInt32(port)},
		}},
	}
	g.Expect(server.Client.Create(ctx, svc)).To(Succeed())
	t.Cleanup(func() { _ = server.Client.Delete(context.Background(), svc) })
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: p.Namespace, Name: name + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{
			{Name: ptr.To("tcp"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(port)},
			{Name: ptr.To("udp"), Protocol: ptr.To(corev1.ProtocolUDP), Port: ptr.To(port)},
		},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{p.IP.String()}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
	}
	g.Expect(server.Client.Create(ctx, slice)).To(Succeed())
	t.Cleanup(func() { _ = server.Client.Delete(context.Background(), slice) })
	return netip.MustParseAddr(svc.Spec.ClusterIP)
}

func TestNetworkPolicy(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	u := simnode.NewUnderlay(t, netip.MustParsePrefix("192.168.63.0/24"))
	a := framework.StartPodNode(t, server, u, "np-a", "192.168.63.11/24", "10.244.63.0/24", converge)
	b := framework.StartPodNode(t, server, u, "np-b", "192.168.63.12/24", "10.244.64.0/24", converge)
	// Enforcement is judged by the flow tables, with no stale megaflow (see ExactMatchDatapath).
	a.OVS.ExactMatchDatapath(t)
	b.OVS.ExactMatchDatapath(t)
	a.Route(t)
	b.Route(t)

	nsX := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "np-x", Labels: map[string]string{"team": "x"}}}
	nsY := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "np-y", Labels: map[string]string{"team": "y"}}}
	for _, ns := range []*corev1.Namespace{nsX, nsY} {
		g.Expect(server.Client.Create(ctx, ns)).To(Succeed())
		t.Cleanup(func() { _ = server.Client.Delete(context.Background(), ns) })
	}
	web := a.AddPod(t, "web", framework.TestPodOptions{Namespace: "np-x", Labels: map[string]string{"app": "web"}, Ports: httpPorts})
	clientA := a.AddPod(t, "client-a", framework.TestPodOptions{Namespace: "np-x", Labels: map[string]string{"app": "client"}, Ports: httpPorts})
	clientB := b.AddPod(t, "client-b", framework.TestPodOptions{Namespace: "np-y", Labels: map[string]string{"app": "client"}, Ports: httpPorts})
	framework.Serve(t, web.NS, "web", httpPort)
	framework.Serve(t, web.NS, "web", otherPort)
	serveEcho(t, web.NS, echoPort)
	framework.Serve(t, clientB.NS, "client-b", httpPort)
	webHTTP, webOther, webEcho := netip.AddrPortFrom(web.IP, httpPort), netip.AddrPortFrom(web.IP, otherPort), netip.AddrPortFrom(web.IP, echoPort)

	// Without a policy everything is allowed.
	expectAllowed(t, clientB.NS, "tcp4", webHTTP, "web")
	expectAllowed(t, clientA.NS, "tcp4", webOther, "web")
	expectAllowed(t, clientA.NS, "tcp4", netip.AddrPortFrom(clientB.IP, httpPort), "client-b")
	// Two connections established before the policy: one the policy still allows (client-a to the
	// echo port, inside the endPort range), one it no longer allows (client-b to the echo port).
	stillAllowed := dial(t, clientA.NS, webEcho)
	noLongerAllowed := dial(t, clientB.NS, webEcho)
	g.Expect(echo(stillAllowed)).To(Succeed())
	g.Expect(echo(noLongerAllowed)).To(Succeed())

	// web admits client Pods of team=y namespaces on its port named "http", and client Pods of its
	// own namespace on 7000-7100.
	webPolicy := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "np-x", Name: "web"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{
				{
					From: []networkingv1.NetworkPolicyPeer{{
						NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "y"}},
						PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}},
					}},
					Ports: []networkingv1.NetworkPolicyPort{{Port: ptr.To(intstr.FromString("http"))}},
				},
				{
					From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}}}},
					Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(7000)), EndPort: ptr.To(int32(7100))}},
				},
			},
		},
	}
	createPolicy(t, webPolicy)

	cases := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"a named port resolved on the target Pod admits a Pod of a selected namespace", func(t *testing.T) {
			expectAllowed(t, clientB.NS, "tcp4", webHTTP, "web")
		}},
		{"other ports of the isolated Pod are refused, TCP and UDP", func(t *testing.T) {
			expectRefused(t, clientB.NS, "tcp4", webOther)
			expectRefused(t, clientB.NS, "udp4", webOther)
		}},
		{"a connection to a Service whose endpoint refuses it is refused on every packet, not only the first", func(t *testing.T) {
			g := NewWithT(t)
			vip := clusterIPService(t, "web-other", web, otherPort)
			// The node (always allowed) reaches the endpoint through the Service: it is realised.
			expectAllowed(t, a.NS, "udp4", netip.AddrPortFrom(vip, 80), "web")
			expectAllowed(t, a.NS, "tcp4", netip.AddrPortFrom(vip, 80), "web")
			// Connections policy let through are marked admitted (ct_mark 0x100) besides DNATed (0x10).
			ct, err := a.OVS.Appctl("dpctl/dump-conntrack")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(ct).To(MatchRegexp(fmt.Sprintf(`tcp,orig=\([^)]*dst=%s,[^)]*dport=80\),reply=\(src=%s,[^)]*\),[^\n]*mark=272`, vip, web.IP)), "conntrack:\n%s", ct)
			// The Service's DNAT commits the connection before policy refuses it: later packets of
			// the same connection must not pass as established. One UDP socket sends several
			// datagrams; a TCP connect retransmits its SYN.
			var conn net.Conn
			g.Expect(framework.InNS(clientA.NS, func() error {
				var err error
				conn, err = net.Dial("udp4", netip.AddrPortFrom(vip, 80).String())
				return err
			})).To(Succeed())
			defer conn.Close()
			buf := make([]byte, 100)
			for i := 0; i < 5; i++ {
				_, err := conn.Write([]byte("hello"))
				g.Expect(err).NotTo(HaveOccurred())
				_ = conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
				n, err := conn.Read(buf)
				g.Expect(err).To(HaveOccurred(), "datagram %d of a refused connection was answered: %q", i+1, buf[:n])
			}
			err = framework.InNS(clientA.NS, func() error {
				c, err := net.DialTimeout("tcp4", netip.AddrPortFrom(vip, 80).String(), 4*time.Second)
				if err == nil {
					c.Close()
				}
				return err
			})
			g.Expect(err).To(HaveOccurred(), "a retransmitted SYN of a refused connection passed")
		}},
		{"a Pod of an unselected namespace is refused the named port", func(t *testing.T) {
			expectRefused(t, clientA.NS, "tcp4", webHTTP)
		}},
		{"an endPort range admits a port inside it", func(t *testing.T) {
			c := dial(t, clientA.NS, webEcho)
			NewWithT(t).Expect(echo(c)).To(Succeed())
		}},
		{"an established connection the policy still allows survives it", func(t *testing.T) {
			NewWithT(t).Expect(echo(stillAllowed)).To(Succeed())
		}},
		{"an established connection the policy no longer allows goes on, and new ones are refused", func(t *testing.T) {
			NewWithT(t).Expect(echo(noLongerAllowed)).To(Succeed(), "only new connections are evaluated")
			expectRefused(t, clientB.NS, "tcp4", webEcho)
		}},
		{"the node reaches its isolated Pod", func(t *testing.T) {
			expectAllowed(t, a.NS, "tcp4", webOther, "web")
		}},
		{"a namespace relabelled out of the selector loses access, and regains it relabelled back", func(t *testing.T) {
			setLabels(t, nsY, map[string]string{"team": "z"})
			expectRefused(t, clientB.NS, "tcp4", webHTTP)
			setLabels(t, nsY, map[string]string{"team": "y"})
			expectAllowed(t, clientB.NS, "tcp4", webHTTP, "web")
		}},
		{"a remote Pod relabelled out of the selector loses access, and regains it relabelled back", func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "np-y", Name: "client-b"}}
			setLabels(t, pod, map[string]string{"app": "other"})
			expectRefused(t, clientB.NS, "tcp4", webHTTP)
			setLabels(t, pod, map[string]string{"app": "client"})
			expectAllowed(t, clientB.NS, "tcp4", webHTTP, "web")
		}},
		{"a peer that left incrementally stays out when drift makes the agent send its flows again", func(t *testing.T) {
			// The relabel is applied incrementally (only the peer's flows); the flows sent again
			// after drift must be the switch's current ones, not the last full pass's, which still
			// admit the peer.
			g := NewWithT(t)
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "np-y", Name: "client-b"}}
			// A second peer keeps the peer set from becoming empty, which takes the full pass.
			b.AddPod(t, "client-b2", framework.TestPodOptions{Namespace: "np-y", Labels: map[string]string{"app": "client"}, Ports: httpPorts})
			expectAllowed(t, clientB.NS, "tcp4", webHTTP, "web") // the policy is realised
			pods := passCount(t, networkpolicy.PassPods)
			setLabels(t, pod, map[string]string{"app": "other"})
			t.Cleanup(func() { setLabels(t, pod, map[string]string{"app": "client"}) })
			expectRefused(t, clientB.NS, "tcp4", webHTTP)
			g.Expect(passCount(t, networkpolicy.PassPods)).To(BeNumerically(">", pods), "the relabel was applied incrementally")
			peerFlow := "nw_src=" + clientB.IP.String() + " "
			checks := passCount(t, networkpolicy.PassCheck)
			// Flows changed behind the agent's back: the node network's verification finds them and
			// invalidates the bridge's record, and every owner sends its flows again (the
			// NetworkPolicy reconciler at its next periodic check).
			rz, ok := a.Agent.Services.State.Realized()
			g.Expect(ok).To(BeTrue())
			invalidations := rz.Flows.Invalidations()
			// A flow of the policy category the agent did not install (for an address nobody has).
			foreign := fmt.Sprintf("table=%d,priority=5,cookie=%#x,ip,nw_src=192.0.2.1,actions=drop", pipeline.IngressRuleTable,
				openflow.MakeCookie(0, pipeline.CategoryPolicy, 1))
			g.Expect(a.OVS.Ofctl("add-flow", "br-int", foreign)).Error().NotTo(HaveOccurred())
			g.Eventually(rz.Flows.Invalidations).WithTimeout(converge).Should(BeNumerically(">", invalidations))
			g.Eventually(func() float64 { return passCount(t, networkpolicy.PassCheck) }).WithTimeout(converge).Should(BeNumerically(">=", checks+2))
			g.Eventually(func(g Gomega) {
				out, err := a.OVS.Ofctl("dump-flows", "br-int", fmt.Sprintf("table=%d", pipeline.IngressRuleTable))
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(out).To(ContainSubstring("conj_id="), "the policy flows are back")
				g.Expect(out).NotTo(ContainSubstring(peerFlow), "the peer that left is not admitted again")
			}).WithTimeout(converge).Should(Succeed())
			g.Consistently(func() error {
				_, err := framework.Ask(clientB.NS, "tcp4", webHTTP)
				return err
			}).WithTimeout(3 * time.Second).WithPolling(500 * time.Millisecond).Should(HaveOccurred())
			setLabels(t, pod, map[string]string{"app": "client"})
			expectAllowed(t, clientB.NS, "tcp4", webHTTP, "web")
		}},
		{"the isolated Pod relabelled out of the policy is open again, and isolated relabelled back", func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "np-x", Name: "web"}}
			setLabels(t, pod, map[string]string{"app": "web-unprotected"})
			expectAllowed(t, clientA.NS, "tcp4", webOther, "web")
			setLabels(t, pod, map[string]string{"app": "web"})
			expectRefused(t, clientA.NS, "tcp4", webOther)
		}},
		{"egress to an ipBlock with an exception: the exception is refused, the rest allowed", func(t *testing.T) {
			createPolicy(t, &networkingv1.NetworkPolicy{
				ObjectMeta: metav1.ObjectMeta{Namespace: "np-x", Name: "client-egress"},
				Spec: networkingv1.NetworkPolicySpec{
					PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}},
					PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
					Egress: []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{
						IPBlock: &networkingv1.IPBlock{CIDR: "10.244.0.0/16", Except: []string{web.IP.String() + "/32"}},
					}}}},
				},
			})
			expectRefused(t, clientA.NS, "tcp4", webEcho)
			expectAllowed(t, clientA.NS, "tcp4", netip.AddrPortFrom(clientB.IP, httpPort), "client-b")
		}},
		{"PoliciesReady and the counts are on the WindowsNodeNetwork", func(t *testing.T) {
			NewWithT(t).Eventually(func(g Gomega) {
				w := &networkv1alpha1.WindowsNodeNetwork{}
				g.Expect(server.Client.Get(ctx, client.ObjectKey{Name: a.Name}, w)).To(Succeed())
				c := meta.FindStatusCondition(w.Status.Conditions, networkv1alpha1.PoliciesReadyCondition)
				g.Expect(c).NotTo(BeNil())
				g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
				// The cases above delete their policies when they end: webPolicy (two rules) is
				// left. The status shows counts within nodenetwork.CountReportInterval, so a
				// policy deleted a moment ago may still be counted: wait for the settled counts.
				g.Expect(w.Status.NetworkPolicies.Policies).To(Equal(int32(1)))
				g.Expect(w.Status.NetworkPolicies.Rules).To(Equal(int32(2)))
				// The cluster serves the ClusterNetworkPolicy CRD: the node reports that it compiled none.
				g.Expect(w.Status.NetworkPolicies.ClusterNetworkPolicies).To(BeEmpty())
				g.Expect(w.Status.NetworkPolicies.ClusterNetworkPolicyReport).To(PointTo(MatchFields(IgnoreExtras, Fields{"Compiled": BeZero(), "NotRealised": BeEmpty()})))
			}).WithTimeout(converge).Should(Succeed())
		}},
		{"the realisation latency is measured", func(t *testing.T) {
			g := NewWithT(t)
			families, err := ctrlmetrics.Registry.Gather()
			g.Expect(err).NotTo(HaveOccurred())
			var passes uint64
			for _, f := range families {
				if f.GetName() == "winnet_networkpolicy_realisation_latency_seconds" {
					for _, m := range f.GetMetric() {
						passes += m.GetHistogram().GetSampleCount()
					}
				}
			}
			g.Expect(passes).To(BeNumerically(">", 0))
		}},
		// Issue 37: what holds no local Pod, and what nothing reads, costs no pass.
		{"a node with nothing changing reads nothing in its periodic checks", func(t *testing.T) {
			g := NewWithT(t)
			time.Sleep(2 * time.Second) // the passes of the steps before end
			full, checks := passCount(t, networkpolicy.PassFull), passCount(t, networkpolicy.PassCheck)
			time.Sleep(3 * time.Second) // three resync periods of the test agents
			g.Expect(passCount(t, networkpolicy.PassFull)).To(Equal(full), "a full pass (every input read) ran with nothing changed")
			g.Expect(passCount(t, networkpolicy.PassCheck)).To(BeNumerically(">", checks), "the periodic check did not run")
		}},
		{"a PodEndpoint write that changes nothing the pass reads, the agent's own status writes included, takes no pass", func(t *testing.T) {
			g := NewWithT(t)
			list := &networkv1alpha1.PodEndpointList{}
			g.Expect(server.Client.List(ctx, list)).To(Succeed())
			var ep *networkv1alpha1.PodEndpoint
			for i := range list.Items {
				if list.Items[i].Spec.NodeName == a.Name && list.Items[i].Spec.PodName == "web" {
					ep = &list.Items[i]
				}
			}
			g.Expect(ep).NotTo(BeNil(), "web's PodEndpoint")
			time.Sleep(2 * time.Second)
			full := passCount(t, networkpolicy.PassFull)
			// A status the agent writes back (its own write follows this one) and a label.
			patched := ep.DeepCopy()
			patched.Status.HNSEndpointID = "not-the-endpoint"
			g.Expect(server.Client.Status().Patch(ctx, patched, client.MergeFrom(ep))).To(Succeed())
			g.Eventually(func(g Gomega) {
				now := &networkv1alpha1.PodEndpoint{}
				g.Expect(server.Client.Get(ctx, client.ObjectKeyFromObject(ep), now)).To(Succeed())
				g.Expect(now.Status.HNSEndpointID).To(Equal(ep.Status.HNSEndpointID), "the agent did not write its status back")
			}).WithTimeout(converge).Should(Succeed())
			setLabels(t, ep, map[string]string{"touched": "1"})
			time.Sleep(2 * time.Second)
			g.Expect(passCount(t, networkpolicy.PassFull)).To(Equal(full), "a PodEndpoint write that changed no attachment took a full pass")
		}},
		{"a NetworkPolicy in a namespace without a local Pod takes no pass", func(t *testing.T) {
			g := NewWithT(t)
			far := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "np-far", Labels: map[string]string{"team": "far"}}}
			g.Expect(server.Client.Create(ctx, far)).To(Succeed())
			t.Cleanup(func() { _ = server.Client.Delete(context.Background(), far) })
			time.Sleep(2 * time.Second)
			full := passCount(t, networkpolicy.PassFull)
			createPolicy(t, &networkingv1.NetworkPolicy{
				ObjectMeta: metav1.ObjectMeta{Namespace: "np-far", Name: "far"},
				Spec:       networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}},
			})
			time.Sleep(2 * time.Second)
			g.Expect(passCount(t, networkpolicy.PassFull)).To(Equal(full), "a policy selecting no local Pod took a full pass")
		}},
		{"a Namespace label no policy reads takes no pass, one a policy reads does", func(t *testing.T) {
			g := NewWithT(t)
			createPolicy(t, &networkingv1.NetworkPolicy{
				ObjectMeta: metav1.ObjectMeta{Namespace: "np-x", Name: "from-tier"},
				Spec: networkingv1.NetworkPolicySpec{
					PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
					PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
					Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{
						NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "front"}}}}}},
				},
			})
			time.Sleep(2 * time.Second)
			full := passCount(t, networkpolicy.PassFull)
			setLabels(t, nsY, map[string]string{"team": "y", "unread": "1"})
			time.Sleep(2 * time.Second)
			g.Expect(passCount(t, networkpolicy.PassFull)).To(Equal(full), "a label no selector reads took a full pass")
			setLabels(t, nsY, map[string]string{"team": "y", "tier": "front"})
			g.Eventually(func() float64 { return passCount(t, networkpolicy.PassFull) }).WithTimeout(converge).Should(BeNumerically(">", full),
				"a label a selector reads took no pass")
			setLabels(t, nsY, map[string]string{"team": "y"})
		}},
		// Issue 38: an agent holds the Pods its policies name, and no other remote Pod.
		{"a Pod no local policy names does not reach the agents; a namespace gaining a selected label brings its Pods in; a policy deleted closes its watch", func(t *testing.T) {
			g := NewWithT(t)
			// A Pod of a node that exists only in the API server (no agent runs it), in np-y:
			// from-front (a namespaceSelector tier=front alone) does not select np-y yet, and web's
			// peers are app=client Pods.
			createPolicy(t, &networkingv1.NetworkPolicy{
				ObjectMeta: metav1.ObjectMeta{Namespace: "np-x", Name: "from-front"},
				Spec: networkingv1.NetworkPolicySpec{
					PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
					PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
					Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{
						NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "front"}}}}}},
				},
			})
			outsiderIP := "10.244.99.7"
			outsider := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: "np-y", Name: "outsider", Labels: map[string]string{"app": "outsider"}},
				Spec:       corev1.PodSpec{NodeName: "np-nowhere", Containers: []corev1.Container{{Name: "c", Image: "pause"}}},
			}
			g.Expect(server.Client.Create(ctx, outsider)).To(Succeed())
			t.Cleanup(func() { _ = server.Client.Delete(context.Background(), outsider, client.GracePeriodSeconds(0)) })
			outsider.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: outsiderIP, PodIPs: []corev1.PodIP{{IP: outsiderIP}}}
			g.Expect(server.Client.Status().Update(ctx, outsider)).To(Succeed())
			// kubelet's status writes: a condition toggled.
			touch := func(n int) {
				t.Helper()
				for i := range n {
					g.Expect(server.Client.Get(ctx, client.ObjectKeyFromObject(outsider), outsider)).To(Succeed())
					status := corev1.ConditionTrue
					if i%2 == 1 {
						status = corev1.ConditionFalse
					}
					outsider.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.Now()}}
					g.Expect(server.Client.Status().Update(ctx, outsider)).To(Succeed())
				}
			}
			peerFlow := func() (bool, error) {
				flows, err := a.OVS.DumpFlows("br-int", "-O", "OpenFlow15", fmt.Sprintf("table=%d", pipeline.IngressRuleTable))
				if err != nil {
					return false, err
				}
				return slices.ContainsFunc(flows, func(f string) bool {
					return strings.Contains(f, "nw_src="+outsiderIP+",") || strings.Contains(f, "nw_src="+outsiderIP+" ")
				}), nil
			}
			time.Sleep(2 * time.Second)
			events, watches := metricSum(t, "winnet_networkpolicy_peer_pod_events_total"), metricSum(t, "winnet_networkpolicy_peer_watches")
			g.Expect(watches).To(BeNumerically(">", 0), "node a has no peer watch")
			touch(4)
			time.Sleep(2 * time.Second)
			g.Expect(metricSum(t, "winnet_networkpolicy_peer_pod_events_total")).To(Equal(events), "a Pod no local policy names reached an agent")
			g.Expect(peerFlow()).To(BeFalse(), "the outsider is a peer before its namespace is selected")

			// np-y gains tier=front: from-front names every Pod of it, a watch of np-y opens.
			setLabels(t, nsY, map[string]string{"team": "y", "tier": "front"})
			g.Eventually(peerFlow).WithTimeout(converge).Should(BeTrue(), "the Pods of a namespace that gained a selected label did not come in")
			g.Expect(metricSum(t, "winnet_networkpolicy_peer_watches")).To(Equal(watches + 1))

			// from-front deleted: its watch closes, and the outsider's updates reach no agent.
			g.Expect(server.Client.Delete(ctx, &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "np-x", Name: "from-front"}})).To(Succeed())
			g.Eventually(func() float64 { return metricSum(t, "winnet_networkpolicy_peer_watches") }).WithTimeout(converge).Should(Equal(watches),
				"the watch of a deleted policy's peers is open")
			g.Eventually(peerFlow).WithTimeout(converge).Should(BeFalse())
			events = metricSum(t, "winnet_networkpolicy_peer_pod_events_total")
			touch(2)
			time.Sleep(2 * time.Second)
			g.Expect(metricSum(t, "winnet_networkpolicy_peer_pod_events_total")).To(Equal(events), "a Pod no local policy names any more reached an agent")
			setLabels(t, nsY, map[string]string{"team": "y"})
		}},
		{"policies are enforced again after ovs-vswitchd is killed and restarted", func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(a.OVS.KillVswitchd()).To(Succeed())
			g.Expect(a.OVS.StartVswitchd()).To(Succeed())
			a.OVS.ExactMatchDatapath(t) // a new ovs-vswitchd caches megaflows again
			expectAllowed(t, clientB.NS, "tcp4", webHTTP, "web")
			expectRefused(t, clientB.NS, "tcp4", webOther)
		}},
		{"an SCTP port gets a Warning Event on the policy", func(t *testing.T) {
			createPolicy(t, &networkingv1.NetworkPolicy{
				ObjectMeta: metav1.ObjectMeta{Namespace: "np-x", Name: "sctp"},
				Spec: networkingv1.NetworkPolicySpec{
					PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
					Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{
						{Protocol: ptr.To(corev1.ProtocolSCTP), Port: ptr.To(intstr.FromInt32(9))}}}},
				},
			})
			NewWithT(t).Eventually(func(g Gomega) {
				g.Expect(server.WarningReasons(ctx, "np-x", "sctp")).To(ContainElement(networkpolicy.UnsupportedProtocolReason))
			}).WithTimeout(converge).Should(Succeed())
		}},
		{"an ingress ipBlock of 0.0.0.0/0 except 4,000 /32s refuses an excepted source and admits another, in fewer than 2 x 4,000 + 500 flows", func(t *testing.T) {
			g := NewWithT(t)
			createPolicy(t, exceptPolicy("except", networkpolicy.MaxExceptsPerRule, clientB.IP))
			expectAllowed(t, clientA.NS, "tcp4", webOther, "web")
			expectRefused(t, clientB.NS, "tcp4", webOther)
			flows, err := a.OVS.DumpFlows("br-int", "-O", "OpenFlow15")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(len(flows)).To(BeNumerically("<", 2*networkpolicy.MaxExceptsPerRule+500))
		}},
		{"a rule above 4,000 exceptions is refused: PoliciesReady names it, a Warning Event says why, the policy's other rules apply", func(t *testing.T) {
			np := exceptPolicy("too-big", networkpolicy.MaxExceptsPerRule+1, clientB.IP)
			// Its second rule admits client-b: the rule refused (which would admit client-a) does not
			// take the policy's other rules with it.
			np.Spec.Ingress = append(np.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{
				From: []networkingv1.NetworkPolicyPeer{{
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "y"}},
					PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}},
				}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(otherPort))}},
			})
			createPolicy(t, np)
			expectAllowed(t, clientB.NS, "tcp4", webOther, "web")
			expectRefused(t, clientA.NS, "tcp4", webOther)
			NewWithT(t).Eventually(func(g Gomega) {
				w := &networkv1alpha1.WindowsNodeNetwork{}
				g.Expect(server.Client.Get(ctx, client.ObjectKey{Name: a.Name}, w)).To(Succeed())
				c := meta.FindStatusCondition(w.Status.Conditions, networkv1alpha1.PoliciesReadyCondition)
				g.Expect(c).NotTo(BeNil())
				g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
				g.Expect(c.Reason).To(Equal(networkv1alpha1.PolicyRulesRefusedReason))
				g.Expect(c.Message).To(ContainSubstring("np-x/too-big: ingress rule 1: 4001 ipBlock exceptions"))
				g.Expect(server.WarningReasons(ctx, "np-x", "too-big")).To(ContainElement(networkpolicy.RuleRefusedReason))
			}).WithTimeout(converge).Should(Succeed())
		}},
		{"a Pod created under a policy that selects it is refused from its first packet", func(t *testing.T) {
			g := NewWithT(t)
			createPolicy(t, &networkingv1.NetworkPolicy{
				ObjectMeta: metav1.ObjectMeta{Namespace: "np-x", Name: "fresh"},
				Spec: networkingv1.NetworkPolicySpec{
					PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "fresh"}},
					Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
						{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}}}}}},
				},
			})
			// A node whose policy passes take a while (three policies of 4,000 exceptions on web):
			// the pass that first knows the new Pod ends well after its vNIC could forward.
			for i := range 3 {
				np := exceptPolicy(fmt.Sprintf("load-%d", i), networkpolicy.MaxExceptsPerRule, netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}))
				for j := range np.Spec.Ingress[0].From[0].IPBlock.Except[1:] {
					np.Spec.Ingress[0].From[0].IPBlock.Except[1+j] = netip.AddrFrom4([4]byte{byte(100 + i), 64, byte(j >> 8), byte(j)}).String() + "/32"
				}
				np.Spec.Ingress[0].Ports[0].Port = ptr.To(intstr.FromInt32(int32(1 + i)))
				createPolicy(t, np)
			}
			// Let the agent realise the policies (fresh selects no Pod yet): client-b, refused by
			// fresh, then sends to the new Pod every millisecond from before its vNIC exists.
			g.Eventually(func() (int, error) {
				flows, err := a.OVS.DumpFlows("br-int", "-O", "OpenFlow15", fmt.Sprintf("table=%d", pipeline.IngressPeerClassTable))
				return len(flows), err
			}).WithTimeout(converge).Should(BeNumerically(">", 3*networkpolicy.MaxExceptsPerRule))
			time.Sleep(time.Second)
			var received atomic.Int64
			stop := make(chan struct{})
			sent := make(chan int, 1)
			fresh := a.AddPod(t, "fresh", framework.TestPodOptions{Namespace: "np-x", Labels: map[string]string{"app": "fresh"}, Ports: httpPorts,
				BeforeStart: func(p *framework.TestPod) {
					var pc net.PacketConn
					var conn net.Conn
					g.Expect(framework.InNS(p.NS, func() (err error) {
						pc, err = net.ListenPacket("udp4", fmt.Sprintf(":%d", probePort))
						return err
					})).To(Succeed())
					t.Cleanup(func() { pc.Close() })
					go func() {
						buf := make([]byte, 100)
						for {
							if _, _, err := pc.ReadFrom(buf); err != nil {
								return
							}
							received.Add(1)
						}
					}()
					g.Expect(framework.InNS(clientB.NS, func() (err error) {
						conn, err = net.Dial("udp4", netip.AddrPortFrom(p.IP, probePort).String())
						return err
					})).To(Succeed())
					go func() {
						defer conn.Close()
						n := 0
						for {
							select {
							case <-stop:
								sent <- n
								return
							default:
							}
							if _, err := conn.Write([]byte("probe")); err == nil {
								n++
							}
							time.Sleep(time.Millisecond)
						}
					}()
				}})
			framework.Serve(t, fresh.NS, "fresh", httpPort)
			// The Pod forwards: a client its policy admits reaches it.
			expectAllowed(t, clientA.NS, "tcp4", netip.AddrPortFrom(fresh.IP, httpPort), "fresh")
			time.Sleep(500 * time.Millisecond)
			close(stop)
			n := <-sent
			g.Expect(n).To(BeNumerically(">", 100), "client-b sent too few probes to prove anything")
			g.Expect(received.Load()).To(BeZero(), "the new Pod received %d of client-b's %d probes before its policy held", received.Load(), n)
		}},
		{"deleting the policies opens everything again and leaves no policy flow", func(t *testing.T) {
			g := NewWithT(t)
			list := &networkingv1.NetworkPolicyList{}
			g.Expect(server.Client.List(ctx, list, client.InNamespace("np-x"))).To(Succeed())
			for i := range list.Items {
				g.Expect(server.Client.Delete(ctx, &list.Items[i])).To(Succeed())
			}
			expectAllowed(t, clientA.NS, "tcp4", webOther, "web")
			g.Expect(echo(dial(t, clientB.NS, webEcho))).To(Succeed())
			flows, err := a.OVS.DumpFlows("br-int", "-O", "OpenFlow15")
			g.Expect(err).NotTo(HaveOccurred())
			for _, f := range flows {
				g.Expect(f).NotTo(ContainSubstring("conjunction("), "a rule's flow is left: %s", f)
				g.Expect(f).NotTo(MatchRegexp(`table=(60|100), .* actions=drop`), "an isolation flow is left: %s", f)
			}
		}},
	}
	for _, tc := range cases {
		if !t.Run(tc.name, tc.run) {
			return // later cases build on the state of earlier ones
		}
	}
}
