//go:build linux

package service_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/winnet-io/winnet/internal/hostnet"
	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/simnode"
)

// TestChangesShareTheNextBundle: while the switch is slow to commit one Service's bundle (here
// ovs-vswitchd is stopped with SIGSTOP), the changes of other Services are computed and wait
// together for the next bundle instead of each waiting for the pass before it; once the switch
// goes on, every change is in the switch, in two bundles, and a full pass computed from scratch
// changes nothing. The passes of these Services, which have no NodePort, do not apply the host's
// NodePort NAT again.
func TestChangesShareTheNextBundle(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	u := simnode.NewUnderlay(t, netip.MustParsePrefix("192.168.67.0/24"))
	n := framework.StartPodNodeWith(t, server, u, "svcconc-a", "192.168.67.11/24", "10.244.67.0/24", 30*time.Second,
		framework.PodNodeOptions{Agent: framework.AgentOptions{ResyncPeriod: time.Hour}})
	r := n.Agent.Services
	const ns, services = "svcconc", 8
	g.Expect(server.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())

	endpoint := func(i, n int) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.244.%d.%d", 68+n, 10+i)}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}
	}
	slicesOf := make([]*discoveryv1.EndpointSlice, services)
	for i := range services {
		name := fmt.Sprintf("web-%d", i)
		g.Expect(server.Client.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.ServiceSpec{
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
		}})).To(Succeed())
		slicesOf[i] = &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(int32(8080))}},
			Endpoints:   []discoveryv1.Endpoint{endpoint(i, 0)},
		}
		g.Expect(server.Client.Create(ctx, slicesOf[i])).To(Succeed())
	}
	// inGroups: every Service's group balances over the endpoints of rounds 0..last.
	inGroups := func(last int) func(Gomega) {
		return func(g Gomega) {
			groups, err := n.OVS.DumpGroups("br-int")
			g.Expect(err).NotTo(HaveOccurred())
			all := strings.Join(groups, "\n")
			for i := range services {
				for round := 0; round <= last; round++ {
					g.Expect(all).To(ContainSubstring("nat(dst=" + endpoint(i, round).Addresses[0] + ":8080)"))
				}
			}
		}
	}
	g.Eventually(inGroups(0), 30*time.Second, 50*time.Millisecond).Should(Succeed())
	waitComputed(t, r)
	rz, ok := r.State.Realized()
	g.Expect(ok).To(BeTrue())
	// The node's other flow owners finish their first passes (NetworkPolicy, the Pods' flows at
	// start-up, the routes): no bundle for a second, so that the bundles counted below are the
	// Services' (a loaded machine once put two of those first passes inside the count).
	g.Eventually(func() uint64 {
		before := rz.Flows.Bundles()
		time.Sleep(time.Second)
		return rz.Flows.Bundles() - before
	}, 30*time.Second).Should(BeZero())
	bundles := rz.Flows.Bundles()

	// The Services have no NodePort: their passes leave the host's NodePort NAT alone (on Windows
	// a WMI call each).
	nat := &countedNAT{}
	r.WrapNodePorts(func(h hostnet.NodePortNAT) hostnet.NodePortNAT {
		nat.NodePortNAT = h
		return nat
	})

	// The switch stops: the first pass's bundle waits for its commit reply.
	pid := n.OVS.VswitchdPid()
	g.Expect(pid).NotTo(BeZero(), "ovs-vswitchd is running")
	g.Expect(syscall.Kill(pid, syscall.SIGSTOP)).To(Succeed())
	stopped := true
	resume := func() {
		if stopped {
			stopped = false
			g.Expect(syscall.Kill(pid, syscall.SIGCONT)).To(Succeed())
		}
	}
	t.Cleanup(resume)
	for i := range services {
		g.Expect(server.Client.Get(ctx, client.ObjectKeyFromObject(slicesOf[i]), slicesOf[i])).To(Succeed())
		slicesOf[i].Endpoints = append(slicesOf[i].Endpoints, endpoint(i, 1))
		g.Expect(server.Client.Update(ctx, slicesOf[i])).To(Succeed())
	}
	g.Eventually(rz.Flows.Queued, 30*time.Second, 20*time.Millisecond).Should(BeNumerically(">=", services-1),
		"while the switch commits one Service's bundle, the other Services' changes are computed and wait for the next bundle (not for the pass before them)")
	// Other flow owners' syncs (with nothing to change) wait in the same queue: the queue stops
	// growing once every Service's change waits too.
	g.Eventually(func() int {
		before := rz.Flows.Queued()
		time.Sleep(300 * time.Millisecond)
		return rz.Flows.Queued() - before
	}, 30*time.Second).Should(BeZero())
	resume()

	g.Eventually(inGroups(1), 30*time.Second, 50*time.Millisecond).Should(Succeed())
	waitComputed(t, r)
	// The first pass's bundle and one for the others (and room for one of another flow owner).
	g.Expect(rz.Flows.Bundles()-bundles).To(BeNumerically("<=", 3), "the changes queued behind the first shared a bundle")

	g.Expect(nat.calls.Load()).To(BeZero(), "the passes of Services without NodePorts applied the host's NodePort NAT again")

	// What the concurrent passes left is what a full pass computed from scratch installs.
	dump := func() []string { return switchState(g, n.OVS) }
	concurrent := dump()
	g.Expect(r.FullPassFromScratch(ctx)).To(Succeed())
	full := dump()
	g.Expect(without(full, concurrent)).To(BeEmpty(), "a full pass from scratch added these")
	g.Expect(without(concurrent, full)).To(BeEmpty(), "a full pass from scratch removed these")
}

// countedNAT is the real host NAT of NodePorts, counting its calls.
type countedNAT struct {
	hostnet.NodePortNAT
	calls atomic.Int32
}

func (n *countedNAT) ReconcileNodePorts(ctx context.Context, target netip.Addr, ports []hostnet.NodePort) error {
	n.calls.Add(1)
	return n.NodePortNAT.ReconcileNodePorts(ctx, target, ports)
}
