//go:build linux

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/winnet-io/winnet/test/e2e/cluster"
)

// Shape of TestServiceThousandEndpoints: endpoint Pods, and ports each serves, one EndpointSlice per port.
const (
	scalePods         = 4
	scalePortsPerPod  = 250
	scaleFirstPort    = 20000
	scaleConnections  = 300
	scaleMinEndpoints = 150
)

// TestServiceThousandEndpoints: a selectorless Service whose EndpointSlices the test writes holds 1,000
// endpoints (250 ports on each of 4 real Pods, one slice per port); its select group is too large for one
// OpenFlow message and goes to the switch in pieces (a group_mod and insert_buckets in one bundle). Every one of
// 300 new connections from a Pod on a third node is answered, by endpoints spread over the 1,000: at least 150
// distinct ones (about 260 expected) on every Pod.
// Upstream: test/e2e/network/service.go "should be able to handle large requests: http" covers the size of a
// request; the scale of one Service is kube-proxy's scale tests (test/e2e/network/scale, "[Feature:
// PerformanceDNS]") and Antrea's "800 Endpoints" limit (antrea-proxy.md), not a conformance case.
func TestServiceThousandEndpoints(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	start := time.Now()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.PodNamespace, Name: "thousand"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
	}
	g.Expect(c.Client.Create(ctx, svc)).To(Succeed())
	t.Cleanup(func() { _ = c.Client.Delete(ctx, svc) })

	var endpoints []*cluster.Pod
	for i := range scalePods {
		nodeName := []string{"node-a", "node-b"}[i%2]
		p, err := c.AddPodWith(ctx, node(nodeName), fmt.Sprintf("many-%d", i), cluster.PodOptions{}, readyTimeout)
		g.Expect(err).NotTo(HaveOccurred())
		t.Cleanup(func() { _ = c.DeletePod(ctx, p) })
		for port := scaleFirstPort; port < scaleFirstPort+scalePortsPerPod; port++ {
			e, err := cluster.ServeNamedEcho(p.NSPath, fmt.Sprintf("%s:%d", p.IP, port), []int{port}, nil)
			g.Expect(err).NotTo(HaveOccurred())
			t.Cleanup(e.Close)
		}
		endpoints = append(endpoints, p)
	}
	// One slice per port, holding every Pod: written 8 at a time.
	var wg sync.WaitGroup
	errs := make(chan error, scalePortsPerPod)
	sem := make(chan struct{}, 8)
	for port := scaleFirstPort; port < scaleFirstPort+scalePortsPerPod; port++ {
		slice := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: svc.Namespace, Name: fmt.Sprintf("thousand-%d", port),
				Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name, discoveryv1.LabelManagedBy: "e2e.winnet.io"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(int32(port))}},
		}
		for _, p := range endpoints {
			slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{p.IP.String()},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}, NodeName: ptr.To(p.Node)})
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := c.Client.Create(ctx, slice); err != nil {
				errs <- err
				return
			}
			t.Cleanup(func() { _ = c.Client.Delete(ctx, slice) })
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		g.Expect(err).NotTo(HaveOccurred())
	}
	written := time.Since(start)

	// The client's node holds the Service's group with every endpoint.
	client := pods["pod-c1"]
	n := node(client.Node)
	g.Eventually(func() (int, error) {
		out, err := n.OVS.Ofctl("-O", "OpenFlow15", "dump-group-stats", cluster.BridgeName)
		most := 0
		for _, line := range strings.Split(out, "\n") {
			most = max(most, strings.Count(line, ":packet_count="))
		}
		return most, err
	}).WithTimeout(2*converge).WithPolling(250*time.Millisecond).Should(Equal(scalePods*scalePortsPerPod),
		"the buckets of the largest group on %s", n.Name)
	programmed := time.Since(start)

	dst := netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), 80)
	seen := map[string]int{}
	perPod := map[string]int{}
	for range scaleConnections {
		a, err := cluster.AskEcho(ctx, client.Place(), "tcp4", dst, askTimeout)
		g.Expect(err).NotTo(HaveOccurred(), "every connection is answered")
		g.Expect(a.Client).To(Equal(client.IP))
		seen[a.Name]++
		pod, _, _ := strings.Cut(a.Name, ":")
		perPod[pod]++
	}
	t.Logf("1,000 endpoints: Pods and slices written in %v, the group of 1,000 buckets on %s %v after the start; %d connections reached %d endpoints, per Pod %v",
		written.Round(10*time.Millisecond), n.Name, programmed.Round(10*time.Millisecond), scaleConnections, len(seen), perPod)
	g.Expect(len(seen)).To(BeNumerically(">=", scaleMinEndpoints), "distinct endpoints that answered")
	g.Expect(perPod).To(HaveLen(scalePods), "every endpoint Pod answered")
}
