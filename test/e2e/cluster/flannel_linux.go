//go:build linux

package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/containernetworking/cni/libcni"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/simnode"
)

// The flannel network of the e2e cluster, as sig-windows-tools' kube-flannel configures it for Windows nodes:
// VXLAN with VNI 4096 on UDP port 4789 (stock Linux flannel defaults to VNI 1 and port 8472, which flannel's
// Windows nodes cannot use), no DirectRouting.
const (
	FlannelVersion = "v0.28.10"
	FlannelVNI     = 4096
	FlannelPort    = 4789
	// FlannelAnnotationPrefix is flanneld's default --kube-annotation-prefix.
	FlannelAnnotationPrefix = "flannel.alpha.coreos.com"
	// FlannelDevice is the VXLAN device flanneld creates: flannel.<VNI>.
	FlannelDevice = "flannel.4096"
	// FlannelBridge is the kernel bridge the bridge CNI plugin attaches the node's Pods to (flannel's cni0).
	FlannelBridge = "cni0"
)

// FlanneldBinary returns the flanneld hack/setup-test-deps.sh builds into bin/flannel-<version>/.
func FlanneldBinary() (string, error) {
	bin := filepath.Join(framework.RepoRoot(), "bin", "flannel-"+FlannelVersion, "flanneld")
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("flanneld %s is missing at %s: run hack/setup-test-deps.sh (make test-deps): %w", FlannelVersion, bin, err)
	}
	return bin, nil
}

// FlannelNodeSpec describes a Linux node that runs stock flanneld.
type FlannelNodeSpec struct {
	// Name of the Node and (after the prefix) its namespace.
	Name string
	// IP is the node's address on the underlay: its InternalIP and flannel's public-ip.
	IP netip.Addr
	// PodCIDR is the node's Pod CIDR inside the cluster CIDR (flanneld requires it to be set and inside its
	// Network).
	PodCIDR netip.Prefix
}

// FlannelNode is a Linux node of a flannel cluster: a namespace on the underlay whose uplink is eth0, with the
// real flanneld (kube subnet manager, VXLAN) and Pods attached to the kernel bridge cni0 by the standard bridge
// and host-local CNI plugins, as flannel's own CNI plugin would delegate them.
type FlannelNode struct {
	Name    string
	NS      string
	NSPath  string
	IP      netip.Addr
	PodCIDR netip.Prefix
	// IPv6 and PodCIDRv6 are the node's IPv6 address and Pod CIDR in a dual-stack cluster, which its Node
	// lists (flanneld runs IPv4 only, see writeConfig); zero otherwise.
	IPv6      netip.Addr
	PodCIDRv6 netip.Prefix
	// Gateway is cni0's address, the first of the Pod CIDR; the flannel.4096 device holds the network address.
	Gateway netip.Addr
	Dir     string

	c        *Cluster
	flanneld *process
	pods     []*FlannelPod
}

// FlannelPod is a Pod sandbox on a flannel node.
type FlannelPod struct {
	Name        string
	NS          string
	NSPath      string
	ContainerID string
	IP          netip.Addr
	node        *FlannelNode
}

// Place is the Pod.
func (p *FlannelPod) Place() Place { return Place{Label: p.Name, NS: p.NS, IP: p.IP} }

// Host is the flannel node's host stack, sourcing from its node IP (traffic to Pods goes out on flannel.4096,
// whose address, the network address of the node's Pod CIDR, becomes the source).
func (n *FlannelNode) Host() Place { return Place{Label: n.Name, NS: n.NS, IP: n.IP} }

// TunnelSource is the source address the flannel node's host traffic to other nodes' Pods carries: the address
// of flannel.4096, the network address of its Pod CIDR.
func (n *FlannelNode) TunnelSource() netip.Addr { return n.PodCIDR.Masked().Addr() }

// Exec runs a command inside the flannel node's namespace.
func (n *FlannelNode) Exec(args ...string) (string, error) { return simnode.Exec(n.NS, args...) }

// SetRoutesToFlannelNodes tells WaitReady whether every winnet node has a route to every flannel node (winnet-
// controller's flannel interop is on).
func (c *Cluster) SetRoutesToFlannelNodes(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.routesToFlannel = on
}

// FlannelNodes returns the flannel nodes.
func (c *Cluster) FlannelNodes() []*FlannelNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*FlannelNode(nil), c.flannelNodes...)
}

// AddFlannelNode builds a flannel node: its namespace on the underlay, its Node object (Pod CIDR, InternalIP,
// Ready, labelled linux), and flanneld; it waits until flanneld has written its subnet file and annotated the
// Node. The Node's Lease is not renewed: flannel needs none, and the harness does not play kubelet there.
func (c *Cluster) AddFlannelNode(ctx context.Context, spec FlannelNodeSpec) (*FlannelNode, error) {
	bin, err := FlanneldBinary()
	if err != nil {
		return nil, err
	}
	n := &FlannelNode{Name: spec.Name, NS: c.Prefix + "-" + spec.Name, IP: spec.IP, PodCIDR: spec.PodCIDR.Masked(),
		Gateway: spec.PodCIDR.Masked().Addr().Next(), Dir: filepath.Join(c.RunDir, spec.Name), c: c}
	n.NSPath = nsPath(n.NS)
	if err := c.checkPodCIDR(n.PodCIDR); err != nil {
		return nil, err
	}
	n.IPv6, n.PodCIDRv6 = c.underlayV6(n.IP), c.podCIDRv6(n.PodCIDR)
	c.mu.Lock()
	c.flannelNodes = append(c.flannelNodes, n)
	c.mu.Unlock()
	c.logf("Adding flannel node %s (%s, Pod CIDR %s)", n.Name, n.IP, n.PodCIDR)
	if err := os.MkdirAll(n.Dir, 0o755); err != nil {
		return n, err
	}
	if err := addNS(n.NS); err != nil {
		return n, err
	}
	if err := plug(c.UnderlayNS, n.NS, hostIfName, c.nextPort(), netip.PrefixFrom(n.IP, c.UnderlayCIDR.Bits()), c.UnderlayGateway); err != nil {
		return n, err
	}
	if err := c.addUnderlayV6(n.NS, hostIfName, n.IP); err != nil {
		return n, err
	}
	// A kernel vxlan device behind a veth leaves the outer UDP checksum partial, and the winnet nodes' OVS
	// userspace datapath drops such packets in tnl_pop; a real NIC completes the checksum.
	if err := simnode.DisableTxChecksum(n.NS, hostIfName); err != nil {
		return n, err
	}
	for _, h := range []*Host{c.External, c.APIHost} {
		if err := run(h.NS, []string{"ip", "route", "replace", n.PodCIDR.String(), "via", n.IP.String()}); err != nil {
			return n, err
		}
	}
	if err := c.createFlannelNode(ctx, n); err != nil {
		return n, err
	}
	if err := n.writeConfig(); err != nil {
		return n, err
	}
	if err := n.StartFlanneld(ctx, bin, 60*time.Second); err != nil {
		return n, err
	}
	return n, nil
}

// createFlannelNode creates the Node as kubelet registers a Linux node: labels, an annotation (flanneld v0.28.10
// panics on a Node with no annotations at all), the Pod CIDR kube-controller-manager would allocate, and its
// status with the InternalIP and Ready.
func (c *Cluster) createFlannelNode(ctx context.Context, n *FlannelNode) error {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name,
			Labels:      map[string]string{corev1.LabelHostname: n.Name, corev1.LabelOSStable: "linux"},
			Annotations: map[string]string{"node.alpha.kubernetes.io/ttl": "0"}},
		Spec: corev1.NodeSpec{PodCIDR: n.PodCIDR.String(), PodCIDRs: podCIDRs(n.PodCIDR, n.PodCIDRv6)},
	}
	if err := c.Client.Create(ctx, node); err != nil {
		return fmt.Errorf("creating Node %s: %w", n.Name, err)
	}
	return c.SetNodeAddress(ctx, n.Name, n.IP)
}

// SetNodeAddress writes the Node's InternalIP and a Ready condition into its status, as kubelet does; in a
// dual-stack cluster the IPv6 InternalIP mirroring ip follows it.
func (c *Cluster) SetNodeAddress(ctx context.Context, name string, ip netip.Addr) error {
	for {
		node := &corev1.Node{}
		if err := c.Client.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
			return fmt.Errorf("getting Node %s: %w", name, err)
		}
		node.Status.Addresses = nodeAddresses(name, ip, c.underlayV6(ip), false)
		node.Status.Conditions = []corev1.NodeCondition{nodeReady(metav1.Now())}
		err := c.Client.Status().Update(ctx, node)
		if err == nil {
			return nil
		}
		if !apierrors.IsConflict(err) {
			return fmt.Errorf("writing the status of Node %s: %w", name, err)
		}
	}
}

// writeConfig writes flanneld's net-conf.json and a kubeconfig that reaches the API server over the underlay
// (flanneld runs inside the node's namespace).
func (n *FlannelNode) writeConfig() error {
	conf := map[string]any{
		"Network": n.c.ClusterCIDR.String(), "EnableNFTables": false,
		"Backend": map[string]any{"Type": "vxlan", "VNI": FlannelVNI, "Port": FlannelPort, "DirectRouting": false},
	}
	b, err := json.Marshal(conf)
	if err != nil {
		return err
	}
	if err := os.WriteFile(n.netConfPath(), b, 0o644); err != nil {
		return fmt.Errorf("writing flanneld's net-conf.json: %w", err)
	}
	kc, err := clientcmd.LoadFromFile(n.c.Kubeconfig)
	if err != nil {
		return fmt.Errorf("loading the admin kubeconfig: %w", err)
	}
	for _, cl := range kc.Clusters {
		cl.Server = "https://" + netip.AddrPortFrom(n.c.APIHost.IP.Addr(), uint16(n.c.APIServerPort)).String()
		cl.TLSServerName = APIServerName
	}
	if err := clientcmd.WriteToFile(*kc, n.kubeconfigPath()); err != nil {
		return fmt.Errorf("writing flanneld's kubeconfig: %w", err)
	}
	return nil
}

func (n *FlannelNode) netConfPath() string    { return filepath.Join(n.Dir, "net-conf.json") }
func (n *FlannelNode) kubeconfigPath() string { return filepath.Join(n.Dir, "kubeconfig") }
func (n *FlannelNode) subnetFile() string     { return filepath.Join(n.Dir, "subnet.env") }

// StartFlanneld starts flanneld in the node's namespace as kube-flannel's DaemonSet runs it (kube subnet manager,
// iptables mode, no --ip-masq) and waits until it has written its subnet file and annotated its Node.
func (n *FlannelNode) StartFlanneld(ctx context.Context, bin string, timeout time.Duration) error {
	_ = os.Remove(n.subnetFile())
	p, err := n.c.reg.startProcessWithEnv("flanneld "+n.Name, filepath.Join(n.Dir, "flanneld.log"), []string{"NODE_NAME=" + n.Name},
		"ip", "netns", "exec", n.NS, bin, "--kube-subnet-mgr", "--kubeconfig-file="+n.kubeconfigPath(),
		"--iface="+hostIfName, "--net-config-path="+n.netConfPath(), "--subnet-file="+n.subnetFile(),
		"--healthz-ip=127.0.0.1", "--healthz-port=0")
	if err != nil {
		return err
	}
	n.flanneld = p
	return waitFor(timeout, 200*time.Millisecond, func() error {
		if !p.running() {
			return fmt.Errorf("flanneld on %s exited; last lines of its log:\n%s", n.Name, p.logTail(20))
		}
		if _, err := os.Stat(n.subnetFile()); err != nil {
			return fmt.Errorf("flanneld on %s has not written %s yet", n.Name, n.subnetFile())
		}
		node := &corev1.Node{}
		if err := n.c.Client.Get(ctx, client.ObjectKey{Name: n.Name}, node); err != nil {
			return err
		}
		if node.Annotations[FlannelAnnotationPrefix+"/kube-subnet-manager"] != "true" {
			return fmt.Errorf("flanneld on %s has not annotated its Node yet", n.Name)
		}
		return nil
	})
}

// StopFlanneld stops flanneld with SIGTERM; it leaves its device, routes and iptables rules in place.
func (n *FlannelNode) StopFlanneld() error {
	if n.flanneld == nil {
		return nil
	}
	return n.flanneld.stop(syscall.SIGTERM, 10*time.Second)
}

// RestartFlanneld stops flanneld and starts it again, as a restart of its Pod does.
func (n *FlannelNode) RestartFlanneld(ctx context.Context, timeout time.Duration) error {
	bin, err := FlanneldBinary()
	if err != nil {
		return err
	}
	if err := n.StopFlanneld(); err != nil {
		return err
	}
	return n.StartFlanneld(ctx, bin, timeout)
}

// FlanneldLogTail returns the last lines of flanneld's log.
func (n *FlannelNode) FlanneldLogTail(lines int) string {
	if n.flanneld == nil {
		return ""
	}
	return n.flanneld.logTail(lines)
}

// VTEPMAC returns the MAC of the node's flannel.4096 device.
func (n *FlannelNode) VTEPMAC() (string, error) {
	out, err := simnode.Output(n.NS, "cat", "/sys/class/net/"+FlannelDevice+"/address")
	return strings.TrimSpace(out), err
}

// conflist is the CNI configuration of the node's Pods: what flannel's CNI plugin delegates to the bridge
// plugin (cni0 as the Pods' gateway, hairpin, no masquerade, flannel's MTU) with host-local on the node's Pod
// CIDR.
func (n *FlannelNode) conflist() (*libcni.NetworkConfigList, error) {
	mtu, err := n.flannelMTU()
	if err != nil {
		return nil, err
	}
	conf := map[string]any{
		"cniVersion": "1.0.0", "name": "cbr0",
		"plugins": []any{map[string]any{
			"type": "bridge", "bridge": FlannelBridge, "isGateway": true, "hairpinMode": true, "ipMasq": false, "mtu": mtu,
			"ipam": map[string]any{
				"type": "host-local", "dataDir": filepath.Join(n.Dir, "ipam"),
				"ranges": []any{[]any{map[string]any{"subnet": n.PodCIDR.String()}}},
				"routes": []any{map[string]any{"dst": "0.0.0.0/0"}},
			},
		}},
	}
	b, err := json.Marshal(conf)
	if err != nil {
		return nil, err
	}
	return libcni.ConfListFromBytes(b)
}

// flannelMTU reads FLANNEL_MTU from the subnet file flanneld wrote.
func (n *FlannelNode) flannelMTU() (int, error) {
	b, err := os.ReadFile(n.subnetFile())
	if err != nil {
		return 0, fmt.Errorf("reading flanneld's subnet file: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "FLANNEL_MTU="); ok {
			var mtu int
			if _, err := fmt.Sscan(v, &mtu); err != nil {
				return 0, fmt.Errorf("FLANNEL_MTU=%q: %w", v, err)
			}
			return mtu, nil
		}
	}
	return 0, fmt.Errorf("flanneld's subnet file has no FLANNEL_MTU:\n%s", b)
}

// AddFlannelPod creates a Pod sandbox on the flannel node: a namespace attached by the bridge and host-local CNI
// plugins, called by libcni from the node's namespace as containerd would call them there.
func (c *Cluster) AddFlannelPod(ctx context.Context, n *FlannelNode, name string) (*FlannelPod, error) {
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	p := &FlannelPod{Name: name, NS: n.NS + "-" + name, ContainerID: hex.EncodeToString(id), node: n}
	p.NSPath = nsPath(p.NS)
	list, err := n.conflist()
	if err != nil {
		return nil, err
	}
	if err := addNS(p.NS); err != nil {
		return nil, err
	}
	c.mu.Lock()
	n.pods = append(n.pods, p)
	c.mu.Unlock()
	var res *types100.Result
	err = ns.WithNetNSPath(n.NSPath, func(ns.NetNS) error {
		r, err := libcni.NewCNIConfigWithCacheDir(cniPluginDirs, filepath.Join(n.Dir, "cni-cache"), nil).
			AddNetworkList(ctx, list, p.runtimeConf())
		if err != nil {
			return err
		}
		res, err = types100.NewResultFromResult(r)
		return err
	})
	if err != nil {
		return p, fmt.Errorf("CNI ADD of Pod %s on %s: %w", name, n.Name, err)
	}
	if len(res.IPs) == 0 {
		return p, fmt.Errorf("the CNI result of Pod %s has no IP: %+v", name, res)
	}
	ip, ok := netip.AddrFromSlice(res.IPs[0].Address.IP.To4())
	if !ok {
		return p, fmt.Errorf("the CNI result of Pod %s has no IPv4 address: %v", name, res.IPs[0].Address)
	}
	p.IP = ip
	c.logf("Pod %s on %s has IP %s", name, n.Name, ip)
	return p, nil
}

func (p *FlannelPod) runtimeConf() *libcni.RuntimeConf {
	return &libcni.RuntimeConf{ContainerID: p.ContainerID, NetNS: p.NSPath, IfName: podIfName,
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", PodNamespace}, {"K8S_POD_NAME", p.Name}}}
}

// RemoveFlannelNode deletes the flannel node's Node object, stops flanneld and deletes its namespaces.
func (c *Cluster) RemoveFlannelNode(ctx context.Context, n *FlannelNode) error {
	err := c.Client.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name}})
	if apierrors.IsNotFound(err) {
		err = nil
	}
	c.mu.Lock()
	for i, f := range c.flannelNodes {
		if f == n {
			c.flannelNodes = append(c.flannelNodes[:i], c.flannelNodes[i+1:]...)
			break
		}
	}
	c.mu.Unlock()
	err = errors.Join(err, n.stop())
	for _, h := range []*Host{c.External, c.APIHost} {
		err = errors.Join(err, run(h.NS, []string{"ip", "route", "del", n.PodCIDR.String()}))
	}
	return err
}

// stop stops flanneld and deletes the node's namespace and its Pods'.
func (n *FlannelNode) stop() error {
	errs := []error{n.StopFlanneld()}
	for _, p := range n.pods {
		errs = append(errs, deleteNS(p.NS))
	}
	errs = append(errs, deleteNS(n.NS))
	return errors.Join(errs...)
}

// SetFlannelNodeIP moves the flannel node to another underlay address, as a re-addressed host: the new address
// on eth0 and the old one gone, the default route, the hosts' routes to its Pods, the Node's InternalIP; then
// flanneld restarts (it reads its public IP from --iface at start) and publishes the new public-ip.
func (c *Cluster) SetFlannelNodeIP(ctx context.Context, n *FlannelNode, ip netip.Addr, timeout time.Duration) error {
	bits := c.UnderlayCIDR.Bits()
	// The old address first: a second address of the same subnet is secondary, and deleting the primary
	// deletes it too.
	if err := run(n.NS,
		[]string{"ip", "addr", "del", netip.PrefixFrom(n.IP, bits).String(), "dev", hostIfName},
		[]string{"ip", "addr", "add", netip.PrefixFrom(ip, bits).String(), "dev", hostIfName},
		[]string{"ip", "route", "replace", "default", "via", c.UnderlayGateway.String(), "dev", hostIfName}); err != nil {
		return err
	}
	for _, h := range []*Host{c.External, c.APIHost} {
		if err := run(h.NS, []string{"ip", "route", "replace", n.PodCIDR.String(), "via", ip.String()}); err != nil {
			return err
		}
	}
	if c.opts.DualStack {
		if err := run(n.NS, []string{"ip", "-6", "addr", "del", netip.PrefixFrom(n.IPv6, 64).String(), "dev", hostIfName}); err != nil {
			return err
		}
		if err := c.addUnderlayV6(n.NS, hostIfName, ip); err != nil {
			return err
		}
	}
	n.IP, n.IPv6 = ip, c.underlayV6(ip)
	if err := c.SetNodeAddress(ctx, n.Name, ip); err != nil {
		return err
	}
	return n.RestartFlanneld(ctx, timeout)
}
