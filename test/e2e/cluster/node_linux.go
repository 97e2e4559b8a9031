//go:build linux

package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/agent"
	"github.com/winnet-io/winnet/internal/hns"
	"github.com/winnet-io/winnet/internal/ovs/ovstest"
	"github.com/winnet-io/winnet/test/simnode"
)

// HNSStateFile is the file in the agent's state directory where the HNS simulator keeps its state.
const HNSStateFile = "hns-sim.json"

// Names winnet uses on a node (its defaults).
const (
	BridgeName  = "br-int"
	GatewayName = "winnet-gw0"
	TunnelName  = "winnet-tun0"
)

// NodeSpec describes a node to add.
type NodeSpec struct {
	// Name of the Node, its WindowsNodeNetwork and (after the prefix) its namespace: [a-z0-9-], short.
	Name string
	// IP is the node IP on the underlay.
	IP netip.Addr
	// PodCIDR is the node's Pod CIDR inside the cluster CIDR; its first address is the gateway.
	PodCIDR netip.Prefix
	// Network, optional, edits the WindowsNodeNetwork before it is created (encapsulation, SNAT exclusions).
	Network func(*networkv1alpha1.WindowsNodeNetwork)
	// AgentArgs are added to the agent's command line (a benchmark's --pprof-bind-address, say).
	AgentArgs []string
	// AgentEnv are variables ("NAME=value") added to the agent's environment, at every start of it (a
	// benchmark's WINNET_MEMORY_LIMIT, say).
	AgentEnv []string
	// AgentBinary, when set, is the winnet-agent this node runs instead of BinDir's (a benchmark's
	// reference build).
	AgentBinary string
	// IPv6First, in a dual-stack cluster, lists the node's IPv6 InternalIP before its IPv4 one (kubelet
	// --node-ip <v6>,<v4>), as a node whose primary family is IPv6 does.
	IPv6First bool
}

// Node is a simulated node: a namespace with an uplink on the underlay, its own Open vSwitch and a
// winnet-agent process managing it.
type Node struct {
	Name    string
	NS      string
	NSPath  string
	IP      netip.Addr
	PodCIDR netip.Prefix
	// IPv6 and PodCIDRv6 are the node's IPv6 address on the underlay and its IPv6 Pod CIDR in a dual-stack
	// cluster (Options.DualStack), which its Node lists and winnet keeps but does not realise; zero otherwise.
	IPv6      netip.Addr
	PodCIDRv6 netip.Prefix
	// Gateway is the first address of the Pod CIDR, held by the gateway interface.
	Gateway netip.Addr
	OVS     *ovstest.OVS
	// Dir holds the agent's log, state directory, CNI socket and CNI configuration directory,
	// and its audit log directory (AuditLogDir, which the agent creates).
	Dir         string
	StateDir    string
	CNISocket   string
	CNIConfDir  string
	AuditLogDir string

	c              *Cluster
	agent          *process
	network        func(*networkv1alpha1.WindowsNodeNetwork)
	extraAgentArgs []string
	agentEnv       []string // NodeSpec.AgentEnv
	agentBinary    string
	ipv6First      bool
	agentRelease   Release
	// shimDir holds the CNI shim the harness's own CNI calls run; shimRelease is its release (and, on a
	// node with a real kubelet, that of the shim containerd runs).
	shimDir     string
	shimRelease Release
	// healthAddr is where the agent serves /healthz and /readyz: "0" (nowhere), or with
	// Options.AgentReadiness a port of the loopback that was free when the node was added.
	healthAddr string
	// kubelet: a node with a real kubelet and containerd (AddKubeletNode).
	kubelet *kubeletNode
}

// AddNode builds a node, creates its WindowsNodeNetwork and Node objects and starts its agent. It does not wait
// for the node to be ready (WaitReady).
func (c *Cluster) AddNode(ctx context.Context, spec NodeSpec) (*Node, error) {
	n, err := c.register(spec, nil)
	if err != nil {
		return nil, err
	}
	c.logf("Adding node %s (%s, Pod CIDR %s)", n.Name, n.IP, n.PodCIDR)
	if err := n.build(); err != nil {
		return n, fmt.Errorf("building node %s: %w", n.Name, err)
	}
	if err := c.CreateNetwork(ctx, n); err != nil {
		return n, err
	}
	if err := c.createNode(ctx, n); err != nil {
		return n, err
	}
	if err := n.StartAgent(); err != nil {
		return n, err
	}
	return n, nil
}

// register makes the record of the node spec describes, lets with (when set) complete it, and adds it
// to the cluster; it fails when a node of that name exists.
func (c *Cluster) register(spec NodeSpec, with func(*Node)) (*Node, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.nodes[spec.Name]; ok {
		return nil, fmt.Errorf("node %s exists", spec.Name)
	}
	if err := c.checkPodCIDR(spec.PodCIDR); err != nil {
		return nil, err
	}
	n := &Node{
		Name: spec.Name, NS: c.Prefix + "-" + spec.Name, IP: spec.IP, PodCIDR: spec.PodCIDR.Masked(),
		Gateway: spec.PodCIDR.Masked().Addr().Next(), Dir: filepath.Join(c.RunDir, spec.Name), c: c, network: spec.Network,
		extraAgentArgs: spec.AgentArgs, agentEnv: spec.AgentEnv, agentBinary: spec.AgentBinary, ipv6First: spec.IPv6First,
		agentRelease: c.opts.Release, shimDir: c.BinDir, shimRelease: c.opts.Release,
	}
	n.NSPath = nsPath(n.NS)
	n.IPv6, n.PodCIDRv6 = c.underlayV6(n.IP), c.podCIDRv6(n.PodCIDR)
	n.StateDir, n.CNISocket, n.CNIConfDir = filepath.Join(n.Dir, "state"), filepath.Join(n.Dir, "cni.sock"), filepath.Join(n.Dir, "net.d")
	n.AuditLogDir = filepath.Join(n.Dir, "audit")
	n.healthAddr = "0"
	if c.opts.AgentReadiness {
		n.healthAddr = freeLoopbackPort()
	}
	if with != nil {
		with(n)
	}
	c.nodes[spec.Name] = n
	return n, nil
}

// build creates the namespace, the uplink and Open vSwitch, and routes the Pod CIDR from the external host and
// the API server's host.
func (n *Node) build() error {
	for _, d := range []string{n.StateDir, n.CNIConfDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := addNS(n.NS); err != nil {
		return err
	}
	c := n.c
	if err := plug(c.UnderlayNS, n.NS, uplinkName, c.nextPort(), netip.PrefixFrom(n.IP, c.UnderlayCIDR.Bits()), c.UnderlayGateway); err != nil {
		return err
	}
	if err := c.addUnderlayV6(n.NS, uplinkName, n.IP); err != nil {
		return err
	}
	o, err := ovstest.New(ovstest.Options{NetNS: n.NS})
	if err != nil {
		return err
	}
	n.OVS = o
	if err := c.reg.recordDir(o.Dir); err != nil {
		return err
	}
	for _, h := range []*Host{c.External, c.APIHost} {
		if err := run(h.NS, []string{"ip", "route", "replace", n.PodCIDR.String(), "via", n.IP.String()}); err != nil {
			return err
		}
	}
	return nil
}

// CreateNetwork creates the node's WindowsNodeNetwork: its Pod CIDRs and node IP, the userspace datapath, the
// cluster and Service CIDRs (both families in a dual-stack cluster, as an operator lists them) and the
// external host's excluded address, edited by NodeSpec.Network.
func (c *Cluster) CreateNetwork(ctx context.Context, n *Node) error {
	wnn := &networkv1alpha1.WindowsNodeNetwork{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name},
		Spec: networkv1alpha1.WindowsNodeNetworkSpec{
			PodCIDRs:     cidrs(podCIDRs(n.PodCIDR, n.PodCIDRv6)...),
			NodeIP:       networkv1alpha1.IPv4Address(n.IP.String()),
			Bridge:       networkv1alpha1.BridgeSpec{DatapathType: networkv1alpha1.DatapathTypeNetdev},
			ClusterCIDRs: cidrs(strings.Split(c.clusterCIDRs(), ",")...),
			ServiceCIDRs: cidrs(strings.Split(c.serviceCIDRs(), ",")...),
			SNAT: networkv1alpha1.SNATSpec{
				ExcludeCIDRs: []networkv1alpha1.CIDR{networkv1alpha1.CIDR(netip.PrefixFrom(c.ExcludedIP, 32).String())},
			},
		},
	}
	if n.network != nil {
		n.network(wnn)
	}
	if err := c.Client.Create(ctx, wnn); err != nil {
		return fmt.Errorf("creating WindowsNodeNetwork %s: %w", n.Name, err)
	}
	return nil
}

// cidrs converts to the API's CIDR type.
func cidrs(list ...string) []networkv1alpha1.CIDR {
	out := make([]networkv1alpha1.CIDR, len(list))
	for i, s := range list {
		out[i] = networkv1alpha1.CIDR(s)
	}
	return out
}

// createNode creates the Node object with the node's Pod CIDRs, and writes its status as kubelet does when it
// registers: the InternalIP and a Ready condition, with the node's Lease (renewed from then on).
func (c *Cluster) createNode(ctx context.Context, n *Node) error {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: map[string]string{corev1.LabelHostname: n.Name}},
		Spec:       corev1.NodeSpec{PodCIDR: n.PodCIDR.String(), PodCIDRs: podCIDRs(n.PodCIDR, n.PodCIDRv6)},
	}
	if err := c.Client.Create(ctx, node); err != nil {
		return fmt.Errorf("creating Node %s: %w", n.Name, err)
	}
	// kube-controller-manager's node lifecycle writes the Node too (taints): retry on conflicts.
	for {
		node.Status.Addresses = nodeAddresses(n.Name, n.IP, n.IPv6, n.ipv6First)
		node.Status.Conditions = []corev1.NodeCondition{nodeReady(metav1.Now())}
		err := c.Client.Status().Update(ctx, node)
		if err == nil {
			break
		}
		if !apierrors.IsConflict(err) {
			return fmt.Errorf("writing the status of Node %s: %w", n.Name, err)
		}
		if err := c.Client.Get(ctx, client.ObjectKey{Name: n.Name}, node); err != nil {
			return fmt.Errorf("getting Node %s: %w", n.Name, err)
		}
	}
	if err := c.renewLease(ctx, n.Name); err != nil {
		return fmt.Errorf("creating the Lease of Node %s: %w", n.Name, err)
	}
	return nil
}

// agentArgs is the agent's command line.
func (n *Node) agentArgs() []string {
	bin := n.agentBinary
	if bin == "" {
		bin = filepath.Join(n.c.BinDir, "winnet-agent")
	}
	args := []string{
		bin, "--node-name", n.Name, "--kubeconfig", n.AgentKubeconfig(),
		"--ovsdb", n.OVS.DBSocket(), "--ovs-rundir", n.OVS.Dir, "--netns", n.NSPath,
		"--health-probe-bind-address", n.healthAddr, "--metrics-bind-address", "0",
		"--state-dir", n.StateDir, "--cni-socket", n.CNISocket, "--cni-conf-dir", n.CNIConfDir,
		"--audit-log-dir", n.AuditLogDir,
	}
	args = append(args, n.extraAgentArgs...)
	if n.kubelet != nil {
		// In the node's mount namespace, where containerd mounts the Pods' network namespaces; containerd's
		// task events start the simulator's sandboxes.
		args = n.kubelet.nsenter("", append(args, "--hns-sim-containerd", n.kubelet.socket())...)
	}
	return args
}

// freeLoopbackPort returns an address of the loopback with a port nothing listens on now.
func freeLoopbackPort() string {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return "0"
	}
	defer l.Close()
	return l.Addr().String()
}

// AgentReady asks the agent's /readyz, as kubelet's readiness probe of the agent's DaemonSet Pod does: nil
// when it answers 200.
func (n *Node) AgentReady() error {
	if n.healthAddr == "0" {
		return errors.New("the agent serves no readiness probe")
	}
	c := &http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + n.healthAddr + "/readyz")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz: %s: %s", resp.Status, body)
	}
	return nil
}

// AgentPID is the pid of the node's running agent process, 0 when none runs.
func (n *Node) AgentPID() int {
	if n.agent == nil || !n.agent.running() {
		return 0
	}
	return n.agent.cmd.Process.Pid
}

// AgentLog is the path of the agent's log.
func (n *Node) AgentLog() string { return filepath.Join(n.Dir, "winnet-agent.log") }

// StartAgent starts the node's winnet-agent process, with winnet-agent's credentials (a token bound to the
// node's Node object, see writeAgentKubeconfig).
func (n *Node) StartAgent() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.writeAgentKubeconfig(ctx); err != nil {
		return err
	}
	// With a kubelet the agent runs through nsenter, which keeps the environment it was given.
	p, err := n.c.reg.startProcessWithEnv("winnet-agent "+n.Name, filepath.Join(n.Dir, "winnet-agent.log"), n.agentEnv, n.agentArgs()...)
	if err != nil {
		return err
	}
	n.agent = p
	return nil
}

// SetAgentArgs replaces the arguments added to the agent's command line (NodeSpec.AgentArgs) from its next
// start (StartAgent, RestartAgent), and returns those it had.
func (n *Node) SetAgentArgs(args ...string) (previous []string) {
	previous, n.extraAgentArgs = n.extraAgentArgs, args
	return previous
}

// StopAgent stops the agent: SIGTERM, as a service manager stops it, or SIGKILL, as a crash or a reboot does.
func (n *Node) StopAgent(sig syscall.Signal) error {
	if n.agent == nil {
		return nil
	}
	return n.agent.stop(sig, 30*time.Second)
}

// KillAgent stops the running agent with sig — SIGKILL as a crash does, SIGTERM as a service manager does — and
// checks that it happened: it fails when the agent was not running, did not exit, or did not die of SIGKILL.
// It returns how the agent ended.
func (n *Node) KillAgent(sig syscall.Signal) (string, error) {
	if n.agent == nil {
		return "", fmt.Errorf("the agent of %s was never started", n.Name)
	}
	pid, err := n.agent.kill(sig, 30*time.Second)
	if err != nil {
		return "", fmt.Errorf("stopping the agent of %s with %v: %w", n.Name, sig, err)
	}
	return fmt.Sprintf("pid %d: %s", pid, n.agent.exitState()), nil
}

// SandboxDir is where the harness, playing containerd, starts the node's Pod sandboxes after ADD: the HNS
// simulator in the node's agent makes their endpoints' vNICs appear then.
func (n *Node) SandboxDir() string { return filepath.Join(n.StateDir, agent.SimSandboxDir) }

// RestartAgent stops the agent with SIGTERM and starts it again.
func (n *Node) RestartAgent() error {
	if err := n.StopAgent(syscall.SIGTERM); err != nil {
		return err
	}
	return n.StartAgent()
}

// PersistsHNSState reports whether the agent keeps the HNS simulator's state in its state directory, as HNS
// keeps its state across agent restarts.
func (n *Node) PersistsHNSState() bool {
	_, err := os.Stat(filepath.Join(n.StateDir, HNSStateFile))
	return err == nil
}

// AgentRunning reports whether the agent process runs.
func (n *Node) AgentRunning() bool { return n.agent != nil && n.agent.running() }

// Exec runs a command inside the node's namespace.
func (n *Node) Exec(args ...string) (string, error) { return simnode.Exec(n.NS, args...) }

// Flows returns the flows of the node's bridge.
func (n *Node) Flows() (string, error) {
	lines, err := n.OVS.DumpFlows(BridgeName)
	return strings.Join(lines, "\n"), err
}

// Reboot simulates a reboot of a Windows node while the rest of the cluster runs: the agent dies, then the HNS
// simulator does what a Windows boot does (hns.Sim.Reboot): networks and endpoints are gone with their vNICs and
// veths, the adapter has its own IP configuration again and the OVS extension state is gone with the switch,
// while OVS keeps the bridge and its ports in its database. Then the agent starts again, as it does at boot; it
// must heal the node without help.
func (n *Node) Reboot() error {
	if _, err := n.KillAgent(syscall.SIGKILL); err != nil {
		return err
	}
	sim, err := hns.NewLinuxSim(hns.LinuxSimOptions{HostNetNS: n.NSPath, StateFile: filepath.Join(n.StateDir, HNSStateFile),
		SandboxDir: n.SandboxDir()})
	if err != nil {
		return fmt.Errorf("opening the node's HNS simulator: %w", err)
	}
	err = sim.Reboot(context.Background())
	if cerr := sim.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("rebooting the node's HNS: %w", err)
	}
	return n.StartAgent()
}

// UpdateNetwork edits the node's WindowsNodeNetwork, retrying on conflicts.
func (c *Cluster) UpdateNetwork(ctx context.Context, name string, edit func(*networkv1alpha1.WindowsNodeNetwork)) error {
	for {
		w := &networkv1alpha1.WindowsNodeNetwork{}
		if err := c.Client.Get(ctx, client.ObjectKey{Name: name}, w); err != nil {
			return fmt.Errorf("getting WindowsNodeNetwork %s: %w", name, err)
		}
		edit(w)
		err := c.Client.Update(ctx, w)
		if !apierrors.IsConflict(err) {
			return err
		}
	}
}

// Network returns the node's WindowsNodeNetwork.
func (c *Cluster) Network(ctx context.Context, name string) (*networkv1alpha1.WindowsNodeNetwork, error) {
	w := &networkv1alpha1.WindowsNodeNetwork{}
	return w, c.Client.Get(ctx, client.ObjectKey{Name: name}, w)
}

// ready reports nil when the node's network is Ready and reached the routes to every other node, with the
// reason otherwise.
func (c *Cluster) ready(ctx context.Context, n *Node, routes int32) error {
	if n.agent != nil && !n.agent.running() {
		return fmt.Errorf("the agent of %s exited; last lines of its log:\n%s", n.Name, n.agent.logTail(30))
	}
	w, err := c.Network(ctx, n.Name)
	if err != nil {
		return err
	}
	cond := meta.FindStatusCondition(w.Status.Conditions, networkv1alpha1.ReadyCondition)
	switch {
	case cond == nil:
		return fmt.Errorf("%s: no Ready condition yet", n.Name)
	case cond.Status != metav1.ConditionTrue:
		return fmt.Errorf("%s: Ready=%s %s: %s", n.Name, cond.Status, cond.Reason, cond.Message)
	case cond.ObservedGeneration != w.Generation:
		return fmt.Errorf("%s: Ready is for generation %d, the spec is at %d", n.Name, cond.ObservedGeneration, w.Generation)
	case w.Status.RemoteRoutes.Installed != routes || w.Status.RemoteRoutes.Desired != routes:
		return fmt.Errorf("%s: %d of %d remote routes installed, want %d", n.Name,
			w.Status.RemoteRoutes.Installed, w.Status.RemoteRoutes.Desired, routes)
	}
	return nil
}

// WaitReady waits until every node is Ready with a route to every other node (and to every flannel node, when
// SetRoutesToFlannelNodes said winnet-controller writes them).
func (c *Cluster) WaitReady(ctx context.Context, timeout time.Duration) error {
	nodes := c.Nodes()
	routes := len(nodes) - 1
	c.mu.Lock()
	if c.routesToFlannel {
		routes += len(c.flannelNodes)
	}
	c.mu.Unlock()
	return waitFor(timeout, 200*time.Millisecond, func() error {
		var errs []error
		for _, n := range nodes {
			errs = append(errs, c.ready(ctx, n, int32(routes)))
		}
		return errors.Join(errs...)
	})
}

// RemoveNode deletes a node the way an operator takes it out of a winnet cluster: its WindowsNodeNetwork is
// deleted and its agent gives the host its network back, then its Node object goes (winnet-controller deletes
// its route, every other agent removes it), then the agent, Open vSwitch and namespace go. The network goes
// first because the agent's credentials go with the Node: its token is bound to it, as a DaemonSet Pod's is
// bound to the Pod on it, and the API server refuses a token whose Node is gone.
func (c *Cluster) RemoveNode(ctx context.Context, name string) error {
	n := c.Node(name)
	if n == nil {
		return fmt.Errorf("no node %s", name)
	}
	if err := c.DeleteNetwork(ctx, name, 30*time.Second); err != nil {
		return err
	}
	if err := c.Client.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting Node %s: %w", name, err)
	}
	c.mu.Lock()
	delete(c.nodes, name)
	c.mu.Unlock()
	err := n.stop()
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: name}}
	if lerr := c.Client.Delete(ctx, lease); lerr != nil && !apierrors.IsNotFound(lerr) {
		err = errors.Join(err, fmt.Errorf("deleting the Lease of Node %s: %w", name, lerr))
	}
	for _, h := range []*Host{c.External, c.APIHost} {
		err = errors.Join(err, run(h.NS, []string{"ip", "route", "del", n.PodCIDR.String()}))
	}
	return err
}

// DeleteNetwork deletes the node's WindowsNodeNetwork and waits until its agent has released it (the finalizer
// gives the host its network back).
func (c *Cluster) DeleteNetwork(ctx context.Context, name string, timeout time.Duration) error {
	w := &networkv1alpha1.WindowsNodeNetwork{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := c.Client.Delete(ctx, w); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting WindowsNodeNetwork %s: %w", name, err)
	}
	return waitFor(timeout, 100*time.Millisecond, func() error {
		err := c.Client.Get(ctx, client.ObjectKey{Name: name}, w)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("WindowsNodeNetwork %s is still there (finalizers %v): %v", name, w.Finalizers, err)
	})
}

// stop stops the agent and Open vSwitch and deletes the namespace; the Pods of the node go with it.
func (n *Node) stop() error {
	var errs []error
	if n.kubelet != nil {
		errs = append(errs, n.kubelet.stop())
	}
	errs = append(errs, n.StopAgent(syscall.SIGTERM))
	for _, p := range n.c.podsOf(n.Name) {
		errs = append(errs, n.c.forgetPod(p))
	}
	if n.OVS != nil {
		n.OVS.Stop()
	}
	errs = append(errs, deleteNS(n.NS))
	return errors.Join(errs...)
}

// SwitchEvents returns the lines of the node's ovs-vswitchd log since t that say a port was added or deleted
// or that are warnings or errors, for a test to print when a packet was lost: on the userspace datapath the
// tests run, adding or deleting any port makes ovs-vswitchd reconfigure its datapath, and packets of other
// ports' flows in flight then can be lost (measured with an `ovs-vsctl add-port`/`del-port` of an unrelated
// internal port and no agent involved: 2 of 900 pings at 10 ms per 8 port changes). The Windows extension
// adds and removes switch ports without reconfiguring a poll loop, so this says whether a lost packet is this
// substrate's.
func (n *Node) SwitchEvents(t time.Time) []string {
	b, err := os.ReadFile(filepath.Join(n.OVS.Dir, "ovs-vswitchd.log"))
	if err != nil {
		return []string{fmt.Sprintf("%s: reading ovs-vswitchd's log: %v", n.Name, err)}
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		// 2026-11-25T15:54:04.502Z|00061|bridge|INFO|bridge br-int: deleted interface winnet-tun0 on port 32768
		stamp, rest, ok := strings.Cut(l, "|")
		at, err := time.Parse("2006-01-02T15:04:05.000Z", stamp)
		if !ok || err != nil || at.Before(t) {
			continue
		}
		if strings.Contains(rest, "added interface") || strings.Contains(rest, "deleted interface") ||
			((strings.Contains(rest, "|WARN|") || strings.Contains(rest, "|ERR|")) && !strings.Contains(rest, "enumerate system datapaths")) {
			lines = append(lines, n.Name+": "+l)
		}
	}
	return lines
}

// SwitchEvents returns every node's SwitchEvents since t.
func (c *Cluster) SwitchEvents(t time.Time) []string {
	var lines []string
	for _, n := range c.Nodes() {
		lines = append(lines, n.SwitchEvents(t)...)
	}
	return lines
}
