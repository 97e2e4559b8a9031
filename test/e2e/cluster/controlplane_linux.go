//go:build linux

package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/simnode"
)

// The cluster's Service network, as kubeadm sets it up: the API server allocates ClusterIPs from ServiceCIDR,
// the kubernetes Service takes its first address, kube-dns (CoreDNS, see StartDNS) a fixed one.
var (
	ServiceCIDR         = netip.MustParsePrefix("10.96.0.0/12")
	KubernetesServiceIP = netip.MustParseAddr("10.96.0.1")
	DNSServiceIP        = netip.MustParseAddr("10.96.0.10")
)

// ClusterDomain is the DNS domain of the cluster's Services (kubelet's --cluster-domain).
const ClusterDomain = "cluster.local"

// leaseRenewInterval is how often the harness renews each Node's Lease, as kubelet does (every 10 s, a quarter
// of its 40 s duration); node lifecycle marks a Node whose Lease is older than its grace period (50 s) unknown
// and evicts its Pods.
const (
	leaseRenewInterval = 10 * time.Second
	leaseDuration      = 40
)

// startAPIHost plugs the API server's host into the underlay: a namespace holding APIHostIP that the kubernetes
// Service's endpoint names. The API server runs in the harness's namespace and listens on the loopback; a relay
// in the API host's namespace carries each connection to it, so that Pods reach the real API server over the
// underlay as they reach a control-plane node's. The host routes every Pod CIDR to its node, as a cluster
// member's CNI does (replies to Pods go back to them, not through the underlay's gateway).
func (c *Cluster) startAPIHost() error {
	bits := c.UnderlayCIDR.Bits()
	h := &Host{Name: "apiserver", NS: c.Prefix + "-api", IP: netip.PrefixFrom(c.UnderlayGateway.Next(), bits)}
	h.NSPath = nsPath(h.NS)
	if err := addNS(h.NS); err != nil {
		return err
	}
	if err := plug(c.UnderlayNS, h.NS, hostIfName, c.nextPort(), h.IP, c.UnderlayGateway); err != nil {
		return err
	}
	if err := c.addUnderlayV6(h.NS, hostIfName, h.IP.Addr()); err != nil {
		return err
	}
	if err := simnode.DisableTxChecksum(h.NS, hostIfName); err != nil {
		return err
	}
	c.APIHost = h
	return nil
}

// apiServerArgs make the API server advertise the API host's address (the endpoint of the kubernetes
// Service) and allocate ClusterIPs from ServiceCIDR (and ServiceCIDRv6 in a dual-stack cluster).
func (c *Cluster) apiServerArgs() (map[string]string, error) {
	args := map[string]string{
		"advertise-address":        c.APIHost.IP.Addr().String(),
		"service-cluster-ip-range": c.serviceCIDRs(),
	}
	if c.opts.Kubelets {
		// exec, logs and proxy reach the kubelets at their InternalIP, through the egress proxy.
		egress, err := c.egressConfig()
		if err != nil {
			return nil, err
		}
		args["kubelet-preferred-address-types"] = "InternalIP"
		args["egress-selector-config-file"] = egress
	}
	for name, value := range c.opts.APIServerArgs {
		args[name] = value
	}
	return args, nil
}

// startAPIRelay listens on the API host's address at the API server's port and relays every connection to the
// API server. TLS goes through untouched: clients talk to the real API server.
func (c *Cluster) startAPIRelay() error {
	u, err := url.Parse(c.api.Config.Host)
	if err != nil {
		return fmt.Errorf("parsing the API server's address %q: %w", c.api.Config.Host, err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		return fmt.Errorf("the API server's address %q has no port: %w", c.api.Config.Host, err)
	}
	c.APIServerPort = port
	var l net.Listener
	err = ns.WithNetNSPath(c.APIHost.NSPath, func(ns.NetNS) error {
		var err error
		l, err = net.Listen("tcp4", netip.AddrPortFrom(c.APIHost.IP.Addr(), uint16(port)).String())
		return err
	})
	if err != nil {
		return fmt.Errorf("listening for the API server on its host: %w", err)
	}
	c.relay = l
	target := u.Host
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go relay(conn, target)
		}
	}()
	return nil
}

// relay copies between conn and a new connection to target until either side closes.
func relay(conn net.Conn, target string) {
	defer conn.Close()
	up, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		return
	}
	defer up.Close()
	var wg sync.WaitGroup
	wg.Add(2)
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}
	go pipe(up, conn)
	go pipe(conn, up)
	wg.Wait()
}

// startControllerManager starts the real kube-controller-manager with the controllers a cluster's Services
// rely on: EndpointSlices from Services and Pods (and mirrored from Endpoints), node lifecycle with taint-based
// eviction (so the harness must keep the Nodes Ready, see renewLeases), and the ServiceAccounts of namespaces.
// It uses the admin kubeconfig, serves no port (several runs share the machine) and does not elect a leader.
func (c *Cluster) startControllerManager() error {
	assets, err := framework.AssetsDir()
	if err != nil {
		return err
	}
	bin := filepath.Join(assets, "kube-controller-manager")
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("kube-controller-manager is missing in %s: run hack/setup-test-deps.sh (make test-deps): %w", assets, err)
	}
	c.logf("Starting kube-controller-manager")
	controllers := "endpointslice,endpointslicemirroring,nodelifecycle,taint-eviction-controller,serviceaccount"
	args := []string{bin, "--kubeconfig", c.Kubeconfig, "--leader-elect=false", "--secure-port=0",
		"--service-cluster-ip-range", c.serviceCIDRs(), "--cluster-cidr", c.clusterCIDRs()}
	if c.opts.Kubelets {
		// What Pods made through the API need: their namespace's lifecycle, owners (Deployments, ReplicaSets,
		// StatefulSets) and the kube-root-ca.crt ConfigMap every Pod mounts.
		controllers += ",namespace-controller,garbage-collector-controller,pod-garbage-collector-controller,replicaset-controller,deployment-controller,statefulset-controller,endpoints-controller,root-ca-certificate-publisher-controller"
		args = append(args, "--root-ca-file", c.CAFile)
	}
	p, err := c.reg.startProcess("kube-controller-manager", filepath.Join(c.RunDir, "kube-controller-manager.log"), false,
		append(append(args, "--controllers="+controllers), c.opts.ControllerManagerArgs...)...)
	if err != nil {
		return err
	}
	c.controllerManager = p
	return nil
}

// nodeReady is the Ready condition kubelet reports for a healthy node.
func nodeReady(now metav1.Time) corev1.NodeCondition {
	return corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		Message: "kubelet is posting ready status (simulated by the e2e harness)", LastHeartbeatTime: now, LastTransitionTime: now}
}

// renewLease creates or renews the node's Lease in kube-node-lease, as kubelet's heartbeat does.
func (c *Cluster) renewLease(ctx context.Context, name string) error {
	now := metav1.NewMicroTime(time.Now())
	lease := &coordinationv1.Lease{}
	err := c.Client.Get(ctx, client.ObjectKey{Namespace: corev1.NamespaceNodeLease, Name: name}, lease)
	if apierrors.IsNotFound(err) {
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: name},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To[int32](leaseDuration),
				RenewTime: &now},
		}
		return c.Client.Create(ctx, lease)
	}
	if err != nil {
		return err
	}
	lease.Spec.RenewTime = &now
	return c.Client.Update(ctx, lease)
}

// renewLeases renews every node's Lease every leaseRenewInterval until stop is closed.
func (c *Cluster) renewLeases(stop <-chan struct{}) {
	t := time.NewTicker(leaseRenewInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		for _, n := range c.Nodes() {
			if n.HasKubelet() {
				continue // its kubelet renews it
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := c.renewLease(ctx, n.Name); err != nil {
				c.logf("Renewing the Lease of Node %s: %v", n.Name, err)
			}
			cancel()
		}
	}
}

// SetPodReady writes the Pod's status as kubelet does once its containers run: phase Running, its node's and
// its own IPs, and the Ready condition (ready is what the readiness probe says). kube-controller-manager puts
// a ready Pod's address in the EndpointSlices of the Services that select it.
func (c *Cluster) SetPodReady(ctx context.Context, p *Pod, ready bool) error {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	hostIP, hostIPs := "", []corev1.HostIP(nil)
	if n := c.Node(p.Node); n != nil {
		hostIP = n.IP.String()
		for _, ip := range []netip.Addr{n.IP, n.IPv6} {
			if ip.IsValid() {
				hostIPs = append(hostIPs, corev1.HostIP{IP: ip.String()})
			}
		}
	}
	for {
		pod := &corev1.Pod{}
		if err := c.Client.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: p.Name}, pod); err != nil {
			return fmt.Errorf("getting Pod %s/%s: %w", p.Namespace, p.Name, err)
		}
		now := metav1.Now()
		pod.Status.Phase = corev1.PodRunning
		pod.Status.HostIP, pod.Status.HostIPs = hostIP, hostIPs
		pod.Status.PodIP, pod.Status.PodIPs = p.IP.String(), []corev1.PodIP{{IP: p.IP.String()}}
		if pod.Status.StartTime == nil {
			pod.Status.StartTime = &now
		}
		pod.Status.Conditions = []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: status, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: status, LastTransitionTime: now},
		}
		pod.Status.ContainerStatuses = nil
		for _, ct := range pod.Spec.Containers {
			pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{
				Name: ct.Name, Image: ct.Image, Ready: ready, Started: ptr.To(true),
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
			})
		}
		err := c.Client.Status().Update(ctx, pod)
		if !apierrors.IsConflict(err) {
			if err != nil {
				return fmt.Errorf("writing the status of Pod %s/%s: %w", p.Namespace, p.Name, err)
			}
			return nil
		}
	}
}

// stopControlPlaneExtras stops what Start added around the API server: the lease renewal, the relay,
// CoreDNS and kube-controller-manager.
func (c *Cluster) stopControlPlaneExtras() error {
	if c.stopLeases != nil {
		close(c.stopLeases)
		c.stopLeases = nil
	}
	var errs []error
	if c.relay != nil {
		errs = append(errs, ignoreClosed(c.relay.Close()))
	}
	if c.egress != nil {
		errs = append(errs, ignoreClosed(c.egress.Close()))
	}
	for _, p := range []*process{c.dns, c.scheduler, c.controllerManager} {
		if p != nil {
			errs = append(errs, p.stop(syscall.SIGTERM, 10*time.Second))
		}
	}
	return errors.Join(errs...)
}

func ignoreClosed(err error) error {
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
