//go:build linux

package networkpolicy_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/winnet-io/winnet/internal/pipeline"
	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/simnode"
)

// TestPeerBurst: 100 remote Pods created at once with their status, peers of a policy on a local
// Pod: each gets its peer flow (issue 38: they arrive through the policy's peer watch).
func TestPeerBurst(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	u := simnode.NewUnderlay(t, netip.MustParsePrefix("192.168.65.0/24"))
	a := framework.StartPodNode(t, server, u, "burst-a", "192.168.65.11/24", "10.244.65.0/24", converge)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "burst-x"}}
	g.Expect(server.Client.Create(ctx, ns)).To(Succeed())
	a.AddPod(t, "web", framework.TestPodOptions{Namespace: "burst-x", Labels: map[string]string{"app": "web"}})
	createPolicy(t, &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "burst-x", Name: "from-burst"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
				{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "burst"}}}}}},
		},
	})
	const n = 100
	errc := make(chan error, n)
	for k := range n {
		go func() {
			p := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: "burst-x", Name: fmt.Sprintf("b-%03d", k), Labels: map[string]string{"role": "burst"}},
				Spec:       corev1.PodSpec{NodeName: "burst-nowhere", Containers: []corev1.Container{{Name: "c", Image: "pause"}}},
			}
			if err := server.Client.Create(ctx, p); err != nil {
				errc <- err
				return
			}
			ip := fmt.Sprintf("10.244.99.%d", k+1)
			p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}
			errc <- server.Client.Status().Update(ctx, p)
		}()
	}
	for range n {
		g.Expect(<-errc).To(Succeed())
	}
	t.Cleanup(func() {
		_ = server.Client.DeleteAllOf(context.Background(), &corev1.Pod{}, client.InNamespace("burst-x"), client.GracePeriodSeconds(0))
	})
	g.Eventually(func() (int, error) {
		flows, err := a.OVS.DumpFlows("br-int", "-O", "OpenFlow15", fmt.Sprintf("table=%d", pipeline.IngressRuleTable))
		if err != nil {
			return 0, err
		}
		dump := strings.Join(flows, "\n") + "\n"
		missing := 0
		for k := range n {
			ip := fmt.Sprintf("10.244.99.%d", k+1)
			if !strings.Contains(dump, "nw_src="+ip+",") && !strings.Contains(dump, "nw_src="+ip+" ") {
				missing++
			}
		}
		return missing, nil
	}).WithTimeout(converge).Should(BeZero())
}
