//go:build linux

package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/containernetworking/cni/libcni"
	cnitypes "github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/hns"
	"github.com/winnet-io/winnet/internal/hostport"
	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/simnode"
)

const (
	// ConflistName is the file the agent writes into its CNI configuration directory.
	ConflistName = "10-winnet.conflist"
	// PodNamespace is the Kubernetes namespace of the Pods the harness creates.
	PodNamespace = "default"
	podIfName    = "eth0"
)

// cniPluginDirs are searched for plugins after the harness's BinDir (where winnet-cni is).
var cniPluginDirs = []string{"/opt/cni/bin", "/usr/lib/cni"}

// Pod is a Pod sandbox: a network namespace set up through the winnet-cni shim by libcni, as containerd does,
// with a Pod object bound to its node.
type Pod struct {
	Name        string
	Namespace   string
	Node        string
	NS          string
	NSPath      string
	ContainerID string
	IP          netip.Addr
	// Result is the CNI result of ADD.
	Result *types100.Result

	uid          string
	dnsPolicy    corev1.DNSPolicy
	portMappings []hostport.PortMapping
}

// Exec runs a command inside the Pod's namespace.
func (p *Pod) Exec(args ...string) (string, error) { return simnode.Exec(p.NS, args...) }

// PodOptions shape the Pod object AddPodWith creates and what the runtime passes to CNI.
type PodOptions struct {
	// Namespace of the Pod; empty is PodNamespace. Pod names are unique across namespaces in the harness.
	Namespace string
	// Labels of the Pod, for the selectors of Services.
	Labels map[string]string
	// Ports are the container's ports; a Service's named targetPort resolves through their names.
	Ports []corev1.ContainerPort
	// DNSPolicy is the Pod's dnsPolicy: ClusterFirst (empty) has the runtime give CNI the cluster DNS
	// (runtimeConfig.dns: kube-dns's ClusterIP, the search list of the Pod's namespace, ndots:5), as kubelet
	// does; Default gives none (the node's resolver, as CoreDNS's own Pod has).
	DNSPolicy corev1.DNSPolicy
	// NotReady leaves the Pod's Ready condition False (a readiness probe that has not passed yet): Services
	// do not send it traffic until SetPodReady.
	NotReady bool
	// PortMappings are the Pod's hostPorts as the runtime passes them (the "portMappings"
	// capability: runtimeConfig.portMappings).
	PortMappings []hostport.PortMapping
}

// AddPod creates a Pod object in PodNamespace on the node, its network namespace, and calls CNI ADD with the
// configuration the node's agent wrote, waiting up to confTimeout for that configuration (the agent writes it
// once the node network is Ready). Then it writes the Pod's status (running, its IP, Ready) as kubelet does.
func (c *Cluster) AddPod(ctx context.Context, node *Node, name string, confTimeout time.Duration) (*Pod, error) {
	return c.AddPodWith(ctx, node, name, PodOptions{}, confTimeout)
}

// AddPodWith is AddPod with options.
func (c *Cluster) AddPodWith(ctx context.Context, node *Node, name string, opts PodOptions, confTimeout time.Duration) (*Pod, error) {
	p, err := c.NewPod(ctx, node, name, opts)
	if err != nil {
		return p, err
	}
	if err := c.CNIAdd(ctx, p, confTimeout); err != nil {
		return p, err
	}
	if err := c.WaitPodForwarding(ctx, p, confTimeout); err != nil {
		return p, err
	}
	if err := c.SetPodReady(ctx, p, !opts.NotReady); err != nil {
		return p, err
	}
	c.logf("Pod %s on %s has IP %s", name, node.Name, p.IP)
	return p, nil
}

// NewPod creates the Pod object on the node and its network namespace, as kubelet and the runtime do
// before they call CNI; CNIAdd attaches it.
func (c *Cluster) NewPod(ctx context.Context, node *Node, name string, opts PodOptions) (*Pod, error) {
	if opts.Namespace == "" {
		opts.Namespace = PodNamespace
	}
	if opts.DNSPolicy == "" {
		opts.DNSPolicy = corev1.DNSClusterFirst
	}
	p := &Pod{Name: name, Namespace: opts.Namespace, Node: node.Name, NS: c.Prefix + "-" + node.Name + "-" + name,
		dnsPolicy: opts.DNSPolicy, portMappings: opts.PortMappings}
	p.NewSandbox()
	p.NSPath = nsPath(p.NS)
	c.mu.Lock()
	if _, ok := c.pods[name]; ok {
		c.mu.Unlock()
		return nil, fmt.Errorf("pod %s exists", name)
	}
	c.pods[name] = p
	c.mu.Unlock()

	obj := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: opts.Namespace, Labels: opts.Labels},
		Spec: corev1.PodSpec{
			NodeName:   node.Name,
			DNSPolicy:  opts.DNSPolicy,
			Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10", Ports: opts.Ports}},
		},
	}
	if err := c.Client.Create(ctx, obj); err != nil {
		return p, fmt.Errorf("creating Pod %s: %w", name, err)
	}
	p.uid = string(obj.UID)
	return p, addNS(p.NS)
}

// NewSandbox gives the Pod a new sandbox (container ID), as kubelet does after a sandbox whose ADD failed
// was torn down.
func (p *Pod) NewSandbox() {
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	p.ContainerID = hex.EncodeToString(id)
}

// CNIAdd calls CNI ADD for the Pod's sandbox with the configuration the node's agent wrote (waiting up to
// confTimeout for it), records the Pod's IP and starts the sandbox, as containerd does once ADD returned:
// only then does the endpoint's vNIC appear, and the agent binds it to the Pod's port.
func (c *Cluster) CNIAdd(ctx context.Context, p *Pod, confTimeout time.Duration) error {
	node := c.Node(p.Node)
	if node == nil {
		return fmt.Errorf("no node %s for Pod %s", p.Node, p.Name)
	}
	list, err := node.waitConflist(confTimeout)
	if err != nil {
		return err
	}
	res, err := c.cniConfig(node).AddNetworkList(ctx, list, p.runtimeConf())
	if err != nil {
		return fmt.Errorf("CNI ADD of Pod %s on %s: %w", p.Name, node.Name, err)
	}
	if p.Result, err = types100.NewResultFromResult(res); err != nil {
		return fmt.Errorf("converting the CNI result of Pod %s: %w", p.Name, err)
	}
	if len(p.Result.IPs) == 0 {
		return fmt.Errorf("the CNI result of Pod %s has no IP: %+v", p.Name, p.Result)
	}
	ip, ok := netip.AddrFromSlice(p.Result.IPs[0].Address.IP.To4())
	if !ok {
		return fmt.Errorf("the CNI result of Pod %s has no IPv4 address: %v", p.Name, p.Result.IPs[0].Address)
	}
	p.IP = ip
	return hns.StartSandbox(node.SandboxDir(), p.NSPath)
}

// CNIDel calls CNI DEL once for the Pod's sandbox and stops the sandbox; the Pod stays (DeletePod removes it).
func (c *Cluster) CNIDel(ctx context.Context, p *Pod) error {
	n := c.Node(p.Node)
	if n == nil {
		return fmt.Errorf("no node %s for Pod %s", p.Node, p.Name)
	}
	list, err := n.waitConflist(0)
	if err != nil {
		return err
	}
	if err := c.cniConfig(n).DelNetworkList(ctx, list, p.runtimeConf()); err != nil {
		return fmt.Errorf("CNI DEL of Pod %s: %w", p.Name, err)
	}
	return hns.StopSandbox(n.SandboxDir(), p.NSPath)
}

// DeletePod calls CNI DEL, deletes the Pod object and the namespace.
func (c *Cluster) DeletePod(ctx context.Context, p *Pod) error {
	var errs []error
	if n := c.Node(p.Node); n != nil {
		if list, err := n.waitConflist(0); err == nil {
			if err := c.delWithRetry(ctx, n, list, p); err != nil {
				errs = append(errs, fmt.Errorf("CNI DEL of Pod %s: %w", p.Name, err))
			}
		}
	}
	if n := c.Node(p.Node); n != nil {
		if err := hns.StopSandbox(n.SandboxDir(), p.NSPath); err != nil {
			errs = append(errs, err)
		}
	}
	// No kubelet confirms a graceful deletion here: delete at once.
	err := c.Client.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}},
		client.GracePeriodSeconds(0))
	if err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("deleting Pod %s: %w", p.Name, err))
	}
	return errors.Join(append(errs, c.forgetPod(p))...)
}

// delRetryTimeout bounds how long DeletePod calls DEL again while the plugin answers "try again later" (a
// hung HNS endpoint delete), as kubelet keeps tearing a sandbox down until DEL succeeds.
const delRetryTimeout = 30 * time.Second

// delWithRetry calls CNI DEL until it succeeds, fails otherwise than with ErrTryAgainLater, or
// delRetryTimeout passed.
func (c *Cluster) delWithRetry(ctx context.Context, n *Node, list *libcni.NetworkConfigList, p *Pod) error {
	deadline := time.Now().Add(delRetryTimeout)
	for {
		err := c.cniConfig(n).DelNetworkList(ctx, list, p.runtimeConf())
		var cniErr *cnitypes.Error
		if err == nil || !errors.As(err, &cniErr) || cniErr.Code != cnitypes.ErrTryAgainLater || time.Now().After(deadline) {
			return err
		}
		c.logf("CNI DEL of Pod %s: %v; calling DEL again, as kubelet does", p.Name, err)
		time.Sleep(500 * time.Millisecond)
	}
}

// forgetPod deletes the Pod's namespace and forgets it.
func (c *Cluster) forgetPod(p *Pod) error {
	c.mu.Lock()
	delete(c.pods, p.Name)
	c.mu.Unlock()
	return deleteNS(p.NS)
}

func (c *Cluster) podsOf(node string) []*Pod {
	c.mu.Lock()
	defer c.mu.Unlock()
	var pods []*Pod
	for _, p := range c.pods {
		if p.Node == node {
			pods = append(pods, p)
		}
	}
	return pods
}

// runtimeConf is what containerd passes for the Pod's sandbox: with dnsPolicy ClusterFirst, the DNS settings
// kubelet gives the sandbox (the "dns" capability of the conflist).
func (p *Pod) runtimeConf() *libcni.RuntimeConf {
	var caps map[string]any
	if p.dnsPolicy == corev1.DNSClusterFirst {
		caps = map[string]any{"dns": map[string]any{
			"servers":  []string{DNSServiceIP.String()},
			"searches": []string{p.Namespace + ".svc." + ClusterDomain, "svc." + ClusterDomain, ClusterDomain},
			"options":  []string{"ndots:5"},
		}}
	}
	if len(p.portMappings) > 0 {
		if caps == nil {
			caps = map[string]any{}
		}
		caps["portMappings"] = p.portMappings
	}
	return &libcni.RuntimeConf{
		ContainerID:    p.ContainerID,
		NetNS:          p.NSPath,
		IfName:         podIfName,
		CapabilityArgs: caps,
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", p.Namespace},
			{"K8S_POD_NAME", p.Name},
			{"K8S_POD_INFRA_CONTAINER_ID", p.ContainerID},
			{"K8S_POD_UID", p.uid},
		},
	}
}

func (c *Cluster) cniConfig(n *Node) *libcni.CNIConfig {
	return libcni.NewCNIConfigWithCacheDir(append([]string{n.shimDir}, cniPluginDirs...), filepath.Join(n.Dir, "cni-cache"), nil)
}

// waitConflist waits up to timeout for the agent's CNI configuration and loads it.
func (n *Node) waitConflist(timeout time.Duration) (*libcni.NetworkConfigList, error) {
	path := filepath.Join(n.CNIConfDir, ConflistName)
	var list *libcni.NetworkConfigList
	err := waitFor(timeout, 100*time.Millisecond, func() error {
		if _, err := os.Stat(path); err != nil {
			return fmt.Errorf("the agent of %s has not written %s: %w", n.Name, path, err)
		}
		var err error
		list, err = libcni.ConfListFromFile(path)
		return err
	})
	return list, err
}

// WaitPodForwarding waits until the Pod's PodEndpoint is Ready for its sandbox: its port is bound to the vNIC
// and forwards.
func (c *Cluster) WaitPodForwarding(ctx context.Context, p *Pod, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		pep, err := framework.PodEndpointOf(ctx, c.Client, p.Namespace, p.Name)
		if err == nil {
			if cond := meta.FindStatusCondition(pep.Status.Conditions, networkv1alpha1.ReadyCondition); cond != nil &&
				cond.Status == metav1.ConditionTrue && pep.Spec.SandboxID == p.ContainerID {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the port of Pod %s did not forward within %s of its sandbox starting (PodEndpoint: %v)", p.Name, timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
