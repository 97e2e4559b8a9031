package framework

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
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/cni"
	"github.com/winnet-io/winnet/internal/hns"
	"github.com/winnet-io/winnet/internal/hostport"
	"github.com/winnet-io/winnet/test/simnode"
)

// PodNode is a simulated node whose network is Ready: its agent runs, its Node and WindowsNodeNetwork
// exist, and a CNI client is set up like a runtime's to attach Pods. Every integration test that
// needs a converged node starts it here (StartPodNode, or StartPodNodeOn for a node it prepared).
type PodNode struct {
	*simnode.Node
	Agent   *Agent
	PodCIDR netip.Prefix
	// CNI calls the winnet-cni shim as a runtime does; ConfList is the conflist the agent wrote
	// (nil until the node network is Ready).
	CNI      *libcni.CNIConfig
	ConfList *libcni.NetworkConfigList

	server *APIServer
}

// PodNodeOptions configure StartPodNodeWith and StartPodNodeOn.
type PodNodeOptions struct {
	// Agent are the agent's options.
	Agent AgentOptions
	// Spec, when set, changes the WindowsNodeNetwork's spec before it is created.
	Spec func(*networkv1alpha1.WindowsNodeNetworkSpec)
	// NoNetwork leaves the WindowsNodeNetwork to the test (CreateNetwork): the node, its Node
	// object and its agent only.
	NoNetwork bool
}

// StartPodNode adds a node to the underlay, runs its agent, creates its Node and WindowsNodeNetwork
// and waits (up to timeout) for the conflist the agent writes once the node network is Ready.
func StartPodNode(t *testing.T, s *APIServer, u *simnode.Underlay, name, nodeIP, podCIDR string, timeout time.Duration) *PodNode {
	t.Helper()
	return StartPodNodeWith(t, s, u, name, nodeIP, podCIDR, timeout, PodNodeOptions{})
}

// StartPodNodeWith is StartPodNode with options.
func StartPodNodeWith(t *testing.T, s *APIServer, u *simnode.Underlay, name, nodeIP, podCIDR string, timeout time.Duration, opts PodNodeOptions) *PodNode {
	t.Helper()
	node := u.AddNode(t, name, netip.MustParsePrefix(nodeIP), simnode.NodeOptions{StartOVS: true})
	return StartPodNodeOn(t, s, node, podCIDR, timeout, opts)
}

// StartPodNodeOn is StartPodNodeWith on a node the test added to its underlay itself (to look at the
// node before winnet touches it, for example).
func StartPodNodeOn(t *testing.T, s *APIServer, node *simnode.Node, podCIDR string, timeout time.Duration, opts PodNodeOptions) *PodNode {
	t.Helper()
	k := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node.Name}, Spec: corev1.NodeSpec{PodCIDR: podCIDR, PodCIDRs: []string{podCIDR}}}
	if err := s.Client.Create(context.Background(), k); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Client.Delete(context.Background(), k) })
	n := &PodNode{Node: node, Agent: StartAgentWith(t, s, node, opts.Agent), PodCIDR: netip.MustParsePrefix(podCIDR), server: s,
		CNI: libcni.NewCNIConfigWithCacheDir([]string{BuildShim(t)}, t.TempDir(), nil)}
	if !opts.NoNetwork {
		n.CreateNetwork(t, timeout, opts.Spec)
	}
	return n
}

// CreateNetwork creates the node's WindowsNodeNetwork (spec, when set, changes it first) and waits
// (up to timeout) for the conflist the agent writes once the node network is Ready.
func (n *PodNode) CreateNetwork(t *testing.T, timeout time.Duration, spec func(*networkv1alpha1.WindowsNodeNetworkSpec)) {
	t.Helper()
	wnn := &networkv1alpha1.WindowsNodeNetwork{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name},
		Spec: networkv1alpha1.WindowsNodeNetworkSpec{
			PodCIDRs:     []networkv1alpha1.CIDR{networkv1alpha1.CIDR(n.PodCIDR.String())},
			NodeIP:       networkv1alpha1.IPv4Address(n.NodeIP.Addr().String()),
			Bridge:       networkv1alpha1.BridgeSpec{DatapathType: networkv1alpha1.DatapathTypeNetdev},
			ClusterCIDRs: []networkv1alpha1.CIDR{"10.244.0.0/16"},
		},
	}
	if spec != nil {
		spec(&wnn.Spec)
	}
	if err := n.server.Client.Create(context.Background(), wnn); err != nil {
		t.Fatal(err)
	}
	confFile := filepath.Join(n.Agent.CNIConfDir, cni.ConfListName)
	for deadline := time.Now().Add(timeout); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(confFile); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the agent of %s wrote no conflist within %v (it does once the node network is Ready): %v", n.Name, timeout, err)
		}
	}
	list, err := libcni.ConfListFromFile(confFile)
	if err != nil {
		t.Fatal(err)
	}
	n.ConfList = list
}

// Route creates the RemoteSubnetRoute to the node's Pod subnet, Accepted (winnet-controller's job;
// it does not run in these tests).
func (n *PodNode) Route(t *testing.T) {
	t.Helper()
	r := &networkv1alpha1.RemoteSubnetRoute{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name},
		Spec: networkv1alpha1.RemoteSubnetRouteSpec{NodeName: n.Name, PodCIDRs: []networkv1alpha1.CIDR{networkv1alpha1.CIDR(n.PodCIDR.String())},
			NodeIP: networkv1alpha1.IPAddress(n.NodeIP.Addr().String()), Mode: networkv1alpha1.RouteModeTunnel},
	}
	if err := n.server.Client.Create(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.server.Client.Delete(context.Background(), r) })
	r.Status.ObservedGeneration = r.Generation
	r.Status.Conditions = []metav1.Condition{{Type: networkv1alpha1.AcceptedCondition, Status: metav1.ConditionTrue,
		Reason: "Accepted", Message: "accepted by the test", LastTransitionTime: metav1.Now()}}
	if err := n.server.Client.Status().Update(context.Background(), r); err != nil {
		t.Fatal(err)
	}
}

// TestPod is a Pod attached through CNI ADD: its name, namespace, network namespace and address.
type TestPod struct {
	Name, Namespace, NS string
	IP                  netip.Addr
	// UID is the Pod object's.
	UID string

	// rt and sandboxes are what DeletePod needs to delete it as the runtime does.
	rt        *libcni.RuntimeConf
	sandboxes string
}

// TestPodOptions are a TestPod's namespace (default "default"), labels and container ports.
type TestPodOptions struct {
	Namespace string
	Labels    map[string]string
	Ports     []corev1.ContainerPort
	// PortMappings are the Pod's hostPorts, passed as the runtime passes them (CapabilityArgs
	// "portMappings": runtimeConfig.portMappings).
	PortMappings []hostport.PortMapping
	// BeforeStart, when set, runs once ADD returned and before the runtime starts the sandbox
	// (before the Pod's vNIC exists), with the Pod's namespace and address known: a test that
	// probes the Pod from its vNIC's first moment starts its probes there.
	BeforeStart func(*TestPod)
	// Creator, when set, creates the Pod object (an impersonated tenant's client, say); the admin's
	// client otherwise.
	Creator client.Client
}

var podSeq struct {
	sync.Mutex
	n int
}

// AddPod creates a Pod object and its network namespace on the node, calls ADD as containerd does,
// starts the sandbox as the runtime does once ADD returned, and writes the Pod's address into its
// status as kubelet does.
func (n *PodNode) AddPod(t *testing.T, name string, opts TestPodOptions) *TestPod {
	t.Helper()
	p, err := n.TryAddPod(t, name, opts)
	if err != nil {
		t.Fatalf("ADD of %s: %v", name, err)
	}
	return p
}

// TryAddPod is AddPod returning the error of ADD (the runtime's CNI error) instead of failing the
// test: the Pod object and its network namespace are made (and cleaned up) all the same.
func (n *PodNode) TryAddPod(t *testing.T, name string, opts TestPodOptions) (*TestPod, error) {
	t.Helper()
	ctx := context.Background()
	if opts.Namespace == "" {
		opts.Namespace = "default"
	}
	podSeq.Lock()
	podSeq.n++
	seq := podSeq.n
	podSeq.Unlock()
	p := &TestPod{Name: name, Namespace: opts.Namespace, NS: fmt.Sprintf("%s-s%d", n.NS, seq)}
	if _, err := simnode.Exec("", "ip", "netns", "add", p.NS); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = simnode.Exec("", "ip", "netns", "del", p.NS) })
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: opts.Namespace, Labels: opts.Labels},
		Spec:       corev1.PodSpec{NodeName: n.Name, Containers: []corev1.Container{{Name: "c", Image: "pause", Ports: opts.Ports}}},
	}
	creator := opts.Creator
	if creator == nil {
		creator = n.server.Client
	}
	if err := creator.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	p.UID = string(pod.UID)
	t.Cleanup(func() { _ = n.server.Client.Delete(context.Background(), pod, client.GracePeriodSeconds(0)) })
	sandbox := fmt.Sprintf("sandbox%06d%s", seq, strings.Repeat("0", 51))
	rt := &libcni.RuntimeConf{
		ContainerID: sandbox, NetNS: "/run/netns/" + p.NS, IfName: "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", opts.Namespace}, {"K8S_POD_NAME", name},
			{"K8S_POD_INFRA_CONTAINER_ID", sandbox}, {"K8S_POD_UID", string(pod.UID)}},
	}
	if len(opts.PortMappings) > 0 {
		rt.CapabilityArgs = map[string]any{"portMappings": opts.PortMappings}
	}
	res, err := n.CNI.AddNetworkList(ctx, n.ConfList, rt)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = n.CNI.DelNetworkList(context.Background(), n.ConfList, rt) })
	cur, err := types100.NewResultFromResult(res)
	if err != nil {
		t.Fatal(err)
	}
	ip, ok := netip.AddrFromSlice(cur.IPs[0].Address.IP.To4())
	if !ok {
		t.Fatalf("ADD of %s gave no IPv4 address: %v", name, cur.IPs)
	}
	p.IP = ip
	if opts.BeforeStart != nil {
		opts.BeforeStart(p)
	}
	// The runtime starts the sandbox after ADD; where the simulated HNS is told so (when it waits for
	// it) is the agent's hns-sandboxes directory, beside its state directory.
	sandboxes := filepath.Join(filepath.Dir(n.Agent.StateDir), "hns-sandboxes")
	if err := hns.StartSandbox(sandboxes, rt.NetNS); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hns.StopSandbox(sandboxes, rt.NetNS) })
	p.rt, p.sandboxes = rt, sandboxes
	pod.Status.Phase = corev1.PodRunning
	pod.Status.PodIPs = []corev1.PodIP{{IP: ip.String()}}
	pod.Status.PodIP = ip.String()
	if err := n.server.Client.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	return p, nil
}

// DeletePod deletes a Pod AddPod attached before the test ends, as kubelet and the runtime do: CNI
// DEL, the sandbox stopped, the Pod object and its network namespace deleted. (AddPod's cleanup,
// which does the same at the end of the test, then finds nothing left.)
func (n *PodNode) DeletePod(ctx context.Context, p *TestPod) error {
	if err := n.CNI.DelNetworkList(ctx, n.ConfList, p.rt); err != nil {
		return fmt.Errorf("DEL of %s/%s: %w", p.Namespace, p.Name, err)
	}
	if err := hns.StopSandbox(p.sandboxes, p.rt.NetNS); err != nil {
		return err
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}}
	if err := n.server.Client.Delete(ctx, pod, client.GracePeriodSeconds(0)); client.IgnoreNotFound(err) != nil {
		return err
	}
	_, err := simnode.Exec("", "ip", "netns", "del", p.NS)
	return err
}

// InNS runs f on a thread in the network namespace nsName (sockets made there stay there).
func InNS(nsName string, f func() error) error {
	netns, err := ns.GetNS("/run/netns/" + nsName)
	if err != nil {
		return err
	}
	defer netns.Close()
	return netns.Do(func(ns.NetNS) error { return f() })
}

// Serve runs a TCP and a UDP server on port in the namespace; both answer "<name> <client address>".
func Serve(t *testing.T, nsName, name string, port int) {
	t.Helper()
	var tl net.Listener
	var ul net.PacketConn
	err := InNS(nsName, func() error {
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

// Ask connects from the namespace to addr over network ("tcp4" or "udp4") and returns the answer
// of a Serve server.
func Ask(nsName, network string, addr netip.AddrPort) (string, error) {
	var c net.Conn
	err := InNS(nsName, func() error {
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
