//go:build linux

package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"golang.org/x/net/dns/dnsmessage"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/winnet-io/winnet/test/e2e/cluster"
)

// TestServiceCoreDNSReplaced: a resolver that keeps one UDP socket to a DNS Service (as a Pod's resolver
// library may) gets answers from the real CoreDNS before and after the CoreDNS Pod it reached is replaced: a
// second CoreDNS Pod starts on another node, the first one goes, and the same socket is answered again (by the
// second). The resolver's queries are one conntrack connection, DNATed to the first Pod; the agent flushes the
// conntrack zone of the Service's UDP port when that endpoint goes, so that the next query is balanced afresh.
// The CoreDNS here is a deployment of its own (its own namespace and Service), so that the cluster DNS the
// other tests use is not disturbed.
// Upstream: test/e2e/network/conntrack.go "should be able to preserve UDP traffic when server pod cycles for a
// ClusterIP service", with CoreDNS as the server (issue #18: "replacing the CoreDNS Pod").
func TestServiceCoreDNSReplaced(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	start := time.Now()
	const namespace = "dns-replace"
	g.Expect(c.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}})).To(Succeed())
	t.Cleanup(func() { _ = c.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}) })
	labels := map[string]string{"app": "coredns-replace"}
	svc := cluster.CoreDNSService(namespace, "dns", labels)
	g.Expect(c.Client.Create(ctx, svc)).To(Succeed())
	t.Cleanup(func() { _ = c.Client.Delete(ctx, svc) })
	startDNS := func(nodeName, name string) *cluster.CoreDNS {
		d, err := c.StartCoreDNS(ctx, node(nodeName), namespace, name, labels, readyTimeout)
		if d != nil {
			t.Cleanup(func() { _ = d.Stop(ctx, c) })
		}
		g.Expect(err).NotTo(HaveOccurred())
		return d
	}

	first := startDNS("node-a", "coredns-1")
	waitEndpointIPs(t, svc, first.Pod.IP)
	client := pods["pod-c1"]
	dst := netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), 53)
	conn, err := cluster.DialUDP(ctx, client.Place(), dst, askTimeout)
	g.Expect(err).NotTo(HaveOccurred())
	defer conn.Close()
	r := &socketResolver{conn: conn}
	name := "kubernetes.default.svc." + cluster.ClusterDomain + "."
	resolve := func() (netip.Addr, error) { return r.lookupA(name, 300*time.Millisecond) }
	// The Service's flows can lag its EndpointSlice: the first answer may take a few tries.
	g.Eventually(resolve).WithTimeout(converge).WithPolling(100 * time.Millisecond).Should(Equal(cluster.KubernetesServiceIP))
	before := r.sent

	second := startDNS("node-b", "coredns-2")
	waitEndpointIPs(t, svc, first.Pod.IP, second.Pod.IP)
	g.Expect(resolve()).To(Equal(cluster.KubernetesServiceIP), "a CoreDNS Pod added leaves the resolver where it is")

	replaced := time.Now()
	g.Expect(first.Stop(ctx, c)).To(Succeed())
	stopped := time.Since(replaced)
	g.Eventually(resolve).WithTimeout(converge).WithPolling(100*time.Millisecond).Should(Equal(cluster.KubernetesServiceIP),
		"the resolver's socket is answered again once the CoreDNS Pod it reached is gone")
	t.Logf("one socket from %s (local port %s): answered before and after CoreDNS %s was replaced by %s; answered again %v after the replacement began (the Pod's deletion took %v); %d queries before the replacement, %d in all; test %v",
		client.Name, conn.LocalAddr(), first.Pod.Name, second.Pod.Name, time.Since(replaced).Round(10*time.Millisecond),
		stopped.Round(10*time.Millisecond), before, r.sent, time.Since(start).Round(10*time.Millisecond))
}

// socketResolver asks a DNS server over one UDP socket, as a resolver that keeps its socket does.
type socketResolver struct {
	conn net.Conn
	id   uint16
	sent int
}

// lookupA asks for name's A record and returns the first address of the answer; answers to earlier queries
// (late ones) are skipped.
func (r *socketResolver) lookupA(name string, timeout time.Duration) (netip.Addr, error) {
	r.id++
	r.sent++
	q := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: r.id, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName(name), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}},
	}
	packet, err := q.Pack()
	if err != nil {
		return netip.Addr{}, err
	}
	if err := r.conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return netip.Addr{}, err
	}
	if _, err := r.conn.Write(packet); err != nil {
		return netip.Addr{}, fmt.Errorf("sending a query for %s: %w", name, err)
	}
	buf := make([]byte, 1500)
	for {
		n, err := r.conn.Read(buf)
		if err != nil {
			return netip.Addr{}, fmt.Errorf("waiting for the answer for %s: %w", name, err)
		}
		var m dnsmessage.Message
		if err := m.Unpack(buf[:n]); err != nil {
			return netip.Addr{}, fmt.Errorf("parsing the answer for %s: %w", name, err)
		}
		if m.ID != r.id {
			continue
		}
		if m.RCode != dnsmessage.RCodeSuccess {
			return netip.Addr{}, fmt.Errorf("answer for %s: %s", name, m.RCode)
		}
		for _, a := range m.Answers {
			if rr, ok := a.Body.(*dnsmessage.AResource); ok {
				return netip.AddrFrom4(rr.A), nil
			}
		}
		return netip.Addr{}, errors.New("no A record in the answer for " + name)
	}
}
