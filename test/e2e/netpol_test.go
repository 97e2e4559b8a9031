//go:build linux

package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/winnet-io/winnet/test/e2e/cluster"
)

// Ports of the NetworkPolicy test's servers in the Pod "web" (node-a).
const (
	npHTTPPort  = 8080 // the container port named "http"
	npOtherPort = 9090 // allowed only from an ipBlock
	npRangePort = 7070 // inside the endPort range 7000-7100; echoes lines, for connections kept open
)

// npProbe is one new TCP connection and whether policy must let it through.
type npProbe struct {
	from    string // a Pod
	to      string // a Pod
	port    int
	allowed bool
}

// TestNetworkPolicy walks a table of hand-written cases over real packets between Pods on three
// nodes: the policy "web" isolates the Pod web (node-a) for ingress and admits
//   - client Pods (role=client) of namespaces labelled e2e-np=allowed on the port named "http",
//   - client Pods of its namespace on TCP 7000-7100 (endPort),
//   - 10.244.0.0/16 except pod-c1 on TCP 9090 (ipBlock with except).
//
// Each case changes something (the policy, a label) and probes new connections; two connections
// opened before the policy check that established connections are never cut.
func TestNetworkPolicy(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	web, err := c.AddPodWith(ctx, node("node-a"), "web", cluster.PodOptions{
		Labels: map[string]string{"app": "web"},
		Ports:  []corev1.ContainerPort{{Name: "http", ContainerPort: npHTTPPort, Protocol: corev1.ProtocolTCP}},
	}, readyTimeout)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = c.DeletePod(context.Background(), web) })
	all := map[string]*cluster.Pod{"web": web}
	for name, p := range pods {
		all[name] = p
	}
	// The harness writes each Pod's addresses into its status as kubelet does: policy matches remote
	// Pods by them.
	for _, port := range []int{npHTTPPort, npOtherPort} {
		s, err := cluster.ServeEcho(web.NSPath, port)
		g.Expect(err).NotTo(HaveOccurred())
		t.Cleanup(s.Close)
	}
	s, err := cluster.ServeEcho(pods["pod-b1"].NSPath, npHTTPPort)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(s.Close)
	serveLines(t, web.NSPath, npRangePort)
	setPodLabels(t, "pod-a2", map[string]string{"role": "client"})
	setPodLabels(t, "pod-b1", map[string]string{"role": "client"})
	setPodLabels(t, "pod-c1", map[string]string{"role": "other"})
	setNamespaceLabel(t, "e2e-np", "allowed")
	t.Cleanup(func() {
		for _, name := range []string{"pod-a2", "pod-b1", "pod-c1"} {
			setPodLabels(t, name, nil)
		}
		setNamespaceLabel(t, "e2e-np", "")
	})

	policy := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.PodNamespace, Name: "web"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{
				{
					From: []networkingv1.NetworkPolicyPeer{{
						NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"e2e-np": "allowed"}},
						PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"role": "client"}},
					}},
					Ports: []networkingv1.NetworkPolicyPort{{Port: ptr.To(intstr.FromString("http"))}},
				},
				{
					From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "client"}}}},
					Ports: []networkingv1.NetworkPolicyPort{{Port: ptr.To(intstr.FromInt32(7000)), EndPort: ptr.To(int32(7100))}},
				},
				{
					From: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.244.0.0/16",
						Except: []string{pods["pod-c1"].IP.String() + "/32"}}}},
					Ports: []networkingv1.NetworkPolicyPort{{Port: ptr.To(intstr.FromInt32(npOtherPort))}},
				},
			},
		},
	}
	// The connections kept open live as long as the whole test, not the case that opens them.
	var stillAllowed, noLongerAllowed net.Conn
	whole := t

	cases := []struct {
		name   string
		change func(t *testing.T)
		probes []npProbe
		// check runs after the probes.
		check func(t *testing.T)
	}{
		{
			name: "no policy: every Pod reaches web",
			probes: []npProbe{{"pod-a2", "web", npHTTPPort, true}, {"pod-c1", "web", npHTTPPort, true},
				{"pod-c1", "web", npOtherPort, true}, {"pod-a1", "pod-b1", npHTTPPort, true}},
			check: func(t *testing.T) {
				stillAllowed = dialLines(whole, all["pod-a2"], netip.AddrPortFrom(web.IP, npRangePort))
				noLongerAllowed = dialLines(whole, all["pod-c1"], netip.AddrPortFrom(web.IP, npRangePort))
			},
		},
		{
			name: "the policy: a named port for client Pods of labelled namespaces, an endPort range, an ipBlock except one Pod",
			change: func(t *testing.T) {
				NewWithT(t).Expect(c.Client.Create(ctx, policy)).To(Succeed())
			},
			probes: []npProbe{
				{"pod-b1", "web", npHTTPPort, true}, {"pod-a2", "web", npHTTPPort, true}, {"pod-c1", "web", npHTTPPort, false},
				{"pod-a2", "web", npRangePort, true}, {"pod-c1", "web", npRangePort, false},
				{"pod-b1", "web", npOtherPort, true}, {"pod-c1", "web", npOtherPort, false},
				{"pod-a1", "web", npHTTPPort, false},
			},
			check: func(t *testing.T) {
				g := NewWithT(t)
				g.Expect(echoLine(stillAllowed)).To(Succeed(), "an established connection the policy still allows survives it")
				g.Expect(echoLine(noLongerAllowed)).To(Succeed(), "an established connection the policy no longer allows goes on: only new connections are evaluated")
			},
		},
		{
			name:   "the namespace loses its label: the named-port rule no longer admits its Pods",
			change: func(t *testing.T) { setNamespaceLabel(t, "e2e-np", "") },
			probes: []npProbe{{"pod-b1", "web", npHTTPPort, false}, {"pod-b1", "web", npRangePort, true}},
		},
		{
			name:   "the namespace is labelled again",
			change: func(t *testing.T) { setNamespaceLabel(t, "e2e-np", "allowed") },
			probes: []npProbe{{"pod-b1", "web", npHTTPPort, true}},
		},
		{
			name:   "a remote client Pod relabelled out of the peers is refused",
			change: func(t *testing.T) { setPodLabels(t, "pod-b1", map[string]string{"role": "other"}) },
			probes: []npProbe{{"pod-b1", "web", npHTTPPort, false}, {"pod-b1", "web", npRangePort, false}},
		},
		{
			name:   "relabelled back into the peers, it is admitted again",
			change: func(t *testing.T) { setPodLabels(t, "pod-b1", map[string]string{"role": "client"}) },
			probes: []npProbe{{"pod-b1", "web", npHTTPPort, true}},
		},
		{
			name:   "a Pod on another node relabelled into the policy's selector is isolated (its port has no name http)",
			change: func(t *testing.T) { setPodLabels(t, "pod-b1", map[string]string{"role": "client", "app": "web"}) },
			probes: []npProbe{{"pod-a1", "pod-b1", npHTTPPort, false}, {"pod-a2", "pod-b1", npHTTPPort, false}},
		},
		{
			name:   "relabelled out of the selector, it is open again",
			change: func(t *testing.T) { setPodLabels(t, "pod-b1", map[string]string{"role": "client"}) },
			probes: []npProbe{{"pod-a1", "pod-b1", npHTTPPort, true}},
		},
		{
			name: "the policy deleted: the connection that was no longer allowed is allowed again, for new connections too",
			change: func(t *testing.T) {
				NewWithT(t).Expect(c.Client.Delete(ctx, policy)).To(Succeed())
			},
			probes: []npProbe{{"pod-c1", "web", npRangePort, true}, {"pod-c1", "web", npHTTPPort, true}, {"pod-a1", "web", npHTTPPort, true}},
		},
	}
	t.Cleanup(func() { _ = c.Client.Delete(context.Background(), policy) })
	for _, tc := range cases {
		ok := t.Run(tc.name, func(t *testing.T) {
			if tc.change != nil {
				tc.change(t)
			}
			for _, p := range tc.probes {
				cluster.ExpectConnection(t, all[p.from], all[p.to], p.port, p.allowed, converge)
			}
			if tc.check != nil {
				tc.check(t)
			}
		})
		if !ok {
			return // later cases build on the state of earlier ones
		}
	}
}

func setPodLabels(t *testing.T, name string, labels map[string]string) {
	t.Helper()
	obj := &corev1.Pod{}
	patchLabels(t, client.ObjectKey{Namespace: cluster.PodNamespace, Name: name}, obj, func(map[string]string) map[string]string { return labels })
}

// setNamespaceLabel sets (value "": removes) one label of the Pods' namespace.
func setNamespaceLabel(t *testing.T, key, value string) {
	t.Helper()
	patchLabels(t, client.ObjectKey{Name: cluster.PodNamespace}, &corev1.Namespace{}, func(l map[string]string) map[string]string {
		if l == nil {
			l = map[string]string{}
		}
		if value == "" {
			delete(l, key)
		} else {
			l[key] = value
		}
		return l
	})
}

func patchLabels(t *testing.T, key client.ObjectKey, obj client.Object, edit func(map[string]string) map[string]string) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	g.Expect(c.Client.Get(ctx, key, obj)).To(Succeed())
	before := obj.DeepCopyObject().(client.Object)
	obj.SetLabels(edit(obj.GetLabels()))
	g.Expect(c.Client.Patch(ctx, obj, client.MergeFrom(before))).To(Succeed())
}

// serveLines runs cluster.ServeLines in the namespace at path until the test ends.
func serveLines(t *testing.T, path string, port int) {
	t.Helper()
	s, err := cluster.ServeLines(path, port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
}

// dialLines opens a connection from the Pod to a serveLines server and checks it echoes.
func dialLines(t *testing.T, from *cluster.Pod, dst netip.AddrPort) net.Conn {
	t.Helper()
	var conn net.Conn
	err := ns.WithNetNSPath(from.NSPath, func(ns.NetNS) error {
		var err error
		conn, err = net.DialTimeout("tcp4", dst.String(), 2*time.Second)
		return err
	})
	if err != nil {
		t.Fatalf("connecting from %s to %s: %v", from.Name, dst, err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := echoLine(conn); err != nil {
		t.Fatalf("echo from %s to %s: %v", from.Name, dst, err)
	}
	return conn
}

func echoLine(conn net.Conn) error {
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Write([]byte("ping\n")); err != nil {
		return err
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(conn, buf); err != nil {
		return err
	}
	if string(buf) != "ping\n" {
		return fmt.Errorf("echoed %q", buf)
	}
	return nil
}
