package framework

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/nodenetwork"
	"github.com/winnet-io/winnet/controllers/remoteroute"
	"github.com/winnet-io/winnet/internal/agent"
	"github.com/winnet-io/winnet/internal/hns"
	"github.com/winnet-io/winnet/internal/hostnet"
	"github.com/winnet-io/winnet/internal/ovs/ovsdb"
	"github.com/winnet-io/winnet/test/simnode"
)

// Agent is a winnet-agent running in the test process for a simulated node: its node network and
// remote route reconcilers act on the node's own OVS, on netlink in the node's namespace and on the
// veth-backed HNS simulator.
type Agent struct {
	HNS   *hns.Sim
	OVSDB *ovsdb.Client
	Net   hostnet.Interface
}

// StartAgent starts the agent of node (named like the simulated node) against the API server. At
// cleanup it deletes the node's WindowsNodeNetwork while the agent still runs, so the host is
// restored through the finalizer, then stops it.
func StartAgent(t testing.TB, s *APIServer, node *simnode.Node) *Agent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	fail := func(what string, err error) {
		cancel()
		t.Fatalf("starting the agent of %s: %s: %v", node.Name, what, err)
	}
	sim, err := hns.NewLinuxSim(hns.LinuxSimOptions{HostNetNS: node.NSPath})
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
	mgr, err := agent.NewManager(s.Config, agent.Options{
		NodeName: node.Name, MetricsBindAddress: "0", HealthProbeBindAddress: "0", SeveralAgentsPerProcess: true,
	})
	if err != nil {
		fail("manager", err)
	}
	state := nodenetwork.NewState()
	nodes := &nodenetwork.Reconciler{
		Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("winnet-agent"), NodeName: node.Name, State: state,
		Host:         nodenetwork.Host{HNS: sim, OVSDB: db, Net: net, OpenFlowAddress: node.OVS.MgmtSocket},
		ResyncPeriod: time.Second,
	}
	if err := nodes.SetupWithManager(mgr); err != nil {
		fail("node network reconciler", err)
	}
	routes := &remoteroute.Reconciler{Client: mgr.GetClient(), NodeName: node.Name, Net: net, State: state, ResyncPeriod: time.Second}
	if err := routes.SetupWithManager(mgr); err != nil {
		fail("remote route reconciler", err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		key := client.ObjectKey{Name: node.Name}
		_ = s.Client.Delete(context.Background(), &networkv1alpha1.WindowsNodeNetwork{ObjectMeta: metav1.ObjectMeta{Name: node.Name}})
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if s.Client.Get(context.Background(), key, &networkv1alpha1.WindowsNodeNetwork{}) != nil {
				break
			}
		}
		cancel()
		<-done
		db.Close()
		_ = sim.Close()
	})
	return &Agent{HNS: sim, OVSDB: db, Net: net}
}
