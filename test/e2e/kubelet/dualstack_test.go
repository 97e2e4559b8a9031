//go:build linux

package kubelet

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/test/e2e/cluster"
)

// The kubelet tier's cluster is dual-stack (Options.DualStack): these tests check what a winnet node does
// there. Beside the two kubelet nodes they use a flannel Linux node (flanneld IPv4 only: the Node lists both
// families) and the cluster DNS on a third winnet node, tainted as a control plane; both are added by the first
// test that needs them.

var (
	extrasOnce sync.Once
	extrasErr  error
	linuxA     *cluster.FlannelNode
)

// dualStackExtras adds the flannel node linux-a (with winnet-controller's flannel interop on) and the DNS node.
func dualStackExtras(t *testing.T) {
	t.Helper()
	extrasOnce.Do(func() {
		ctx := context.Background()
		start := time.Now()
		fi := &networkv1alpha1.FlannelInterop{ObjectMeta: metav1.ObjectMeta{Name: networkv1alpha1.FlannelInteropName}}
		if extrasErr = c.Client.Create(ctx, fi); extrasErr != nil {
			return
		}
		if linuxA, extrasErr = c.AddFlannelNode(ctx, cluster.FlannelNodeSpec{Name: "linux-a", IP: netip.MustParseAddr("192.168.79.21"),
			PodCIDR: netip.MustParsePrefix("10.246.9.0/24")}); extrasErr != nil {
			return
		}
		c.SetRoutesToFlannelNodes(true)
		dns, err := c.AddNode(ctx, cluster.NodeSpec{Name: "dns", IP: netip.MustParseAddr("192.168.79.13"), PodCIDR: netip.MustParsePrefix("10.246.3.0/24")})
		if extrasErr = err; err != nil {
			return
		}
		node := &corev1.Node{}
		if extrasErr = c.Client.Get(ctx, client.ObjectKey{Name: dns.Name}, node); extrasErr != nil {
			return
		}
		patch := client.MergeFrom(node.DeepCopy())
		node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule})
		if extrasErr = c.Client.Patch(ctx, node, patch); extrasErr != nil {
			return
		}
		if _, extrasErr = c.StartDNS(ctx, dns, 2*time.Minute); extrasErr != nil {
			return
		}
		extrasErr = c.WaitReady(ctx, readyTimeout)
		t.Logf("flannel node and cluster DNS added in %v", time.Since(start).Round(time.Millisecond))
	})
	if extrasErr != nil {
		flanneld := ""
		if linuxA != nil {
			flanneld = linuxA.FlanneldLogTail(30)
		}
		t.Fatalf("adding the flannel node and the cluster DNS: %v\n%s\nflanneld:\n%s", extrasErr, c.LogTails(40), flanneld)
	}
}

// agentErrors returns a function giving the error lines the agents logged since it was made.
func agentErrors(t *testing.T) func() []string {
	t.Helper()
	offsets := map[string]int64{}
	for _, n := range c.Nodes() {
		if st, err := os.Stat(n.AgentLog()); err == nil {
			offsets[n.Name] = st.Size()
		}
	}
	return func() []string {
		var out []string
		for _, n := range c.Nodes() {
			b, err := os.ReadFile(n.AgentLog())
			if err != nil {
				out = append(out, fmt.Sprintf("%s: reading the agent's log: %v", n.Name, err))
				continue
			}
			if off := offsets[n.Name]; off <= int64(len(b)) {
				b = b[off:]
			}
			for _, l := range strings.Split(string(b), "\n") {
				if strings.Contains(l, "\tERROR\t") || strings.Contains(l, `"level":"error"`) {
					out = append(out, n.Name+": "+l)
				}
			}
		}
		return out
	}
}

// TestDualStackNodes: every Node lists an IPv4 and an IPv6 Pod CIDR and InternalIP; the winnet nodes'
// WindowsNodeNetworks and the RemoteSubnetRoutes keep the IPv6 Pod CIDR, the nodes realise the IPv4 one only
// (no IPv6 route, no IPv6 flow) and their Ready condition says so once, as a message of a True condition, with
// no Warning Event. kube-b lists its IPv6 InternalIP first: its route's endpoint is its IPv4 one all the same.
func TestDualStackNodes(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	dualStackExtras(t)
	g.Expect(c.DualStack()).To(BeTrue())
	for _, n := range c.Nodes() {
		v6 := n.PodCIDRv6
		g.Expect(v6.IsValid() && v6.Addr().Is6()).To(BeTrue(), "%s has an IPv6 Pod CIDR", n.Name)
		node := &corev1.Node{}
		g.Expect(c.Client.Get(ctx, client.ObjectKey{Name: n.Name}, node)).To(Succeed())
		g.Expect(node.Spec.PodCIDRs).To(Equal([]string{n.PodCIDR.String(), v6.String()}), "Node %s", n.Name)
		var internal []string
		for _, a := range node.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				internal = append(internal, a.Address)
			}
		}
		g.Expect(internal).To(ConsistOf(n.IP.String(), n.IPv6.String()), "Node %s's InternalIPs (kubelet --node-ip or the harness)", n.Name)
		if n.Name == "kube-b" {
			g.Expect(internal[0]).To(Equal(n.IPv6.String()), "kube-b lists its IPv6 InternalIP first (kubelet --node-ip <v6>,<v4>)")
		}

		wnn, err := c.Network(ctx, n.Name)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(wnn.Spec.PodCIDRs).To(ContainElement(networkv1alpha1.CIDR(v6.String())), "the WindowsNodeNetwork keeps the IPv6 Pod CIDR")
		ready := meta.FindStatusCondition(wnn.Status.Conditions, networkv1alpha1.ReadyCondition)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Status).To(Equal(metav1.ConditionTrue), "%s: %s", ready.Reason, ready.Message)
		g.Expect(strings.Count(ready.Message, "not realised")).To(Equal(1), "said once: %s", ready.Message)
		g.Expect(ready.Message).To(ContainSubstring(fmt.Sprintf("IPv6 Pod CIDRs [%s] not realised", v6)))

		rsr := &networkv1alpha1.RemoteSubnetRoute{}
		g.Expect(c.Client.Get(ctx, client.ObjectKey{Name: n.Name}, rsr)).To(Succeed())
		g.Expect(rsr.Spec.PodCIDRs).To(ConsistOf(networkv1alpha1.CIDR(n.PodCIDR.String()), networkv1alpha1.CIDR(v6.String())),
			"the route to %s carries both families", n.Name)
		g.Expect(string(rsr.Spec.NodeIP)).To(Equal(n.IP.String()), "the route's endpoint is %s's IPv4 InternalIP", n.Name)
	}
	g.Expect(linuxA.PodCIDRv6.IsValid()).To(BeTrue())
	for _, n := range c.Nodes() {
		// The routes to the other nodes' and the flannel node's IPv4 Pod CIDRs are realised, no IPv6 one.
		routes, err := n.Exec("ip", "-6", "route", "show")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(routes).NotTo(ContainSubstring("fd00:10:246:"), "%s has no IPv6 route to a Pod CIDR", n.Name)
		flows, err := n.Flows()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(flows).NotTo(ContainSubstring("fd00:"), "%s has no flow of an IPv6 address", n.Name)
		g.Expect(flows).To(ContainSubstring("nw_dst=" + linuxA.PodCIDR.String()))
	}
	// Not said as a warning either (the DNS node, which has no kubelet, has a preflight warning of its own).
	var events corev1.EventList
	g.Expect(c.Client.List(ctx, &events)).To(Succeed())
	for _, e := range events.Items {
		if e.InvolvedObject.Kind == "WindowsNodeNetwork" && e.Type == corev1.EventTypeWarning {
			g.Expect(e.Message).NotTo(Or(ContainSubstring("IPv6"), ContainSubstring("fd00:")), "a Warning Event of %s: %s", e.InvolvedObject.Name, e.Reason)
		}
	}
}

// The namespace of the dual-stack tests' Pods: the backend netexec Pod "web" on kube-b and the client Pods
// "cl-1" and "cl-2" on kube-a, made once (dualStackApp) and left to the cluster's teardown.
const dsNS = "dualstack"

var (
	appOnce sync.Once
	appErr  error
	appIPs  map[string]string
)

// dualStackApp makes the namespace dsNS with its Pods once and returns their IPv4 addresses by name.
func dualStackApp(t *testing.T) map[string]string {
	t.Helper()
	appOnce.Do(func() {
		if _, appErr = kubectl(t, "", "create", "namespace", dsNS); appErr != nil {
			return
		}
		if _, appErr = kubectl(t, netexecPod("web", "kube-b")+"---\n"+netexecPod("cl-1", "kube-a")+"---\n"+netexecPod("cl-2", "kube-a"),
			"-n", dsNS, "apply", "-f", "-"); appErr != nil {
			return
		}
		if _, appErr = kubectl(t, "", "-n", dsNS, "wait", "--for=condition=Ready", "pod/web", "pod/cl-1", "pod/cl-2", "--timeout=180s"); appErr != nil {
			out, _ := kubectl(t, "", "-n", dsNS, "describe", "pods")
			appErr = fmt.Errorf("%w\n%s\n%s", appErr, out, kubeletLogs())
			return
		}
		appIPs = map[string]string{}
		for _, p := range []string{"web", "cl-1", "cl-2"} {
			out, err := kubectl(t, "", "-n", dsNS, "get", "pod", p, "-o", "jsonpath={.status.podIP}")
			if appErr = err; err != nil {
				return
			}
			appIPs[p] = strings.TrimSpace(out)
		}
	})
	if appErr != nil {
		t.Fatalf("the dual-stack tests' Pods: %v", appErr)
	}
	return appIPs
}

// curlFrom runs curl in the Pod and returns its answer.
func curlFrom(t *testing.T, ns, pod, url string) (string, error) {
	t.Helper()
	return kubectl(t, "", "-n", ns, "exec", pod, "--", "curl", "-sS", "--max-time", "3", url)
}

// TestDualStackPodIPv4Only: a Pod on a winnet node has one address, IPv4, in its status (its CNI result is
// IPv4 only), though its node has an IPv6 Pod CIDR; its status lists both of the node's addresses.
func TestDualStackPodIPv4Only(t *testing.T) {
	g := NewWithT(t)
	ns := dsNS
	ips := dualStackApp(t)
	pod := &corev1.Pod{}
	g.Expect(c.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "cl-1"}, pod)).To(Succeed())
	g.Expect(pod.Status.PodIPs).To(Equal([]corev1.PodIP{{IP: ips["cl-1"]}}))
	g.Expect(netip.MustParseAddr(ips["cl-1"]).Is4()).To(BeTrue())
	a := c.Node("kube-a")
	g.Expect(pod.Status.HostIPs).To(Equal([]corev1.HostIP{{IP: a.IP.String()}, {IP: a.IPv6.String()}}))
}

// service is a NodePort Service in front of web with the IP family policy and families given.
func service(name, policy string, families ...string) string {
	fam := ""
	if len(families) > 0 {
		fam = fmt.Sprintf("\n  ipFamilies: [%s]", strings.Join(families, ", "))
	}
	return fmt.Sprintf(`apiVersion: v1
kind: Service
metadata: {name: %s}
spec:
  type: NodePort
  selector: {app: web}
  ipFamilyPolicy: %s%s
  ports: [{port: 80, targetPort: 8080}]
`, name, policy, fam)
}

type svcInfo struct {
	clusterIPs []string
	nodePort   int
}

func getService(t *testing.T, g Gomega, ns, name string) svcInfo {
	t.Helper()
	svc := &corev1.Service{}
	g.Expect(c.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, svc)).To(Succeed())
	return svcInfo{clusterIPs: svc.Spec.ClusterIPs, nodePort: int(svc.Spec.Ports[0].NodePort)}
}

func ipv4Of(ips []string) string {
	for _, s := range ips {
		if netip.MustParseAddr(s).Is4() {
			return s
		}
	}
	return ""
}

// TestDualStackServices: Services of each ipFamilyPolicy that has an IPv4 ClusterIP (SingleStack IPv4,
// PreferDualStack, RequireDualStack with IPv6 listed first) are reached on their IPv4 ClusterIP from a Pod of a
// winnet node, and on their NodePort on each winnet node's IPv4 address from that Pod, from the flannel node
// (flanneld's node has no kube-proxy here: it reaches NodePorts, not ClusterIPs) and from the external host.
// A SingleStack IPv6 Service is not served: each winnet node says so once in an IPv6NotServed Event and
// realises no flow of its NodePort. The IPv6 EndpointSlices of the dual-stack Services (and one written
// by hand with an address) are ignored. No agent logs an error meanwhile. CoreDNS answers A and AAAA for
// the dual-stack Service, asked from the winnet Pod.
func TestDualStackServices(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	dualStackExtras(t)
	errorsSince := agentErrors(t)
	ns := dsNS
	dualStackApp(t)
	mustKubectl(t, service("ss4", "SingleStack", "IPv4")+"---\n"+service("pds", "PreferDualStack")+"---\n"+
		service("rds", "RequireDualStack", "IPv6", "IPv4")+"---\n"+service("ss6", "SingleStack", "IPv6"), "-n", ns, "apply", "-f", "-")
	// A selector-less dual-stack Service with hand-written slices: web's IPv4 address, and an IPv6 address.
	webIP := strings.TrimSpace(mustKubectl(t, "", "-n", ns, "get", "pod", "web", "-o", "jsonpath={.status.podIP}"))
	mustKubectl(t, fmt.Sprintf(`apiVersion: v1
kind: Service
metadata: {name: manual}
spec:
  ipFamilyPolicy: RequireDualStack
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: manual-v4
  labels: {kubernetes.io/service-name: manual}
addressType: IPv4
ports: [{port: 8080, protocol: TCP}]
endpoints: [{addresses: [%q], conditions: {ready: true}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: manual-v6
  labels: {kubernetes.io/service-name: manual}
addressType: IPv6
ports: [{port: 8080, protocol: TCP}]
endpoints: [{addresses: ["fd00:10:246:2::99"], conditions: {ready: true}}]
`, webIP), "-n", ns, "apply", "-f", "-")

	ss4, pds, rds, ss6, manual := getService(t, g, ns, "ss4"), getService(t, g, ns, "pds"), getService(t, g, ns, "rds"), getService(t, g, ns, "ss6"), getService(t, g, ns, "manual")
	g.Expect(ss4.clusterIPs).To(HaveLen(1))
	g.Expect(pds.clusterIPs).To(HaveLen(2), "PreferDualStack in a dual-stack cluster")
	g.Expect(rds.clusterIPs).To(HaveLen(2))
	g.Expect(netip.MustParseAddr(rds.clusterIPs[0]).Is6()).To(BeTrue(), "rds lists its IPv6 ClusterIP first")
	g.Expect(ss6.clusterIPs).To(HaveLen(1))
	g.Expect(netip.MustParseAddr(ss6.clusterIPs[0]).Is6()).To(BeTrue())

	for name, s := range map[string]svcInfo{"ss4": ss4, "pds": pds, "rds": rds, "manual": manual} {
		url := "http://" + ipv4Of(s.clusterIPs) + "/hostname"
		g.Eventually(func() (string, error) { return curlFrom(t, ns, "cl-1", url) }, 60*time.Second, time.Second).Should(Equal("web"),
			"Service %s on its IPv4 ClusterIP from a Pod of kube-a", name)
		if name == "manual" {
			// Every connection goes to web: the IPv6 slice's endpoint is no bucket of the Service.
			out, err := kubectl(t, "", "-n", ns, "exec", "cl-1", "--", "sh", "-c",
				fmt.Sprintf("for i in 1 2 3 4 5 6 7 8; do curl -sS --max-time 2 %s; echo; done", url))
			g.Expect(err).NotTo(HaveOccurred(), "%s", out)
			g.Expect(strings.Fields(out)).To(HaveEach("web"), "Service manual, 8 connections")
			continue
		}
		for _, n := range []*cluster.Node{c.Node("kube-a"), c.Node("kube-b")} {
			url := fmt.Sprintf("http://%s:%d/hostname", n.IP, s.nodePort)
			g.Eventually(func() (string, error) { return curlFrom(t, ns, "cl-1", url) }, 30*time.Second, time.Second).Should(Equal("web"),
				"Service %s's NodePort on %s from a Pod of kube-a", name, n.Name)
			g.Eventually(func() (string, error) { return httpGet(linuxA.NS, url) }, 30*time.Second, time.Second).Should(Equal("web"),
				"Service %s's NodePort on %s from the flannel node", name, n.Name)
			g.Eventually(func() (string, error) { return httpGet(c.External.NS, url) }, 30*time.Second, time.Second).Should(Equal("web"),
				"Service %s's NodePort on %s from the external host", name, n.Name)
		}
	}

	// ss6: an Event per winnet node, once; no flow of its NodePort.
	g.Eventually(func(g Gomega) {
		var events corev1.EventList
		g.Expect(c.Client.List(ctx, &events, client.InNamespace(ns))).To(Succeed())
		per := map[string]int{}
		for _, e := range events.Items {
			if e.InvolvedObject.Name != "ss6" || e.Reason != "IPv6NotServed" {
				continue
			}
			g.Expect(e.Type).To(Equal(corev1.EventTypeNormal))
			for _, n := range c.Nodes() {
				if strings.Contains(e.Message, "on node "+n.Name+":") {
					per[n.Name]++
					g.Expect(e.Count).To(BeNumerically("<=", 1), "said once: %s", e.Message)
					g.Expect(e.Series).To(BeNil(), "said once: %s", e.Message)
				}
			}
		}
		for _, n := range c.Nodes() {
			g.Expect(per[n.Name]).To(Equal(1), "IPv6NotServed Events of ss6 from %s", n.Name)
		}
	}, 30*time.Second, time.Second).Should(Succeed())
	for _, n := range c.Nodes() {
		flows, err := n.Flows()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(flows).NotTo(ContainSubstring(fmt.Sprintf("tp_dst=%d,", ss6.nodePort)), "%s serves no NodePort of ss6", n.Name)
		g.Expect(flows).NotTo(ContainSubstring(fmt.Sprintf("tp_dst=%d ", ss6.nodePort)), "%s serves no NodePort of ss6", n.Name)
		g.Expect(flows).NotTo(ContainSubstring("fd00:"), "%s has no flow of an IPv6 address (ClusterIP, endpoint)", n.Name)
		groups, err := n.OVS.Ofctl("-O", "OpenFlow15", "dump-groups", cluster.BridgeName)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(groups).NotTo(ContainSubstring("fd00:"), "%s has no group bucket of an IPv6 endpoint", n.Name)
	}

	// The cluster DNS, asked from the winnet Pod through kube-dns's IPv4 ClusterIP.
	name := fmt.Sprintf("rds.%s.svc.%s", ns, cluster.ClusterDomain)
	dig := func(typ string) (string, error) {
		out, err := kubectl(t, "", "-n", ns, "exec", "cl-1", "--", "dig", "+short", "+time=2", "+tries=1", name, typ)
		return strings.TrimSpace(out), err
	}
	g.Eventually(func() (string, error) { return dig("A") }, 30*time.Second, time.Second).Should(Equal(ipv4Of(rds.clusterIPs)))
	g.Eventually(func() (string, error) { return dig("AAAA") }, 30*time.Second, time.Second).Should(Equal(rds.clusterIPs[0]))

	g.Expect(errorsSince()).To(BeEmpty(), "the agents logged errors")
}

// TestDualStackNetworkPolicy: a NetworkPolicy whose only peer is an IPv6 ipBlock admits no IPv4 traffic; IPv6
// blocks with except lists beside an IPv4 block neither widen nor narrow what the IPv4 block admits.
func TestDualStackNetworkPolicy(t *testing.T) {
	g := NewWithT(t)
	errorsSince := agentErrors(t)
	ns := dsNS
	ips := dualStackApp(t)
	url := "http://" + ips["web"] + ":8080/hostname"
	for _, p := range []string{"cl-1", "cl-2"} {
		g.Eventually(func() (string, error) { return curlFrom(t, ns, p, url) }, 30*time.Second, time.Second).Should(Equal("web"), "%s before any policy", p)
	}
	policy := func(peers string) string {
		return fmt.Sprintf(`apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web}
spec:
  podSelector: {matchLabels: {app: web}}
  policyTypes: [Ingress]
  ingress:
  - from:
%s
`, peers)
	}
	admits := func(what, p string, want bool) {
		t.Helper()
		if want {
			g.Eventually(func() (string, error) { return curlFrom(t, ns, p, url) }, 30*time.Second, time.Second).Should(Equal("web"), "%s: %s admitted", what, p)
			return
		}
		refused := func() error {
			_, err := kubectl(t, "", "-n", ns, "exec", p, "--", "curl", "-sS", "--max-time", "1", url)
			return err
		}
		g.Eventually(refused, 30*time.Second, 500*time.Millisecond).Should(HaveOccurred(), "%s: %s refused", what, p)
		g.Consistently(refused, 2*time.Second, 500*time.Millisecond).Should(HaveOccurred(), "%s: %s refused", what, p)
	}

	t.Cleanup(func() { _, _ = kubectl(t, "", "-n", ns, "delete", "networkpolicy", "web", "--ignore-not-found") })
	onlyV6 := policy(`    - ipBlock: {cidr: "::/0"}`)
	mustKubectl(t, onlyV6, "-n", ns, "apply", "-f", "-")
	admits("the only peer is ::/0", "cl-1", false)
	admits("the only peer is ::/0", "cl-2", false)

	mixed := policy(fmt.Sprintf(`    - ipBlock: {cidr: %q}
    - ipBlock: {cidr: "::/0", except: ["fd00:10:246::/48", "::/1"]}
    - ipBlock: {cidr: "fd00:10:246::/48", except: ["fd00:10:246:1::/64"]}`, ips["cl-1"]+"/32"))
	mustKubectl(t, mixed, "-n", ns, "apply", "-f", "-")
	admits("cl-1/32 with IPv6 blocks and excepts", "cl-1", true)
	admits("cl-1/32 with IPv6 blocks and excepts", "cl-2", false)

	// An IPv4 block whose except names cl-2, beside IPv6 ones: cl-1 admitted, cl-2 refused.
	v4Except := policy(fmt.Sprintf(`    - ipBlock: {cidr: "10.246.0.0/16", except: [%q]}
    - ipBlock: {cidr: "fd00::/8", except: ["fd00:10:246:1::/64"]}`, ips["cl-2"]+"/32"))
	mustKubectl(t, v4Except, "-n", ns, "apply", "-f", "-")
	admits("10.246.0.0/16 except cl-2 with IPv6 blocks", "cl-1", true)
	admits("10.246.0.0/16 except cl-2 with IPv6 blocks", "cl-2", false)
	g.Expect(errorsSince()).To(BeEmpty(), "the agents logged errors")
}

// TestDualStackPacketTrace: a PacketTrace to an IPv6 address is refused by the API server, saying that the
// destination must be IPv4; one to a SingleStack IPv6 Service fails saying the Service has no IPv4 ClusterIP.
func TestDualStackPacketTrace(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := dsNS
	dualStackApp(t)
	mustKubectl(t, service("ss6", "SingleStack", "IPv6"), "-n", ns, "apply", "-f", "-")
	trace := func(name, dest string) string {
		return fmt.Sprintf(`apiVersion: network.winnet.io/v1alpha1
kind: PacketTrace
metadata: {name: %s}
spec:
  source: {pod: {name: cl-1}}
  destination: %s
  packet: {protocol: TCP, dstPort: 80}
`, name, dest)
	}
	for _, ip := range []string{"fd00::5", "fd00:10:246:2::5"} {
		out, err := kubectl(t, trace("to-ipv6", fmt.Sprintf("{ip: %q}", ip)), "-n", ns, "create", "-f", "-")
		g.Expect(err).To(HaveOccurred(), "a trace to %s: %s", ip, out)
		g.Expect(err.Error()).To(ContainSubstring("must be an IPv4 address"), "a trace to %s", ip)
	}
	mustKubectl(t, trace("to-ss6", "{service: {name: ss6}}"), "-n", ns, "create", "-f", "-")
	g.Eventually(func(g Gomega) {
		tr := &networkv1alpha1.PacketTrace{}
		g.Expect(c.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "to-ss6"}, tr)).To(Succeed())
		b, _ := json.Marshal(tr.Status)
		g.Expect(tr.Status.Phase).To(Equal(networkv1alpha1.PacketTraceFailed), "%s", b)
		g.Expect(tr.Status.Reason).To(Equal(networkv1alpha1.PacketTraceReasonDestinationUnknown), "%s", b)
		g.Expect(tr.Status.Message).To(ContainSubstring("has no IPv4 ClusterIP"), "%s", b)
	}, 30*time.Second, time.Second).Should(Succeed())
}
