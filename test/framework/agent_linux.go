package framework

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/egress"
	"github.com/winnet-io/winnet/controllers/nodenetwork"
	"github.com/winnet-io/winnet/controllers/podendpoint"
	"github.com/winnet-io/winnet/controllers/remoteroute"
	"github.com/winnet-io/winnet/controllers/service"
	"github.com/winnet-io/winnet/internal/agent"
	"github.com/winnet-io/winnet/internal/auditlog"
	"github.com/winnet-io/winnet/internal/hns"
	"github.com/winnet-io/winnet/internal/hostnet"
	"github.com/winnet-io/winnet/internal/hostport"
	"github.com/winnet-io/winnet/internal/ovs/ovsdb"
	"github.com/winnet-io/winnet/test/simnode"
)

// Agent is a winnet-agent running in the test process for a simulated node: its node network,
// remote route and Pod network act on the node's own OVS, on netlink in the node's namespace and on
// the veth-backed HNS simulator; it serves CNI on its own socket.
type Agent struct {
	HNS   *hns.Sim
	OVSDB *ovsdb.Client
	Net   hostnet.Interface
	// CNISocket is where the agent serves the winnet-cni shim; CNIConfDir receives the conflist
	// once the node network is Ready; StateDir holds IPAM allocations and Pod attachments.
	CNISocket, CNIConfDir, StateDir string
	// Pods is the agent's Pod network.
	Pods *agent.PodNetwork
	// Services is the agent's Service reconciler.
	Services *service.Reconciler
	// State is what the agent's reconcilers share of the node (its realised network, the policy
	// index packet traces and the audit log read).
	State *nodenetwork.State
	// SandboxDir is where the harness, playing containerd, starts Pod sandboxes after ADD
	// (hns.StartSandbox): only then do their endpoints' vNICs appear.
	SandboxDir string
	// AuditLog is the agent's audit log of policy decisions (nil with AgentOptions.NoAuditLog).
	AuditLog *auditlog.Logger

	stopOnce sync.Once
	stop     func()
	stopped  bool
}

// Stop stops the agent as a node whose agent is gone would see it: its WindowsNodeNetwork stays
// (with its finalizer) and the host keeps its node network. The HNS simulator stays usable. After
// Stop, cleanup no longer deletes the WindowsNodeNetwork.
func (a *Agent) Stop() {
	a.stopOnce.Do(func() {
		a.stopped = true
		a.stop()
	})
}

// Pod network settings of agents in tests: drift is repaired within a second, ADD waits at most a
// second for a node network that is not Ready, and a Pod's port waits TestVNICTimeout for its vNIC.
const (
	TestVNICTimeout     = 5 * time.Second
	testPodResync       = time.Second
	testPodNotReadyWait = time.Second
)

// AgentOptions configure an agent started by StartAgentWith.
type AgentOptions struct {
	// Egress runs the Egress reconciler too, with its Lease renewal (egress.Fence) in winnet's default
	// namespace (agent.DefaultNamespace, which the test creates) and the default fencing durations.
	Egress bool
	// CNIShimPath is the agent's --cni-shim-path: the shim copy (InstallShim) it removes with the
	// node's last sandbox once the node network is gone; empty leaves the shim alone.
	CNIShimPath string
	// ResyncPeriod, when set, is the period of every reconciler's drift check instead of a second
	// (testPodResync for the Pods): a test of drift repaired from events sets it to many minutes.
	ResyncPeriod time.Duration
	// AuditLog configures the agent's audit log, in <agent dir>/audit unless Dir is set, with the
	// agent's defaults otherwise; NoAuditLog runs the agent without one (--audit-log-dir "").
	AuditLog   auditlog.Options
	NoAuditLog bool
	// MetricsBindAddress, when set, serves the agent's metrics there (HTTPS, a self-signed
	// certificate, each scrape authorized by the API server: MetricsReader); none by default.
	MetricsBindAddress string
}

// StartAgent starts the agent of node (named like the simulated node) against the API server. At
// cleanup it deletes the node's WindowsNodeNetwork while the agent still runs, so the host is
// restored through the finalizer, then stops it.
func StartAgent(t testing.TB, s *APIServer, node *simnode.Node) *Agent {
	t.Helper()
	return StartAgentWith(t, s, node, AgentOptions{})
}

// StartAgentWith is StartAgent with options.
func StartAgentWith(t testing.TB, s *APIServer, node *simnode.Node, opts AgentOptions) *Agent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	fail := func(what string, err error) {
		cancel()
		t.Fatalf("starting the agent of %s: %s: %v", node.Name, what, err)
	}
	resync, podResync := time.Second, testPodResync
	if opts.ResyncPeriod != 0 {
		resync, podResync = opts.ResyncPeriod, opts.ResyncPeriod
	}
	dir := t.TempDir()
	sandboxes := filepath.Join(dir, agent.SimSandboxDir)
	sim, err := hns.NewLinuxSim(hns.LinuxSimOptions{HostNetNS: node.NSPath, HostIPDelay: agent.SimHostIPDelay, SandboxDir: sandboxes})
	if err != nil {
		fail("HNS simulator", err)
	}
	net, err := hostnet.New(hostnet.Options{NetNSPath: node.NSPath})
	if err != nil {
		fail("host network", err)
	}
	db, err := ovsdb.New(ctx, ovsdb.Options{Address: node.OVS.DBSocket()})
	if err != nil {
		fail("ovsdb", err)
	}
	metrics, metricsCerts := "0", ""
	if opts.MetricsBindAddress != "" {
		metrics, metricsCerts = opts.MetricsBindAddress, filepath.Join(dir, "metrics-certs")
	}
	mgr, err := agent.NewManager(s.Config, agent.Options{
		NodeName: node.Name, MetricsBindAddress: metrics, MetricsCertDir: metricsCerts, HealthProbeBindAddress: "0", SeveralAgentsPerProcess: true,
	})
	if err != nil {
		fail("manager", err)
	}
	state := nodenetwork.NewState()
	recorder, err := agent.NewEventRecorder(mgr, node.Name)
	if err != nil {
		fail("Event recorder", err)
	}
	nodes := &nodenetwork.Reconciler{
		Client: mgr.GetClient(), Recorder: recorder, NodeName: node.Name, State: state,
		Host: nodenetwork.Host{HNS: sim, OVSDB: db, Net: net, OpenFlowAddress: node.OVS.MgmtSocket,
			StateDir: filepath.Join(dir, "state")},
		ResyncPeriod: resync,
	}
	if err := nodes.SetupWithManager(mgr); err != nil {
		fail("node network reconciler", err)
	}
	routes := &remoteroute.Reconciler{Client: mgr.GetClient(), Recorder: recorder, NodeName: node.Name, Net: net, State: state, ResyncPeriod: resync}
	if err := routes.SetupWithManager(mgr); err != nil {
		fail("remote route reconciler", err)
	}
	hostPorts := hostport.NewRegistry()
	services := &service.Reconciler{Client: mgr.GetClient(), Recorder: recorder, NodeName: node.Name, State: state, Net: net,
		NodePorts: hostnet.NewNodePortNAT(hostnet.Options{NetNSPath: node.NSPath}), ResyncPeriod: resync, HostPorts: hostPorts}
	if err := services.SetupWithManager(mgr); err != nil {
		fail("Service reconciler", err)
	}
	a := &Agent{HNS: sim, OVSDB: db, Net: net,
		CNISocket: filepath.Join(dir, "run", "cni.sock"), CNIConfDir: filepath.Join(dir, "net.d"), StateDir: filepath.Join(dir, "state"),
		SandboxDir: sandboxes, Services: services, State: state}
	a.Pods, err = agent.SetupPodNetwork(ctx, mgr, agent.PodNetworkOptions{
		NodeName: node.Name, Host: podendpoint.Host{HNS: sim, OVSDB: db, Net: net}, State: state,
		CNISocket: a.CNISocket, CNIConfDir: a.CNIConfDir, StateDir: a.StateDir, CNIShimPath: opts.CNIShimPath,
		ResyncPeriod: podResync, NotReadyWait: testPodNotReadyWait, VNICTimeout: TestVNICTimeout, HostPorts: hostPorts,
	})
	if err != nil {
		fail("Pod network", err)
	}
	nodes.Teardown = a.Pods
	if !opts.NoAuditLog {
		auditOpts := opts.AuditLog
		if auditOpts.Dir == "" {
			auditOpts.Dir = filepath.Join(dir, "audit")
		}
		if a.AuditLog, err = agent.OpenAuditLog(ctx, mgr, node.Name, auditOpts); err != nil {
			fail("audit log", err)
		}
	}
	if err := agent.SetupNetworkPolicy(mgr, agent.NetworkPolicyOptions{NodeName: node.Name, State: state, Local: a.Pods.Pods.Store(), Pods: a.Pods.Pods, ResyncPeriod: resync,
		Audit: a.AuditLog}); err != nil {
		fail("NetworkPolicy reconciler", err)
	}
	if opts.Egress {
		fence := &egress.Fence{Reader: mgr.GetAPIReader(), Writer: mgr.GetClient(), Namespace: agent.DefaultNamespace, NodeName: node.Name,
			Duration: egress.DefaultLeaseDuration, RenewInterval: egress.DefaultLeaseRenewInterval}
		if err := mgr.Add(fence); err != nil {
			fail("Egress Lease", err)
		}
		egresses := &egress.Reconciler{Client: mgr.GetClient(), NodeName: node.Name, Net: net, State: state, Fence: fence,
			RecordFile: filepath.Join(dir, "state", egress.RecordFileName)}
		if err := egresses.SetupWithManager(mgr); err != nil {
			fail("Egress reconciler", err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	a.stop = func() {
		cancel()
		<-done
		db.Close()
	}
	t.Cleanup(func() {
		if a.stopped {
			_ = sim.Close()
			return
		}
		key := client.ObjectKey{Name: node.Name}
		_ = s.Client.Delete(context.Background(), &networkv1alpha1.WindowsNodeNetwork{ObjectMeta: metav1.ObjectMeta{Name: node.Name}})
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if s.Client.Get(context.Background(), key, &networkv1alpha1.WindowsNodeNetwork{}) != nil {
				break
			}
		}
		a.Stop()
		_ = sim.Close()
	})
	return a
}
