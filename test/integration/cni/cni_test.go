//go:build linux

package cni_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/winnet-io/winnet/controllers/podendpoint"
	"github.com/winnet-io/winnet/test/simnode"
)

func TestPodNetwork(t *testing.T) {
	n := startNode(t, "cni-a", "192.168.20.11/24", "10.244.1.0/24")
	ctx := context.Background()

	t.Run("ADD gives a working network at once; two Pods reach each other; DEL twice", func(t *testing.T) {
		g := NewWithT(t)
		p1, p2 := n.newPod(t, "web-1", true), n.newPod(t, "web-2", true)
		r1 := n.add(t, p1)
		sent, received, err := simnode.Ping(p1.ns, n.gateway, 1)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(received).To(Equal(sent), "the gateway answers the first ping right after ADD")
		ip1 := podIP(g, r1)
		g.Expect(n.podCIDR.Contains(ip1)).To(BeTrue())
		g.Expect(r1.IPs[0].Gateway.String()).To(Equal(n.gateway.String()))
		g.Expect(r1.Interfaces[0].Mtu).To(Equal(1450))
		g.Expect(r1.DNS.Nameservers).To(Equal([]string{"10.96.0.10"}))

		r2 := n.add(t, p2)
		ip2 := podIP(g, r2)
		sent, received, err = simnode.Ping(p2.ns, ip1, 2)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(received).To(Equal(sent), "Pod to Pod on the node")

		g.Expect(n.cni.CheckNetworkList(ctx, n.list, p1.rt)).To(Succeed())
		g.Eventually(func(g Gomega) {
			pep := podEndpoint(g, p1.name)
			g.Expect(readyStatus(pep)).To(Equal(metav1.ConditionTrue))
			g.Expect(pep.Spec.IPs).To(ConsistOf(BeEquivalentTo(r1.IPs[0].Address.String())))
			g.Expect(pep.Status.OVSPort).To(Equal(podendpoint.EndpointName(p1.sandbox)))
			g.Expect(pep.OwnerReferences).To(ContainElement(HaveField("UID", BeEquivalentTo(p1.uid))))
		}).WithTimeout(repair).Should(Succeed())

		for _, p := range []*testPod{p1, p2} {
			g.Expect(n.cni.DelNetworkList(ctx, n.list, p.rt)).To(Succeed())
			g.Expect(n.cni.DelNetworkList(ctx, n.list, p.rt)).To(Succeed(), "a second DEL succeeds")
		}
		_ = ip2
		g.Expect(n.leftovers(g)).To(BeEmpty())
	})
}
