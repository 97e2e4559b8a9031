package agent

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/winnet-io/winnet/controllers/egress"
	"github.com/winnet-io/winnet/controllers/nodenetwork"
	"github.com/winnet-io/winnet/controllers/packettrace"
	"github.com/winnet-io/winnet/controllers/podendpoint"
	"github.com/winnet-io/winnet/controllers/remoteroute"
	"github.com/winnet-io/winnet/controllers/service"
	"github.com/winnet-io/winnet/internal/auditlog"
	"github.com/winnet-io/winnet/internal/cni"
	"github.com/winnet-io/winnet/internal/hostnet"
	"github.com/winnet-io/winnet/internal/hostport"
	"github.com/winnet-io/winnet/internal/ovs/ovsdb"
)

// HostOptions say where the agent finds the host's Open vSwitch.
type HostOptions struct {
	// OVSDBAddress is ovsdb-server's socket (Linux) or named pipe (Windows); empty means the
	// platform default.
	OVSDBAddress string
	// OVSRunDir is Open vSwitch's rundir, where it serves the bridges' OpenFlow management
	// connections: the socket <dir>/<bridge>.mgmt on Linux, the named pipe named after that path on
	// Windows (see openFlowAddress); empty means the platform default.
	OVSRunDir string
	// NetNSPath, on Linux, is the network namespace the agent manages instead of its own: a
	// simulated node whose agent runs beside the API server (tests, the demo, benchmarks).
	NetNSPath string
	// CNISocket is where the agent serves the CNI shim; empty means cni.DefaultAddress.
	CNISocket string
	// CNIConfDir receives the conflist; empty means DefaultCNIConfDir.
	CNIConfDir string
	// StateDir holds the agent's state (IPAM allocations, Pod attachments); empty means
	// DefaultStateDir.
	StateDir string
	// CNIShimPath is the winnet-cni binary winnet installed (the Helm chart's install-cni copy),
	// removed with the node's last sandbox when the node network is torn down (cni.Retirement.Shim);
	// empty leaves the shim alone.
	CNIShimPath string
	// HNSSimLatency, on Linux, is added to every call of the HNS simulator, so that a benchmark
	// can run with HNS's own latency (hidden flag --hns-sim-latency).
	HNSSimLatency time.Duration
	// HNSSimContainerd, on Linux, is the socket of the containerd whose task events tell the HNS
	// simulator which Pod sandboxes run (hns.ContainerdSandboxes): a simulated node with a real
	// kubelet and containerd (hidden flag --hns-sim-containerd). Empty: a test harness tells it.
	HNSSimContainerd string
	// AuditLog configures the audit log of policy decisions (internal/auditlog); its Dir empty
	// turns it off: no policy is audited, whatever its annotations say. Node is set here.
	AuditLog auditlog.Options
	// LeaseNamespace is winnet's namespace, where the agent renews its node's Egress Lease
	// (egress.LeaseName); empty means the Pod's namespace, else DefaultNamespace.
	LeaseNamespace string
	// EgressLeaseDuration is the fencing bound of egress IPs (egress.Fence): zero means
	// egress.DefaultLeaseDuration; EgressLeaseRenewInterval how often the Lease is renewed, zero
	// meaning egress.DefaultLeaseRenewInterval.
	EgressLeaseDuration, EgressLeaseRenewInterval time.Duration
	// ReservedPorts are ports of the agent itself (health, metrics) that no hostPort may take,
	// besides hostport.DefaultReserved and the node's tunnel port.
	ReservedPorts []hostport.Reserved
}

func (o HostOptions) withDefaults() HostOptions {
	if o.CNISocket == "" {
		o.CNISocket = cni.DefaultAddress
	}
	if o.CNIConfDir == "" {
		o.CNIConfDir = DefaultCNIConfDir
	}
	if o.StateDir == "" {
		o.StateDir = DefaultStateDir
	}
	if o.LeaseNamespace == "" {
		o.LeaseNamespace = PodNamespace()
	}
	if o.EgressLeaseDuration == 0 {
		o.EgressLeaseDuration = egress.DefaultLeaseDuration
	}
	if o.EgressLeaseRenewInterval == 0 {
		o.EgressLeaseRenewInterval = egress.DefaultLeaseRenewInterval
	}
	return o
}

// SetupNodeNetwork connects to the host's Open vSwitch and HNS and registers the node network,
// remote route and Pod network (CNI server, PodEndpoint reconciler) with the manager. The
// connections live as long as ctx.
//
// Call freeze first when the agent is told to stop, and only then end the manager's context: from
// then on nothing changes the node's switch (openflow.Bridge.Freeze). The manager stops the
// informers the reconcilers read before the reconcilers themselves, and a pass computed meanwhile
// (a NetworkPolicy peer set that looks empty) must not reach the switch: it keeps forwarding with
// what it has until the next agent takes over.
func SetupNodeNetwork(ctx context.Context, mgr ctrl.Manager, nodeName string, opts HostOptions) (freeze func(), err error) {
	opts = opts.withDefaults()
	if err := protectDirectories(ctx, mgr.GetClient(), nodeName, opts); err != nil {
		return nil, err
	}
	db, err := ovsdb.New(ctx, ovsdb.Options{Address: opts.OVSDBAddress, SocketDir: filepath.Join(opts.StateDir, "run")})
	if err != nil {
		return nil, fmt.Errorf("connecting to ovsdb-server: %w", err)
	}
	hnsClient, err := newHNS(opts)
	if err != nil {
		return nil, err
	}
	netClient, err := hostnet.New(hostnet.Options{NetNSPath: opts.NetNSPath})
	if err != nil {
		return nil, fmt.Errorf("opening the host network stack: %w", err)
	}
	host := nodenetwork.Host{HNS: hnsClient, OVSDB: db, Net: netClient, StateDir: opts.StateDir}
	if opts.OVSRunDir != "" {
		host.OpenFlowAddress = func(bridge string) string { return openFlowAddress(opts.OVSRunDir, bridge) }
	}
	state := nodenetwork.NewState()
	// Ready (/readyz) once the node's flows are whole: the DaemonSet's rollout waits for it before it
	// restarts the next node's agent.
	if err := mgr.AddReadyzCheck("flows", func(*http.Request) error { return state.FlowsInstalled() }); err != nil {
		return nil, fmt.Errorf("adding the readiness check of the node's flows: %w", err)
	}
	recorder, err := NewEventRecorder(mgr, nodeName)
	if err != nil {
		return nil, err
	}
	nodes := &nodenetwork.Reconciler{
		Client: mgr.GetClient(), Recorder: recorder, NodeName: nodeName, Host: host, State: state,
		Preflight: nodenetwork.NewPreflight(),
	}
	if err := nodes.SetupWithManager(mgr); err != nil {
		return nil, err
	}
	if err := setupPreflight(mgr, nodeName, opts, nodes.Preflight); err != nil {
		return nil, fmt.Errorf("adding the preflight: %w", err)
	}
	routes := &remoteroute.Reconciler{Client: mgr.GetClient(), Recorder: recorder, NodeName: nodeName, Net: netClient, State: state}
	if err := routes.SetupWithManager(mgr); err != nil {
		return nil, err
	}
	// The remote Pods the node's Egresses select come from Pod watches of their own (protobuf, as
	// the peer watches of NetworkPolicy): the manager's cache holds the node's Pods only.
	podsCfg := rest.CopyConfig(mgr.GetConfig())
	podsCfg.ContentType = runtime.ContentTypeProtobuf
	podsCfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	podsClient, err := kubernetes.NewForConfig(podsCfg)
	if err != nil {
		return nil, fmt.Errorf("creating the client of the Egresses' remote Pod watches: %w", err)
	}
	fence := &egress.Fence{Reader: mgr.GetAPIReader(), Writer: mgr.GetClient(), Namespace: opts.LeaseNamespace, NodeName: nodeName,
		Duration: opts.EgressLeaseDuration, RenewInterval: opts.EgressLeaseRenewInterval}
	if err := mgr.Add(fence); err != nil {
		return nil, fmt.Errorf("adding the renewal of the node's Egress Lease: %w", err)
	}
	egresses := &egress.Reconciler{Client: mgr.GetClient(), NodeName: nodeName, Net: netClient, State: state,
		RecordFile: filepath.Join(opts.StateDir, egress.RecordFileName), Remote: egress.NewRemotePods(podsClient), Fence: fence}
	if err := egresses.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the egress reconciler: %w", err)
	}
	hostPorts := hostport.NewRegistry(opts.ReservedPorts...)
	services := &service.Reconciler{Client: mgr.GetClient(), Recorder: recorder, NodeName: nodeName, State: state, Net: netClient,
		IDsFile:   filepath.Join(opts.StateDir, service.IDsFileName),
		NodePorts: hostnet.NewNodePortNAT(hostnet.Options{NetNSPath: opts.NetNSPath}), HostPorts: hostPorts}
	if err := services.SetupWithManager(mgr); err != nil {
		return nil, err
	}
	podNet, err := SetupPodNetwork(ctx, mgr, PodNetworkOptions{
		NodeName: nodeName, Host: podendpoint.Host{HNS: hnsClient, OVSDB: db, Net: netClient}, State: state,
		CNISocket: opts.CNISocket, CNIConfDir: opts.CNIConfDir, StateDir: opts.StateDir, CNIShimPath: opts.CNIShimPath,
		HostPorts: hostPorts,
	})
	if err != nil {
		return nil, err
	}
	nodes.Teardown = podNet
	audit, err := OpenAuditLog(ctx, mgr, nodeName, opts.AuditLog)
	if err != nil {
		return nil, err
	}
	if err := SetupNetworkPolicy(mgr, NetworkPolicyOptions{NodeName: nodeName, State: state, Local: podNet.Pods.Store(), Pods: podNet.Pods, Audit: audit}); err != nil {
		return nil, err
	}
	traces := &packettrace.AgentReconciler{Client: mgr.GetClient(), NodeName: nodeName, State: state, Local: podNet.Pods.Store(), Services: services}
	if err := traces.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the packet trace reconciler: %w", err)
	}
	return state.Freeze, nil
}

// The defaults of the fencing of egress IPs (egress.Fence).
const (
	DefaultEgressLeaseDuration      = egress.DefaultLeaseDuration
	DefaultEgressLeaseRenewInterval = egress.DefaultLeaseRenewInterval
)

// DefaultNamespace is winnet's namespace when the agent runs outside a Pod and no flag names it.
const DefaultNamespace = "winnet-system"

// podNamespaceFile holds the namespace of the Pod's ServiceAccount.
const podNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// PodNamespace is the namespace of the agent's Pod, DefaultNamespace outside a Pod.
func PodNamespace() string {
	if b, err := os.ReadFile(podNamespaceFile); err == nil && strings.TrimSpace(string(b)) != "" {
		return strings.TrimSpace(string(b))
	}
	return DefaultNamespace
}

// ReservedBindPorts are the TCP ports of the agent's own endpoints (the health probe and metrics
// bind addresses, "host:port"), which no hostPort may take; "0", empty and port 0 reserve nothing.
func ReservedBindPorts(health, metrics string) []hostport.Reserved {
	var out []hostport.Reserved
	for _, b := range []struct{ addr, what string }{{health, "winnet-agent's health probes"}, {metrics, "winnet-agent's metrics"}} {
		_, port, err := net.SplitHostPort(b.addr)
		if err != nil {
			continue
		}
		if p, err := strconv.ParseUint(port, 10, 16); err == nil && p != 0 {
			out = append(out, hostport.Reserved{Protocol: "TCP", Port: uint16(p), What: b.what})
		}
	}
	return out
}
