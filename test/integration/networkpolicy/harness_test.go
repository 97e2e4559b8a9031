//go:build linux

package networkpolicy_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/cni"
	"github.com/winnet-io/winnet/internal/hns"
	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/simnode"
)

var server *framework.APIServer

func TestMain(m *testing.M) {
	framework.Main(m, "NetworkPolicy integration tests", &server, framework.MainOptions{})
}

const converge = 30 * time.Second

// httpPort is the Pods' container port named "http".
const httpPort = 8080

// testNode is a simulated node with its agent and a CNI client set up like a runtime's.
type testNode struct {
	*simnode.Node
	agent   *framework.Agent
	podCIDR netip.Prefix
	cni     *libcni.CNIConfig
	list    *libcni.NetworkConfigList
}

// startNode adds a node to the underlay, runs its agent, creates its Node and WindowsNodeNetwork and
// waits for the conflist the agent writes once the node network is Ready.
func startNode(t *testing.T, u *simnode.Underlay, name, nodeIP, podCIDR string) *testNode {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	node := u.AddNode(t, name, netip.MustParsePrefix(nodeIP), simnode.NodeOptions{StartOVS: true})
	k := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{PodCIDR: podCIDR, PodCIDRs: []string{podCIDR}}}
	g.Expect(server.Client.Create(ctx, k)).To(Succeed())
	t.Cleanup(func() { _ = server.Client.Delete(context.Background(), k) })
	n := &testNode{Node: node, agent: framework.StartAgent(t, server, node), podCIDR: netip.MustParsePrefix(podCIDR),
		cni: libcni.NewCNIConfigWithCacheDir([]string{framework.BuildShim(t)}, t.TempDir(), nil)}
	wnn := &networkv1alpha1.WindowsNodeNetwork{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: networkv1alpha1.WindowsNodeNetworkSpec{
			PodCIDRs:     []networkv1alpha1.CIDR{networkv1alpha1.CIDR(podCIDR)},
			NodeIP:       networkv1alpha1.IPv4Address(node.NodeIP.Addr().String()),
			Bridge:       networkv1alpha1.BridgeSpec{DatapathType: networkv1alpha1.DatapathTypeNetdev},
			ClusterCIDRs: []networkv1alpha1.CIDR{"10.244.0.0/16"},
		},
	}
	g.Expect(server.Client.Create(ctx, wnn)).To(Succeed())
	confFile := filepath.Join(n.agent.CNIConfDir, cni.ConfListName)
	g.Eventually(func() error { _, err := os.Stat(confFile); return err }).WithTimeout(converge).
		Should(Succeed(), "the agent writes the conflist once the node network is Ready")
	list, err := libcni.ConfListFromFile(confFile)
	g.Expect(err).NotTo(HaveOccurred())
	n.list = list
	return n
}

// route creates the RemoteSubnetRoute to the node's Pod subnet (winnet-controller's job; it does not
// run here).
func (n *testNode) route(t *testing.T) {
	t.Helper()
	r := &networkv1alpha1.RemoteSubnetRoute{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name},
		Spec: networkv1alpha1.RemoteSubnetRouteSpec{NodeName: n.Name, PodCIDRs: []networkv1alpha1.CIDR{networkv1alpha1.CIDR(n.podCIDR.String())},
			NodeIP: networkv1alpha1.IPAddress(n.NodeIP.Addr().String()), Mode: networkv1alpha1.RouteModeTunnel},
	}
	if err := server.Client.Create(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = server.Client.Delete(context.Background(), r) })
	r.Status.ObservedGeneration = r.Generation
	r.Status.Conditions = []metav1.Condition{{Type: networkv1alpha1.AcceptedCondition, Status: metav1.ConditionTrue,
		Reason: "Accepted", Message: "accepted by the test", LastTransitionTime: metav1.Now()}}
	if err := server.Client.Status().Update(context.Background(), r); err != nil {
		t.Fatal(err)
	}
}

// testPod is a Pod attached through CNI ADD: its network namespace and address.
type testPod struct {
	name, namespace, ns string
	ip                  netip.Addr
}

var podSeq struct {
	sync.Mutex
	n int
}

// addPod creates a Pod object (in namespace ns, with labels and the named container port "http"
// = 8080) and its network namespace on the node, calls ADD as containerd does, starts the sandbox
// as the runtime does once ADD returned, and writes the Pod's address into its status as kubelet
// would.
func (n *testNode) addPod(t *testing.T, namespace, name string, labels map[string]string) *testPod {
	t.Helper()
	ctx := context.Background()
	podSeq.Lock()
	podSeq.n++
	seq := podSeq.n
	podSeq.Unlock()
	p := &testPod{name: name, namespace: namespace, ns: fmt.Sprintf("%s-s%d", n.NS, seq)}
	if _, err := simnode.Exec("", "ip", "netns", "add", p.ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = simnode.Exec("", "ip", "netns", "del", p.ns) })
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels},
		Spec: corev1.PodSpec{NodeName: n.Name, Containers: []corev1.Container{{Name: "c", Image: "pause",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: httpPort, Protocol: corev1.ProtocolTCP}}}}},
	}
	if err := server.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = server.Client.Delete(context.Background(), pod, client.GracePeriodSeconds(0)) })
	sandbox := fmt.Sprintf("npsandbox%06d%s", seq, strings.Repeat("0", 49))
	rt := &libcni.RuntimeConf{
		ContainerID: sandbox, NetNS: "/run/netns/" + p.ns, IfName: "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", namespace}, {"K8S_POD_NAME", name},
			{"K8S_POD_INFRA_CONTAINER_ID", sandbox}, {"K8S_POD_UID", string(pod.UID)}},
	}
	res, err := n.cni.AddNetworkList(ctx, n.list, rt)
	if err != nil {
		t.Fatalf("ADD of %s: %v", name, err)
	}
	t.Cleanup(func() { _ = n.cni.DelNetworkList(context.Background(), n.list, rt) })
	cur, err := types100.NewResultFromResult(res)
	if err != nil {
		t.Fatal(err)
	}
	ip, ok := netip.AddrFromSlice(cur.IPs[0].Address.IP.To4())
	if !ok {
		t.Fatalf("ADD of %s gave no IPv4 address: %v", name, cur.IPs)
	}
	p.ip = ip
	pod.Status.Phase = corev1.PodRunning
	pod.Status.PodIPs = []corev1.PodIP{{IP: ip.String()}}
	pod.Status.PodIP = ip.String()
	if err := server.Client.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	// The runtime starts the sandbox after ADD; where the simulated HNS is told so (when it waits for
	// it) is the agent's hns-sandboxes directory, beside its state directory.
	sandboxes := filepath.Join(filepath.Dir(n.agent.StateDir), "hns-sandboxes")
	if err := hns.StartSandbox(sandboxes, rt.NetNS); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hns.StopSandbox(sandboxes, rt.NetNS) })
	return p
}

// inNS runs f on a thread in the network namespace nsName (sockets made there stay there).
func inNS(nsName string, f func() error) error {
	netns, err := ns.GetNS("/run/netns/" + nsName)
	if err != nil {
		return err
	}
	defer netns.Close()
	return netns.Do(func(ns.NetNS) error { return f() })
}

// serve runs a TCP and a UDP server on port in the namespace; both answer "<name> <client address>".
func serve(t *testing.T, nsName, name string, port int) {
	t.Helper()
	var tl net.Listener
	var ul net.PacketConn
	err := inNS(nsName, func() error {
		var err error
		if tl, err = net.Listen("tcp4", fmt.Sprintf(":%d", port)); err != nil {
			return err
		}
		ul, err = net.ListenPacket("udp4", fmt.Sprintf(":%d", port))
		return err
	})
	if err != nil {
		t.Fatalf("serving in %s: %v", nsName, err)
	}
	t.Cleanup(func() { tl.Close(); ul.Close() })
	go func() {
		for {
			c, err := tl.Accept()
			if err != nil {
				return
			}
			_, _ = fmt.Fprintf(c, "%s %s", name, c.RemoteAddr())
			c.Close()
		}
	}()
	go func() {
		buf := make([]byte, 1500)
		for {
			_, from, err := ul.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = ul.WriteTo([]byte(fmt.Sprintf("%s %s", name, from)), from)
		}
	}()
}

// ask connects from the namespace to addr over network ("tcp4" or "udp4") and returns the answer.
func ask(nsName, network string, addr netip.AddrPort) (string, error) {
	var c net.Conn
	err := inNS(nsName, func() error {
		var err error
		c, err = net.DialTimeout(network, addr.String(), time.Second)
		return err
	})
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if network == "udp4" {
		if _, err := c.Write([]byte("hello")); err != nil {
			return "", err
		}
		buf := make([]byte, 1500)
		n, err := c.Read(buf)
		return string(buf[:n]), err
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

// serveEcho runs a TCP server on port in the namespace that echoes what it reads, for connections
// that stay open while policies change.
func serveEcho(t *testing.T, nsName string, port int) {
	t.Helper()
	var l net.Listener
	if err := inNS(nsName, func() error {
		var err error
		l, err = net.Listen("tcp4", fmt.Sprintf(":%d", port))
		return err
	}); err != nil {
		t.Fatalf("serving in %s: %v", nsName, err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
}

// dial opens a TCP connection from the namespace to addr and leaves it open.
func dial(t *testing.T, nsName string, addr netip.AddrPort) net.Conn {
	t.Helper()
	var c net.Conn
	if err := inNS(nsName, func() error {
		var err error
		c, err = net.DialTimeout("tcp4", addr.String(), 2*time.Second)
		return err
	}); err != nil {
		t.Fatalf("connecting from %s to %s: %v", nsName, addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// echo sends a line on an open connection and checks it comes back.
func echo(c net.Conn) error {
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	if string(buf) != "ping\n" {
		return fmt.Errorf("echoed %q", buf)
	}
	return nil
}
