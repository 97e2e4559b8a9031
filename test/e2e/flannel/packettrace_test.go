//go:build linux

package flannel

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/test/e2e/cluster"
)

// TestPacketTraceToFlannelEndpoint: a Service's only endpoint is lx-1 on the flannel node linux-a, which runs no
// winnet agent. A trace to the Service from pod-a1 is DNATed on node-a and consumed there before the VXLAN
// tunnel to linux-a, with ForwardedExternally naming linux-a's VTEP; lx-1's listener receives nothing of it
// (a real datagram sent the same way afterwards arrives), and node-a keeps no conntrack entry of the trace's
// 5-tuple.
func TestPacketTraceToFlannelEndpoint(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	const port = 7474
	lx1, a1 := lxPods["lx-1"], pods["pod-a1"]
	var received atomic.Int32
	err := ns.WithNetNSPath(lx1.NSPath, func(ns.NetNS) error {
		pc, err := net.ListenPacket("udp4", fmt.Sprintf(":%d", port))
		if err != nil {
			return err
		}
		t.Cleanup(func() { _ = pc.Close() })
		go func() {
			buf := make([]byte, 2048)
			for {
				if _, _, err := pc.ReadFrom(buf); err != nil {
					return
				}
				received.Add(1)
			}
		}()
		return nil
	})
	g.Expect(err).NotTo(HaveOccurred())

	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.PodNamespace, Name: "trace-flannel"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "dns", Port: port, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(port)}}},
	}
	g.Expect(c.Client.Create(ctx, svc)).To(Succeed())
	t.Cleanup(func() { _ = c.Client.Delete(context.Background(), svc) })
	// lx-1 is no Kubernetes Pod here, and its endpoint names no node: the trace's path is node-a alone, as the
	// controller makes it for an endpoint on a node without a ready winnet agent.
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: cluster.PodNamespace, Name: "trace-flannel", Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{lx1.IP.String()}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("dns"), Protocol: ptr.To(corev1.ProtocolUDP), Port: ptr.To(int32(port))}},
	}
	g.Expect(c.Client.Create(ctx, slice)).To(Succeed())
	t.Cleanup(func() { _ = c.Client.Delete(context.Background(), slice) })
	g.Expect(c.Client.Get(ctx, client.ObjectKeyFromObject(svc), svc)).To(Succeed())
	g.Eventually(c.Node("node-a").Flows).WithTimeout(timeout).Should(MatchRegexp(`table=40, .*nw_dst=`+svc.Spec.ClusterIP+`,tp_dst=`+fmt.Sprint(port)+` actions=group:`),
		"node-a balances the Service")

	tr := &networkv1alpha1.PacketTrace{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.PodNamespace, Name: "trace-flannel"},
		Spec: networkv1alpha1.PacketTraceSpec{
			Source:      networkv1alpha1.PacketTraceSource{Pod: networkv1alpha1.ObjectReference{Name: a1.Name}},
			Destination: networkv1alpha1.PacketTraceDestination{Service: &networkv1alpha1.ObjectReference{Name: svc.Name}},
			Packet:      networkv1alpha1.PacketTracePacket{Protocol: networkv1alpha1.PacketTraceUDP, DstPort: port}, TimeoutSeconds: 30,
		},
	}
	g.Expect(c.Client.Create(ctx, tr)).To(Succeed())
	t.Cleanup(func() { _ = c.Client.Delete(context.Background(), tr) })
	g.Eventually(func(g Gomega) {
		g.Expect(c.Client.Get(ctx, client.ObjectKeyFromObject(tr), tr)).To(Succeed())
		g.Expect(tr.Status.Phase).To(BeElementOf(networkv1alpha1.PacketTraceSucceeded, networkv1alpha1.PacketTraceFailed))
	}).WithTimeout(timeout).WithPolling(200 * time.Millisecond).Should(Succeed())
	var obs []string
	for _, h := range tr.Status.Hops {
		for _, o := range h.Observations {
			obs = append(obs, h.Node+": "+o.Component+" "+o.Action+" "+o.Detail)
		}
	}
	t.Logf("PacketTrace %s: %s %s %s\n%s", tr.Name, tr.Status.Phase, tr.Status.Verdict, tr.Status.Message, strings.Join(obs, "\n"))

	g.Consistently(received.Load).WithTimeout(time.Second).Should(BeZero(), "lx-1's application received the traced datagram")
	out, err := c.Node("node-a").OVS.Appctl("dpctl/dump-conntrack")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).NotTo(ContainSubstring(fmt.Sprintf("orig=(src=%s,dst=%s,sport=%d,", tr.Status.SourceIP, svc.Spec.ClusterIP, tr.Status.SourcePort)),
		"a conntrack entry of the trace on node-a")
	g.Expect(tr.Status.Verdict).To(Equal(networkv1alpha1.PacketTraceForwardedExternally))
	g.Expect(obs).To(HaveExactElements(
		HavePrefix("node-a: Source Injected UDP "+a1.IP.String()),
		HavePrefix(fmt.Sprintf("node-a: ServiceDNAT DNAT to endpoint %s:%d", lx1.IP, port)),
		fmt.Sprintf("node-a: Forwarding ForwardedExternally tunnel to %s: not a node on the trace's path (no winnet agent there): consumed here", linuxA.IP)))

	// The control: a real datagram to the Service reaches lx-1 (the first ones may be lost while node-a resolves
	// linux-a's MAC).
	g.Eventually(func() int32 {
		_ = ns.WithNetNSPath(a1.NSPath, func(ns.NetNS) error {
			conn, err := net.Dial("udp4", net.JoinHostPort(svc.Spec.ClusterIP, fmt.Sprint(port)))
			if err != nil {
				return err
			}
			defer conn.Close()
			_, err = conn.Write([]byte("real"))
			return err
		})
		return received.Load()
	}).WithTimeout(10*time.Second).WithPolling(200*time.Millisecond).Should(BeNumerically(">=", 1), "a real datagram reaches lx-1")
}
