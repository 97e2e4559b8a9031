//go:build linux

package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/hns"
	"github.com/winnet-io/winnet/test/hostcmd"
	"github.com/winnet-io/winnet/test/simnode"
)

// A "flannel Windows node" is a simulated node in the state flannel's win-overlay backend and kube-proxy's
// winkernel mode leave it in, before winnet takes it over (docs/getting-started.md, "Coming from flannel and
// kube-proxy"): its HNS simulator holds flannel's Overlay network on the uplink with its HostRoute and one
// RemoteSubnetRoute policy per remote lease, the endpoints of its Pods, kube-proxy's source-VIP endpoint,
// remote endpoints and load balancers (internal/hns/sim_foreign.go cites the sources); its CNI configuration
// directory holds flannel's configuration and its directory flanneld's subnet file; its Node carries the
// record flanneld on Windows publishes. Nothing of that state carries packets: the simulator realises only
// winnet's Transparent networks, so the node's old Pods are API objects and HNS endpoints only.

// FlannelWindowsNetwork is the name of flannel's HNS network on the node (the sig-windows-tools and
// microsoft/SDN configurations name it vxlan0).
const FlannelWindowsNetwork = "vxlan0"

// FlannelWindowsSpec describes a flannel Windows node to add.
type FlannelWindowsSpec struct {
	NodeSpec
	// Pods are the names of the Pods running on the node, each with an endpoint on flannel's network.
	Pods []string
	// Services are kube-proxy's load balancers on the node.
	Services []KubeProxyService
}

// KubeProxyService is a Service as kube-proxy's winkernel proxier realised it on the node: one load balancer
// for its ClusterIP with the source VIP, one remote endpoint per backend on another node.
type KubeProxyService struct {
	ClusterIP netip.Addr
	Backends  []netip.Addr
}

// FlannelWindowsNode is a node seeded as flannel and kube-proxy left it; Node is the simulated node winnet
// takes over (no agent runs until StartWinnet).
type FlannelWindowsNode struct {
	*Node
	// VtepMAC is the VtepMAC flanneld on Windows published: its Overlay network's DR MAC (flannel's MacPrefix
	// 0E-2A followed by the node's Pod subnet address).
	VtepMAC string
	// SubnetFile is flanneld's subnet file, ConfFile flannel's CNI configuration.
	SubnetFile, ConfFile string
	// Pods are the node's Pods on flannel's network.
	Pods []*FlannelWindowsPod
	// Leftovers name every seeded thing `winnet-agent takeover` must remove once the Pods are gone, each by a
	// string its line carries (an HNS ID, a network's name or a path); Drain adds the endpoints of Pods gone without a CNI DEL.
	Leftovers []string
	// SourceVIP is kube-proxy's source VIP.
	SourceVIP netip.Addr
}

// FlannelWindowsPod is a Pod on flannel's network of a flannel Windows node.
type FlannelWindowsPod struct {
	Name        string
	ContainerID string
	IP          netip.Addr
	// EndpointID is its HNS endpoint ("<container ID>_vxlan0", win-overlay's name), attached to NamespaceID.
	EndpointID  string
	NamespaceID string
}

// AddFlannelWindowsNode builds a simulated node (namespace, uplink, Open vSwitch) in the state a Windows node of
// flannel's win-overlay backend and kube-proxy's winkernel mode is in, with its Node object: Pod CIDR, InternalIP,
// Ready, its Lease, and flanneld's record (VNI 4096, its VtepMAC, public-ip). No agent and no WindowsNodeNetwork:
// winnet does not serve it yet, and WaitReady, which counts it among the cluster's nodes, waits for it until
// StartWinnet.
func (c *Cluster) AddFlannelWindowsNode(ctx context.Context, spec FlannelWindowsSpec) (*FlannelWindowsNode, error) {
	n, err := c.register(spec.NodeSpec, nil)
	if err != nil {
		return nil, err
	}
	c.logf("Adding flannel Windows node %s (%s, Pod CIDR %s)", n.Name, n.IP, n.PodCIDR)
	fw := &FlannelWindowsNode{Node: n, SubnetFile: filepath.Join(n.Dir, "run", "flannel", "subnet.env"),
		ConfFile: filepath.Join(n.CNIConfDir, "10-flannel.conf")}
	sn := n.PodCIDR.Addr().As4()
	fw.VtepMAC = net.HardwareAddr{0x0e, 0x2a, sn[0], sn[1], sn[2], sn[3]}.String()
	if err := n.build(); err != nil {
		return fw, fmt.Errorf("building node %s: %w", n.Name, err)
	}
	if err := c.createNode(ctx, n); err != nil {
		return fw, err
	}
	if err := fw.seedFiles(); err != nil {
		return fw, err
	}
	if err := c.seedHNS(ctx, fw, spec); err != nil {
		return fw, fmt.Errorf("seeding the HNS of %s: %w", n.Name, err)
	}
	for _, p := range fw.Pods {
		if err := c.createFlannelWindowsPod(ctx, n, p); err != nil {
			return fw, err
		}
	}
	return fw, c.publishFlanneldRecord(ctx, fw)
}

// publishFlanneldRecord writes the record flanneld on Windows publishes on its Node once its network exists
// (vxlan_windows.go RegisterNetwork: AcquireLease with the network's DR MAC), through nodes/status as on Linux.
func (c *Cluster) publishFlanneldRecord(ctx context.Context, fw *FlannelWindowsNode) error {
	record := map[string]string{
		FlannelAnnotationPrefix + "/kube-subnet-manager": "true",
		FlannelAnnotationPrefix + "/backend-type":        "vxlan",
		FlannelAnnotationPrefix + "/backend-data":        fmt.Sprintf(`{"VNI":%d,"VtepMAC":"%s"}`, FlannelVNI, fw.VtepMAC),
		FlannelAnnotationPrefix + "/public-ip":           fw.IP.String(),
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": record}})
	if err := c.Client.Status().Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fw.Name}}, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("publishing flanneld's record on Node %s: %w", fw.Name, err)
	}
	return nil
}

// RestartOldStack plays flanneld and kube-proxy starting again on the node after winnet left it (the reverse
// path): flanneld writes its subnet file and CNI configuration, creates its Overlay network on the uplink (HNS
// refuses it while another network holds the adapter) with its policies, and publishes its record; kube-proxy
// creates its source-VIP endpoint. Leftovers then name what they made.
func (c *Cluster) RestartOldStack(ctx context.Context, fw *FlannelWindowsNode) error {
	if fw.AgentRunning() {
		return fmt.Errorf("the agent of %s runs", fw.Name)
	}
	fw.Leftovers, fw.Pods = nil, nil
	if err := fw.seedFiles(); err != nil {
		return err
	}
	if err := c.seedHNS(ctx, fw, FlannelWindowsSpec{}); err != nil {
		return fmt.Errorf("starting flannel again on %s: %w", fw.Name, err)
	}
	return c.publishFlanneldRecord(ctx, fw)
}

// seedFiles writes flannel's CNI configuration (the flannel plugin delegating to win-overlay, as
// sig-windows-tools' kube-flannel configures Windows nodes) and flanneld's subnet file.
func (fw *FlannelWindowsNode) seedFiles() error {
	conf := `{"name":"vxlan0","cniVersion":"0.3.0","type":"flannel","capabilities":{"portMappings":true,"dns":true},` +
		`"delegate":{"type":"win-overlay","policies":[{"Name":"EndpointPolicy","Value":{"Type":"OutBoundNAT"}}]}}`
	if err := os.WriteFile(fw.ConfFile, []byte(conf), 0o644); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(fw.SubnetFile), 0o755); err != nil {
		return err
	}
	env := fmt.Sprintf("FLANNEL_NETWORK=%s\nFLANNEL_SUBNET=%s\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n",
		fw.c.ClusterCIDR, netip.PrefixFrom(fw.Gateway, fw.PodCIDR.Bits()))
	if err := os.WriteFile(fw.SubnetFile, []byte(env), 0o644); err != nil {
		return err
	}
	fw.Leftovers = append(fw.Leftovers, fw.ConfFile, fw.SubnetFile)
	return nil
}

// openHNS opens the node's HNS simulator, as the agent and `winnet-agent takeover` do; only while no agent runs.
func (n *Node) openHNS() (*hns.Sim, error) {
	if n.AgentRunning() {
		return nil, fmt.Errorf("the agent of %s runs: it owns the node's HNS", n.Name)
	}
	return hns.NewLinuxSim(hns.LinuxSimOptions{HostNetNS: n.NSPath, StateFile: filepath.Join(n.StateDir, HNSStateFile),
		SandboxDir: n.SandboxDir()})
}

// seedHNS creates what flanneld and kube-proxy create on the node, in their order: flannel's Overlay network on
// the uplink with its HostRoute policy and a RemoteSubnetRoute policy per lease of another node (read from the
// Nodes' flannel records, as flanneld reads them), the Pods' endpoints (the win-overlay plugin's), then
// kube-proxy's source-VIP endpoint, its remote endpoints and load balancers.
func (c *Cluster) seedHNS(ctx context.Context, fw *FlannelWindowsNode, spec FlannelWindowsSpec) (err error) {
	sim, err := fw.openHNS()
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, sim.Close()) }()
	overlay, err := sim.CreateNetwork(ctx, hns.ForeignNetworkSpec{Type: hns.Overlay, Name: FlannelWindowsNetwork, AdapterName: uplinkName,
		Subnet: fw.PodCIDR, Gateway: fw.Gateway, HostRoute: true})
	if err != nil {
		return err
	}
	fw.Leftovers = append(fw.Leftovers, fmt.Sprintf("HNS network %q", overlay.Name)) // takeover names networks by name
	nodes := &corev1.NodeList{}
	if err := c.Client.List(ctx, nodes); err != nil {
		return err
	}
	for _, node := range nodes.Items {
		policy, ok := flannelLeasePolicy(&node)
		if ok && node.Name != fw.Name {
			if err := sim.AddRemoteSubnetPolicy(overlay.ID, policy); err != nil {
				return err
			}
		}
	}
	next := fw.Gateway.Next()
	fw.SourceVIP, next = next, next.Next()
	for _, name := range spec.Pods {
		id := make([]byte, 32)
		_, _ = rand.Read(id)
		p := &FlannelWindowsPod{Name: name, ContainerID: hex.EncodeToString(id), IP: next, NamespaceID: strings.ToUpper(uuid.NewString())}
		next = next.Next()
		ep, err := sim.CreateEndpoint(ctx, hns.EndpointSpec{Name: p.ContainerID + "_" + FlannelWindowsNetwork, NetworkID: overlay.ID, IP: p.IP})
		if err != nil {
			return err
		}
		if err := sim.AttachEndpoint(ctx, ep.ID, p.NamespaceID); err != nil {
			return err
		}
		p.EndpointID = ep.ID
		fw.Pods = append(fw.Pods, p)
	}
	out, err := simnode.Output(fw.NS, "cat", "/sys/class/net/"+uplinkName+"/address")
	if err != nil {
		return err
	}
	hostMAC, err := net.ParseMAC(strings.TrimSpace(out))
	if err != nil {
		return fmt.Errorf("reading the uplink's MAC: %w", err)
	}
	vip, err := sim.CreateSourceVIPEndpoint(ctx, overlay.ID, fw.SourceVIP, hostMAC)
	if err != nil {
		return err
	}
	fw.Leftovers = append(fw.Leftovers, vip.ID)
	remote := map[netip.Addr]string{}
	for _, svc := range spec.Services {
		var eps []string
		for _, b := range svc.Backends {
			if _, ok := remote[b]; !ok {
				b4 := b.As4()
				ep, err := sim.CreateRemoteEndpoint(ctx, overlay.ID, b, net.HardwareAddr{0x02, 0x11, b4[0], b4[1], b4[2], b4[3]})
				if err != nil {
					return err
				}
				remote[b] = ep.ID
				fw.Leftovers = append(fw.Leftovers, ep.ID)
			}
			eps = append(eps, remote[b])
		}
		lb, err := sim.CreateLoadBalancer(ctx, hns.LoadBalancer{FrontendVIPs: []string{svc.ClusterIP.String()}, SourceVIP: vip.IP.String(), Endpoints: eps})
		if err != nil {
			return err
		}
		fw.Leftovers = append(fw.Leftovers, lb.ID)
	}
	return nil
}

// flannelLeasePolicy is the RemoteSubnetRoute policy flanneld on Windows adds for a node's flannel lease
// (vxlan_network_windows.go handleSubnetEvents), false when the node publishes none.
func flannelLeasePolicy(node *corev1.Node) (hns.RemoteSubnetPolicy, bool) {
	a := node.Annotations
	var bd struct{ VtepMAC string }
	ip, err := netip.ParseAddr(a[FlannelAnnotationPrefix+"/public-ip"])
	if a[FlannelAnnotationPrefix+"/kube-subnet-manager"] != "true" || err != nil || node.Spec.PodCIDR == "" ||
		json.Unmarshal([]byte(a[FlannelAnnotationPrefix+"/backend-data"]), &bd) != nil {
		return hns.RemoteSubnetPolicy{}, false
	}
	cidr, err := netip.ParsePrefix(node.Spec.PodCIDR)
	if err != nil {
		return hns.RemoteSubnetPolicy{}, false
	}
	return hns.RemoteSubnetPolicy{DestinationPrefix: cidr, ProviderAddress: ip, DRMAC: bd.VtepMAC, IsolationID: FlannelVNI}, true
}

// createFlannelWindowsPod creates the Pod object of a Pod on flannel's network, running with its IP.
func (c *Cluster) createFlannelWindowsPod(ctx context.Context, n *Node, p *FlannelWindowsPod) error {
	obj := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: PodNamespace},
		Spec: corev1.PodSpec{NodeName: n.Name,
			Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
	}
	if err := c.Client.Create(ctx, obj); err != nil {
		return fmt.Errorf("creating Pod %s: %w", p.Name, err)
	}
	obj.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: p.IP.String(), PodIPs: []corev1.PodIP{{IP: p.IP.String()}},
		HostIP: n.IP.String(), Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	if err := c.Client.Status().Update(ctx, obj); err != nil {
		return fmt.Errorf("writing the status of Pod %s: %w", p.Name, err)
	}
	return nil
}

// Cordon marks the node unschedulable, or schedulable again, as kubectl cordon and uncordon do.
func (c *Cluster) Cordon(ctx context.Context, name string, unschedulable bool) error {
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, unschedulable)
	return c.Client.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, client.RawPatch(types.MergePatchType, []byte(patch)))
}

// Drain deletes the node's Pods as kubectl drain does and plays what kubelet and the win-overlay plugin then do
// with their endpoints: the CNI DEL deletes a Pod's endpoint, except for the Pods of withoutDel, whose sandbox
// went without a DEL (a crash, a reboot): their endpoints stay, detached, and join Leftovers.
func (c *Cluster) Drain(ctx context.Context, fw *FlannelWindowsNode, withoutDel ...string) (err error) {
	sim, err := fw.openHNS()
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, sim.Close()) }()
	for _, p := range fw.Pods {
		err := c.Client.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: PodNamespace}}, client.GracePeriodSeconds(0))
		if client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting Pod %s: %w", p.Name, err)
		}
		if err := sim.DetachEndpoint(ctx, p.EndpointID, p.NamespaceID); err != nil {
			return err
		}
		if slices.Contains(withoutDel, p.Name) {
			fw.Leftovers = append(fw.Leftovers, p.EndpointID)
			continue
		}
		if err := sim.DeleteEndpoint(ctx, p.EndpointID); err != nil {
			return err
		}
	}
	fw.Pods = nil
	return nil
}

// Takeover runs `winnet-agent takeover` on the node, as an Administrator runs it there, with the node's
// directories and args (--from ..., --dry-run) and returns what it printed and its exit code.
func (fw *FlannelWindowsNode) Takeover(args ...string) (string, int, error) {
	args = append([]string{"takeover", "--netns", fw.NSPath, "--state-dir", fw.StateDir, "--cni-conf-dir", fw.CNIConfDir,
		"--flannel-subnet-file", fw.SubnetFile}, args...)
	out, err := hostcmd.Command(filepath.Join(fw.c.BinDir, "winnet-agent"), args...).CombinedOutput()
	var exit interface{ ExitCode() int }
	if errors.As(err, &exit) {
		return string(out), exit.ExitCode(), nil
	}
	return string(out), 0, err
}

// Reset runs `winnet-agent reset` on the node, as an Administrator runs it there once the agent is stopped,
// with the node's Open vSwitch, directories and args, and returns what it printed and its exit code.
func (fw *FlannelWindowsNode) Reset(args ...string) (string, int, error) {
	args = append([]string{"reset", "--netns", fw.NSPath, "--ovsdb", fw.OVS.DBSocket(), "--state-dir", fw.StateDir,
		"--cni-conf-dir", fw.CNIConfDir}, args...)
	out, err := hostcmd.Command(filepath.Join(fw.c.BinDir, "winnet-agent"), args...).CombinedOutput()
	var exit interface{ ExitCode() int }
	if errors.As(err, &exit) {
		return string(out), exit.ExitCode(), nil
	}
	return string(out), 0, err
}

// ForgetNetwork deletes the node's WindowsNodeNetwork when no agent is left to release it: it deletes it and
// clears its finalizer, as `kubectl delete wnn NODE --wait=false` and `kubectl patch wnn NODE --type merge -p
// '{"metadata":{"finalizers":null}}'` do, and waits until it is gone.
func (c *Cluster) ForgetNetwork(ctx context.Context, name string) error {
	w := &networkv1alpha1.WindowsNodeNetwork{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := client.IgnoreNotFound(c.Client.Delete(ctx, w)); err != nil {
		return fmt.Errorf("deleting WindowsNodeNetwork %s: %w", name, err)
	}
	err := c.Client.Patch(ctx, w, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("clearing the finalizers of WindowsNodeNetwork %s: %w", name, err)
	}
	return waitFor(30*time.Second, 100*time.Millisecond, func() error {
		err := c.Client.Get(ctx, client.ObjectKey{Name: name}, w)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("WindowsNodeNetwork %s is still there: %v", name, err)
	})
}

// StartWinnet makes winnet serve the node: its WindowsNodeNetwork (what winnet-controller derives once the
// node is labelled for winnet; the harness's, with the simulated node's datapath), then its agent.
func (c *Cluster) StartWinnet(ctx context.Context, n *Node) error {
	if err := c.CreateNetwork(ctx, n); err != nil {
		return err
	}
	return n.StartAgent()
}

// HNSInventory is what the node's HNS holds, read from the simulator's state file (the agent may run).
type HNSInventory struct {
	Networks []struct {
		ID, Name string
		Type     hns.NetworkType
	}
	Endpoints []struct {
		ID, Name, NetworkID string
		Remote              bool
	}
	LoadBalancers []struct{ ID string }
}

// HNSInventory reads the node's HNS simulator state.
func (n *Node) HNSInventory() (HNSInventory, error) {
	var inv HNSInventory
	b, err := os.ReadFile(filepath.Join(n.StateDir, HNSStateFile))
	if err != nil {
		return inv, err
	}
	return inv, json.Unmarshal(b, &inv)
}

// Foreign lists what the inventory holds of a stack other than winnet's: networks not Transparent, endpoints
// on them or remote, load balancers.
func (inv HNSInventory) Foreign() []string {
	var out []string
	foreignNet := map[string]bool{}
	for _, nw := range inv.Networks {
		if nw.Type != "" && nw.Type != hns.Transparent {
			foreignNet[strings.ToUpper(nw.ID)] = true
			out = append(out, fmt.Sprintf("network %s %q (%s)", nw.ID, nw.Name, nw.Type))
		}
	}
	for _, ep := range inv.Endpoints {
		if ep.Remote || foreignNet[strings.ToUpper(ep.NetworkID)] {
			out = append(out, fmt.Sprintf("endpoint %s %q (remote %t)", ep.ID, ep.Name, ep.Remote))
		}
	}
	for _, lb := range inv.LoadBalancers {
		out = append(out, "load balancer "+lb.ID)
	}
	return out
}

// UplinkHolds reports whether the node's uplink holds ip, as the adapter does again once HNS gave it its
// configuration back.
func (n *Node) UplinkHolds(ip netip.Addr) (bool, error) {
	out, err := n.Exec("ip", "-4", "-o", "addr", "show", "dev", uplinkName)
	return strings.Contains(out, " "+ip.String()+"/"), err
}

// FDB returns the flannel device's forwarding entries on the flannel node: MAC -> destination.
func (n *FlannelNode) FDB() (map[string]string, error) {
	out, err := n.Exec("bridge", "fdb", "show", "dev", FlannelDevice)
	if err != nil {
		return nil, err
	}
	fdb := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[1] == "dst" {
			fdb[f[0]] = f[2]
		}
	}
	return fdb, nil
}

// Neighbour returns the MAC of the flannel device's neighbour entry for ip (flanneld's entry for a remote
// lease's subnet address), "" when there is none.
func (n *FlannelNode) Neighbour(ip netip.Addr) (string, error) {
	out, err := n.Exec("ip", "neigh", "show", ip.String(), "dev", FlannelDevice)
	if err != nil {
		return "", err
	}
	f := strings.Fields(out)
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "lladdr" {
			return f[i+1], nil
		}
	}
	return "", nil
}
