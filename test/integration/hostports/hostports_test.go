//go:build linux

package hostports_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/winnet-io/winnet/controllers/service"
	"github.com/winnet-io/winnet/internal/hostport"
	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/simnode"
)

const (
	containerPort = 8080
	hostPort      = 18080
)

// expectAnswer waits until the namespace's connection to addr is answered by want, and returns the
// client address the server saw.
func expectAnswer(t *testing.T, nsName, network string, addr netip.AddrPort, want string) string {
	t.Helper()
	var answer string
	NewWithT(t).Eventually(func() error {
		var err error
		answer, err = framework.Ask(nsName, network, addr)
		if err != nil {
			return err
		}
		if !strings.HasPrefix(answer, want+" ") {
			return fmt.Errorf("answered by %q, want %s", answer, want)
		}
		return nil
	}).WithTimeout(15*time.Second).WithPolling(200*time.Millisecond).Should(Succeed(), "%s %s from %s", network, addr, nsName)
	from, _, _ := strings.Cut(strings.TrimPrefix(answer, want+" "), ":")
	return from
}

// expectNoAnswer checks that the namespace's connections to addr stay unanswered.
func expectNoAnswer(t *testing.T, nsName, network string, addr netip.AddrPort) {
	t.Helper()
	NewWithT(t).Consistently(func() error {
		_, err := framework.Ask(nsName, network, addr)
		return err
	}).WithTimeout(3*time.Second).WithPolling(500*time.Millisecond).Should(HaveOccurred(), "%s %s from %s", network, addr, nsName)
}

func tcpUDP(port int) []hostport.PortMapping {
	return []hostport.PortMapping{
		{HostPort: port, ContainerPort: containerPort, Protocol: "tcp"},
		{HostPort: port, ContainerPort: containerPort, Protocol: "udp"},
	}
}

// hostPortFlows are the flows of the node that match the hostPort.
func hostPortFlows(g Gomega, n *framework.PodNode, port int) []string {
	flows, err := n.OVS.DumpFlows("br-int", "-O", "OpenFlow15")
	g.Expect(err).NotTo(HaveOccurred())
	var out []string
	for _, f := range flows {
		if strings.Contains(f, fmt.Sprintf("tp_dst=%d ", port)) {
			out = append(out, f)
		}
	}
	return out
}

// TestHostPort: a Pod's hostPort (TCP and UDP, containerd's portMappings through the conflist's
// capability) is reached on its node's address by the external host (which keeps its source
// address), another node's Pod and host (over the underlay: the Pod's traffic SNATed to its node's
// address by its node, which is what the target Pod sees), a Pod of the same node, the target Pod
// itself (hairpin) and the node itself (the host-side NAT); NetworkPolicy of the target Pod
// applies to the external client by its own address; DEL releases the mapping (no flow, no
// answer) and the port can be claimed again. A hostPort on one hostIP is answered there only.
func TestHostPort(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	u := simnode.NewUnderlay(t, netip.MustParsePrefix("192.168.95.0/24"))
	a := framework.StartPodNode(t, server, u, "hp-a", "192.168.95.11/24", "10.244.95.0/24", converge)
	b := framework.StartPodNode(t, server, u, "hp-b", "192.168.95.12/24", "10.244.96.0/24", converge)
	a.Route(t)
	b.Route(t)
	if err := simnode.DisableTxChecksum(u.External().NS, simnode.HostIfName); err != nil {
		t.Fatal(err)
	}
	web := a.AddPod(t, "web", framework.TestPodOptions{Labels: map[string]string{"app": "web"}, PortMappings: tcpUDP(hostPort)})
	framework.Serve(t, web.NS, "web", containerPort)
	local := a.AddPod(t, "local", framework.TestPodOptions{})
	remote := b.AddPod(t, "remote", framework.TestPodOptions{})
	target := netip.AddrPortFrom(a.NodeIP.Addr(), hostPort)

	for _, network := range []string{"tcp4", "udp4"} {
		t.Run("external host, source kept, "+network, func(t *testing.T) {
			from := expectAnswer(t, u.External().NS, network, target, "web")
			NewWithT(t).Expect(from).To(Equal(u.ExternalIP.String()), "the Pod sees the external client's own address")
		})
		t.Run("another node's Pod, "+network, func(t *testing.T) {
			t.Logf("the Pod sees %s", expectAnswer(t, remote.NS, network, target, "web"))
		})
		t.Run("another node's host, "+network, func(t *testing.T) {
			t.Logf("the Pod sees %s", expectAnswer(t, b.NS, network, target, "web"))
		})
		t.Run("a Pod of the same node, "+network, func(t *testing.T) {
			expectAnswer(t, local.NS, network, target, "web")
		})
		t.Run("the target Pod itself (hairpin), "+network, func(t *testing.T) {
			expectAnswer(t, web.NS, network, target, "web")
		})
		t.Run("the node itself, "+network, func(t *testing.T) {
			expectAnswer(t, a.NS, network, target, "web")
		})
	}

	t.Run("the target Pod's NetworkPolicy applies, with the external client's address", func(t *testing.T) {
		g := NewWithT(t)
		deny := &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-deny"},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}},
		}
		g.Expect(server.Client.Create(ctx, deny)).To(Succeed())
		t.Cleanup(func() { _ = server.Client.Delete(context.Background(), deny) })
		g.Eventually(func() error {
			_, err := framework.Ask(u.External().NS, "tcp4", target)
			return err
		}).WithTimeout(converge).Should(HaveOccurred(), "isolated: the external host is refused")
		expectAnswer(t, a.NS, "tcp4", target, "web") // the node's own connections are exempt
		allow := &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-allow-external"},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
					{IPBlock: &networkingv1.IPBlock{CIDR: u.ExternalIP.String() + "/32"}}}}}},
		}
		g.Expect(server.Client.Create(ctx, allow)).To(Succeed())
		t.Cleanup(func() { _ = server.Client.Delete(context.Background(), allow) })
		from := expectAnswer(t, u.External().NS, "tcp4", target, "web")
		g.Expect(from).To(Equal(u.ExternalIP.String()))
		expectNoAnswer(t, remote.NS, "tcp4", target) // not in the ipBlock
		g.Expect(server.Client.Delete(ctx, allow)).To(Succeed())
		g.Expect(server.Client.Delete(ctx, deny)).To(Succeed())
		expectAnswer(t, remote.NS, "tcp4", target, "web")
	})

	t.Run("a hostPort on one hostIP is served on that address only", func(t *testing.T) {
		second := netip.MustParseAddr("192.168.95.21")
		a.MustExec(t, "ip", "addr", "add", second.String()+"/24", "dev", "br-int")
		t.Cleanup(func() { _, _ = a.Exec("ip", "addr", "del", second.String()+"/24", "dev", "br-int") })
		// The agent learns of the address from the bridge interface (the node network's realised state).
		var one *framework.TestPod
		NewWithT(t).Eventually(func() error {
			var err error
			one, err = a.TryAddPod(t, fmt.Sprintf("one-ip-%d", time.Now().UnixNano()), framework.TestPodOptions{PortMappings: []hostport.PortMapping{
				{HostPort: hostPort + 1, ContainerPort: containerPort, Protocol: "TCP", HostIP: second.String()}}})
			return err
		}).WithTimeout(converge).Should(Succeed())
		framework.Serve(t, one.NS, "one-ip", containerPort)
		expectAnswer(t, u.External().NS, "tcp4", netip.AddrPortFrom(second, hostPort+1), "one-ip")
		expectNoAnswer(t, u.External().NS, "tcp4", netip.AddrPortFrom(a.NodeIP.Addr(), hostPort+1))
	})

	t.Run("DEL releases the mapping: no flow, no answer, the port free again", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(hostPortFlows(g, a, hostPort)).NotTo(BeEmpty())
		g.Expect(a.DeletePod(ctx, web)).To(Succeed())
		g.Eventually(func(g Gomega) { g.Expect(hostPortFlows(g, a, hostPort)).To(BeEmpty()) }).WithTimeout(converge).Should(Succeed())
		expectNoAnswer(t, u.External().NS, "tcp4", target)
		again := a.AddPod(t, "web-again", framework.TestPodOptions{PortMappings: tcpUDP(hostPort)})
		framework.Serve(t, again.NS, "web-again", containerPort)
		expectAnswer(t, u.External().NS, "tcp4", target, "web-again")
	})
	_ = g
}

// TestHostPortRefusals: ADD refuses, with a CNI error naming the entry or both Pods, malformed
// portMappings (a port out of range, an unknown protocol, SCTP), a hostIP that is not the node's or
// is 127.0.0.1,
// a port the node needs (RDP, WinRM, SMB, kubelet, the tunnel), and a hostPort another Pod of the
// node holds (0.0.0.0 against a specific hostIP too). A refused ADD leaves no address allocated.
func TestHostPortRefusals(t *testing.T) {
	u := simnode.NewUnderlay(t, netip.MustParsePrefix("192.168.96.0/24"))
	a := framework.StartPodNode(t, server, u, "hpr-a", "192.168.96.11/24", "10.244.97.0/24", converge)
	holder := a.AddPod(t, "holder", framework.TestPodOptions{PortMappings: []hostport.PortMapping{
		{HostPort: 9000, ContainerPort: containerPort, Protocol: "tcp"},
		{HostPort: 9001, ContainerPort: containerPort, Protocol: "udp", HostIP: "192.168.96.11"},
	}})
	_ = holder
	for _, c := range []struct {
		name string
		pm   hostport.PortMapping
		want []string
	}{
		{"hostPort out of range", hostport.PortMapping{HostPort: 70000, ContainerPort: 80, Protocol: "tcp"}, []string{"portMappings[0]", "hostPort 70000 is out of range"}},
		{"containerPort out of range", hostport.PortMapping{HostPort: 9100, ContainerPort: 0, Protocol: "tcp"}, []string{"containerPort 0 is out of range"}},
		{"unknown protocol", hostport.PortMapping{HostPort: 9100, ContainerPort: 80, Protocol: "icmp"}, []string{`unknown protocol "icmp"`}},
		{"SCTP", hostport.PortMapping{HostPort: 9100, ContainerPort: 80, Protocol: "sctp"}, []string{"SCTP is not supported"}},
		{"hostIP not the node's", hostport.PortMapping{HostPort: 9100, ContainerPort: 80, Protocol: "tcp", HostIP: "192.168.96.99"}, []string{"hostIP 192.168.96.99", "not one of the node's addresses"}},
		{"loopback hostIP", hostport.PortMapping{HostPort: 9100, ContainerPort: 80, Protocol: "tcp", HostIP: "127.0.0.1"}, []string{"hostIP 127.0.0.1 is a loopback address"}},
		{"RDP", hostport.PortMapping{HostPort: 3389, ContainerPort: 80, Protocol: "tcp"}, []string{"3389/TCP", "reserved", "RDP"}},
		{"WinRM", hostport.PortMapping{HostPort: 5986, ContainerPort: 80, Protocol: "tcp"}, []string{"5986/TCP", "WinRM"}},
		{"SMB", hostport.PortMapping{HostPort: 445, ContainerPort: 80, Protocol: "tcp"}, []string{"445/TCP", "SMB"}},
		{"kubelet", hostport.PortMapping{HostPort: 10250, ContainerPort: 80, Protocol: "tcp"}, []string{"10250/TCP", "kubelet"}},
		{"the tunnel", hostport.PortMapping{HostPort: 4789, ContainerPort: 80, Protocol: "udp"}, []string{"4789/UDP", "VXLAN"}},
		{"the same hostPort as another Pod", hostport.PortMapping{HostPort: 9000, ContainerPort: 80, Protocol: "tcp", HostIP: "192.168.96.11"},
			[]string{"192.168.96.11:9000/TCP->80", "default/refused-", "conflicts with 0.0.0.0:9000/TCP->8080 of Pod default/holder"}},
		{"0.0.0.0 against another Pod's hostIP", hostport.PortMapping{HostPort: 9001, ContainerPort: 80, Protocol: "udp"},
			[]string{"0.0.0.0:9001/UDP->80", "conflicts with 192.168.96.11:9001/UDP->8080 of Pod default/holder"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			name := fmt.Sprintf("refused-%d", time.Now().UnixNano())
			_, err := a.TryAddPod(t, name, framework.TestPodOptions{PortMappings: []hostport.PortMapping{c.pm}})
			g.Expect(err).To(HaveOccurred())
			for _, w := range c.want {
				g.Expect(err.Error()).To(ContainSubstring(w))
			}
			allocs, aerr := a.Agent.Pods.IPAM.Allocations()
			g.Expect(aerr).NotTo(HaveOccurred())
			g.Expect(allocs).To(HaveLen(1), "only the holder has an address")
		})
	}
	t.Run("the same port on another protocol is not a conflict", func(t *testing.T) {
		a.AddPod(t, "other-protocol", framework.TestPodOptions{PortMappings: []hostport.PortMapping{{HostPort: 9000, ContainerPort: 80, Protocol: "udp"}}})
	})
}

// TestNodePortWinsOverHostPort: a Service's NodePort wins over a hostPort on its node, so that a
// tenant who may only create Pods in its namespace (an impersonated user with a namespace Role)
// cannot take another namespace's NodePort traffic with a hostPort:
//   - the ADD of the tenant's Pod with a hostPort on the NodePort is refused (ErrConflict), its error
//     naming no Service of the other namespace, and the Pod's address is given back;
//   - a hostPort served first stops being served when a Service takes its port (the Service's
//     backend answers from the external host and the node itself; the ClusterIP all along), and the
//     tenant's Pod gets a Warning Event the tenant can read, naming no Service of the other namespace;
//   - once the Service is gone the hostPort is served again.
func TestNodePortWinsOverHostPort(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	for _, n := range []string{"shop", "tenant"} {
		g.Expect(server.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}})).To(Succeed())
	}
	tenant := impersonating(t, "mallory")
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "mallory"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create", "get", "list", "watch", "delete"}},
		{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"get", "list", "watch"}},
	}}
	g.Expect(server.Client.Create(ctx, role)).To(Succeed())
	g.Expect(server.Client.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "mallory"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "mallory"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "mallory"}}})).To(Succeed())

	u := simnode.NewUnderlay(t, netip.MustParsePrefix("192.168.97.0/24"))
	a := framework.StartPodNode(t, server, u, "hpn-a", "192.168.97.11/24", "10.244.98.0/24", converge)
	if err := simnode.DisableTxChecksum(u.External().NS, simnode.HostIfName); err != nil {
		t.Fatal(err)
	}
	const nodePort, laterPort = 30958, 30959
	backend := a.AddPod(t, "backend", framework.TestPodOptions{Namespace: "shop"})
	framework.Serve(t, backend.NS, "backend", containerPort)
	newService := func(name string, port int32) *corev1.Service {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{
				{Name: "tcp", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(containerPort), NodePort: port}}},
		}
		g.Expect(server.Client.Create(ctx, svc)).To(Succeed())
		t.Cleanup(func() { _ = server.Client.Delete(context.Background(), svc) })
		slice := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "shop", Name: name + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("tcp"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(int32(containerPort))}},
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{backend.IP.String()}, NodeName: ptr.To(a.Name),
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		}
		g.Expect(server.Client.Create(ctx, slice)).To(Succeed())
		t.Cleanup(func() { _ = server.Client.Delete(context.Background(), slice) })
		return svc
	}
	newService("np", nodePort)
	target := netip.AddrPortFrom(a.NodeIP.Addr(), nodePort)
	expectAnswer(t, u.External().NS, "tcp4", target, "backend")

	// The ADD on the NodePort's port is refused; the tenant learns no name of the shop namespace.
	_, err := a.TryAddPod(t, "grab", framework.TestPodOptions{Namespace: "tenant", Creator: tenant,
		PortMappings: []hostport.PortMapping{{HostPort: nodePort, ContainerPort: containerPort, Protocol: "tcp"}}})
	g.Expect(err).To(MatchError(ContainSubstring("is NodePort 30958/TCP of a Service of another namespace, and a Service's NodePort wins over a hostPort")))
	g.Expect(err.Error()).NotTo(ContainSubstring("shop"))
	allocs, err := a.Agent.Pods.IPAM.Allocations()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(allocs).To(HaveLen(1), "only the backend has an address")
	expectAnswer(t, u.External().NS, "tcp4", target, "backend")

	// The hostPort first, then a Service takes its port (the Service's own pass, not a full pass).
	later := netip.AddrPortFrom(a.NodeIP.Addr(), laterPort)
	first := a.AddPod(t, "first", framework.TestPodOptions{Namespace: "tenant", Creator: tenant,
		PortMappings: []hostport.PortMapping{{HostPort: laterPort, ContainerPort: containerPort, Protocol: "tcp"}}})
	framework.Serve(t, first.NS, "first", containerPort)
	expectAnswer(t, u.External().NS, "tcp4", later, "first")
	svc := newService("np-later", laterPort)
	expectAnswer(t, u.External().NS, "tcp4", later, "backend")
	expectAnswer(t, a.NS, "tcp4", later, "backend")
	expectAnswer(t, a.NS, "tcp4", netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), 80), "backend")
	var seen *eventsv1.Event
	g.Eventually(func(g Gomega) {
		list := &eventsv1.EventList{}
		g.Expect(tenant.List(ctx, list, client.InNamespace("tenant"))).To(Succeed(), "the tenant reads its namespace's Events")
		for i, e := range list.Items {
			if e.Regarding.Name == "first" && e.Reason == service.HostPortHeldReason {
				seen = &list.Items[i]
			}
		}
		g.Expect(seen).NotTo(BeNil())
	}).WithTimeout(converge).Should(Succeed())
	g.Expect(seen.Type).To(Equal(corev1.EventTypeWarning))
	g.Expect(seen.Regarding.Kind).To(Equal("Pod"))
	g.Expect(string(seen.Regarding.UID)).To(Equal(string(first.UID)), "kubectl describe pod finds it")
	g.Expect(seen.Note).To(ContainSubstring("hostPort 0.0.0.0:30959/TCP->8080 (NodePort of a Service of another namespace)"))
	g.Expect(seen.Note).NotTo(ContainSubstring("shop"))
	g.Consistently(func() (string, error) { return framework.Ask(u.External().NS, "tcp4", later) }).
		WithTimeout(2*time.Second).WithPolling(200*time.Millisecond).Should(HavePrefix("backend "), "the NodePort keeps its port")

	// The Service gone: the hostPort is served again.
	g.Expect(server.Client.Delete(ctx, svc)).To(Succeed())
	expectAnswer(t, u.External().NS, "tcp4", later, "first")
}

// impersonating returns a client that acts as user (no groups but system:authenticated), through
// the admin's right to impersonate: what a tenant's own kubeconfig would do.
func impersonating(t *testing.T, user string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(server.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	c, err := client.New(cfg, client.Options{Scheme: server.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
