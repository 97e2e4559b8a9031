//go:build linux && bench

package routes

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/controller"
	"github.com/winnet-io/winnet/internal/pipeline"
	winnetscheme "github.com/winnet-io/winnet/internal/scheme"
	"github.com/winnet-io/winnet/test/bench/benchutil"
	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/simnode"
)

// TestBenchRoutes runs the real winnet-agent binary on a simulated node (real OVS, real netlink)
// against a real API server holding 1,000, 5,000 and 10,000 RemoteSubnetRoutes, and compares the
// flow installation with ovs-ofctl --bundle add-flows of the same flows in the same run.
func TestBenchRoutes(t *testing.T) {
	ctx := context.Background()
	controllerLog, err := os.Create(filepath.Join(framework.RepoRoot(), "bin", "bench-controller.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer controllerLog.Close()
	ctrl.SetLogger(zap.New(zap.WriteTo(controllerLog), zap.Level(zapcore.InfoLevel), func(o *zap.Options) {
		o.TimeEncoder = zapcore.RFC3339NanoTimeEncoder
	}))
	server, err := framework.StartAPIServer()
	if err != nil {
		t.Fatalf("bench-routes needs a real kube-apiserver: %v", err)
	}
	defer func() { _ = server.Stop() }()
	// winnet-controller accepts the routes (agents install only accepted, non-conflicting routes).
	mgr, err := controller.NewManager(server.Config, controller.Options{MetricsBindAddress: "0", HealthProbeBindAddress: "0"})
	if err != nil {
		t.Fatalf("creating winnet-controller: %v", err)
	}
	mctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = mgr.Start(mctx) }()
	// The bench observes the API through watches, not by polling it: polling would load the API server
	// and the two cores the agent runs on, and add its own period to every latency.
	scheme, err := winnetscheme.New()
	if err != nil {
		t.Fatal(err)
	}
	watcher, err := client.NewWithWatch(server.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatalf("creating a watching client: %v", err)
	}
	profile := os.Getenv("BENCH_ROUTES_PROFILE") != ""
	pprofOverlay := ""
	if profile {
		pprofOverlay = filepath.Join(framework.RepoRoot(), "test", "bench", "routes", "testdata", "pprof.go")
	}
	bin := benchutil.BuildAgent(t, pprofOverlay)
	underlay := simnode.NewUnderlay(t, netip.MustParsePrefix("192.168.40.0/24"))

	created := 0
	var summary string
	sizes := []int{1000, 5000, 10000}
	if env := os.Getenv("BENCH_ROUTES_SIZES"); env != "" { // e.g. "5000" while working on one size
		sizes = nil
		for _, f := range strings.Split(env, ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("BENCH_ROUTES_SIZES: %v", err)
			}
			sizes = append(sizes, n)
		}
	}
	for i, size := range sizes {
		createRoutes(t, server.Client, created, size)
		created = size
		// An agent starting in a running cluster finds the routes accepted already.
		waitAccepted(t, server.Client, size)
		name := fmt.Sprintf("bench-%d", size)
		node := underlay.AddNode(t, name, netip.MustParsePrefix(fmt.Sprintf("192.168.40.%d/24", 11+i)), simnode.NodeOptions{StartOVS: true})
		createOwnNode(t, server.Client, name, node.NodeIP.Addr().String())

		logFile := filepath.Join(framework.RepoRoot(), "bin", name+".log") // kept for reading after the run
		pprofAddr := ""
		if profile {
			pprofAddr = framework.FreeAddress(t)
		}
		vswitchd := benchutil.VswitchdPID(t, node)
		vswitchdBefore := benchutil.CPUTime(t, vswitchd, false)
		var env []string
		if pprofAddr != "" {
			env = []string{"WINNET_BENCH_PPROF=" + pprofAddr}
		}
		agent := benchutil.StartAgent(t, bin, server.KubeconfigPath, node, logFile, env)
		start := time.Now()
		var cpuProfile <-chan struct{}
		if profile { // from the agent's start, through convergence
			cpuProfile = benchutil.FetchProfile(t, pprofAddr, fmt.Sprintf("profile?seconds=%d", 2+size/2000), filepath.Join(framework.RepoRoot(), "bin", name+".cpu.pprof"))
		}
		waitRoutesReady(t, watcher, agent, name, size)
		converge := time.Since(start)
		agentCPU, vswitchdCPU := benchutil.CPUTime(t, agent.Cmd.Process.Pid, false), benchutil.CPUTime(t, vswitchd, false)-vswitchdBefore
		rss := benchutil.RSSMB(t, agent.Cmd.Process.Pid)
		if profile {
			<-cpuProfile
			<-benchutil.FetchProfile(t, pprofAddr, "heap", filepath.Join(framework.RepoRoot(), "bin", name+".heap.pprof"))
		}
		flowFile := filepath.Join(t.TempDir(), name+".flows")
		flows := benchutil.DumpCategoryFlows(t, node, "br-int", pipeline.CategoryRoute, flowFile)
		routes := strings.Count(node.MustExec(t, "ip", "route", "show", "proto", "241"), "\n")
		ofctl := benchutil.OfctlReference(t, node, flowFile)
		fmt.Printf("bench-routes nodes=%d converge_ms=%d ofctl_ms=%d rss_mb=%d flows=%d host_routes=%d "+
			"(CPU while converging: agent %d ms, ovs-vswitchd %d ms)\n",
			size, converge.Milliseconds(), ofctl.Milliseconds(), rss, flows, routes, agentCPU.Milliseconds(), vswitchdCPU.Milliseconds())

		// One route is added at 5,000 (or at the last size when 5,000 is not run).
		if size == 5000 || (i == len(sizes)-1 && !slices.Contains(sizes, 5000)) {
			inc := addOneRoute(t, watcher, node, logFile, created)
			created++
			fmt.Printf("bench-routes added one route at %d: installed %.1f ms after its creation (seen by a flow monitor), "+
				"accepted by winnet-controller after %.1f ms, %.1f ms in the agent; the agent logged the commit %.1f ms "+
				"before the monitor saw the flow (observation lag)\n",
				size, benchutil.MS(inc.installed), benchutil.MS(inc.accepted), benchutil.MS(inc.installed-inc.accepted), benchutil.MS(inc.lag))
			summary = fmt.Sprintf("bench-routes nodes=%d converge_ms=%d ofctl_ms=%d rss_mb=%d incr_ms=%d incr_mods=%d",
				size, converge.Milliseconds(), ofctl.Milliseconds(), rss, inc.installed.Milliseconds(), inc.mods)
		}
		agent.Stop()
	}
	fmt.Println(summary)
}

// routeCIDR is the Pod CIDR of the i-th simulated remote node.
func routeCIDR(i int) string { return fmt.Sprintf("10.%d.%d.0/24", 100+i/256, i%256) }

func createRoutes(t *testing.T, c client.Client, from, to int) {
	t.Helper()
	err := benchutil.Parallel(from, to, 16, func(i int) error {
		return c.Create(context.Background(), &networkv1alpha1.RemoteSubnetRoute{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("remote-%05d", i)},
			Spec: networkv1alpha1.RemoteSubnetRouteSpec{
				NodeName: fmt.Sprintf("remote-%05d", i), PodCIDRs: []networkv1alpha1.CIDR{networkv1alpha1.CIDR(routeCIDR(i))},
				NodeIP: networkv1alpha1.IPAddress(fmt.Sprintf("172.16.%d.%d", i/250, 1+i%250)), Mode: networkv1alpha1.RouteModeTunnel,
			},
		})
	})
	if err != nil {
		t.Fatalf("creating RemoteSubnetRoutes: %v", err)
	}
}

func createOwnNode(t *testing.T, c client.Client, name, ip string) {
	t.Helper()
	ctx := context.Background()
	cidr := "10.99.0.0/24"
	if err := c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{PodCIDR: cidr, PodCIDRs: []string{cidr}}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &networkv1alpha1.WindowsNodeNetwork{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: networkv1alpha1.WindowsNodeNetworkSpec{
			PodCIDRs: []networkv1alpha1.CIDR{networkv1alpha1.CIDR(cidr)}, NodeIP: networkv1alpha1.IPv4Address(ip),
			Bridge: networkv1alpha1.BridgeSpec{DatapathType: networkv1alpha1.DatapathTypeNetdev},
		},
	}); err != nil {
		t.Fatal(err)
	}
}

func waitRoutesReady(t *testing.T, c client.WithWatch, agent *benchutil.Agent, name string, want int) {
	t.Helper()
	ready := func(o client.Object) bool {
		w := o.(*networkv1alpha1.WindowsNodeNetwork)
		return meta.IsStatusConditionTrue(w.Status.Conditions, networkv1alpha1.RoutesReadyCondition) &&
			int(w.Status.RemoteRoutes.Installed) == want
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	seen := watchFor(t, ctx, c, &networkv1alpha1.WindowsNodeNetworkList{}, name, ready)
	select {
	case <-agent.Exited:
		out, _ := os.ReadFile(agent.Log)
		t.Fatalf("winnet-agent exited: %s", out)
	case _, ok := <-seen:
		if !ok {
			t.Fatalf("%s: %d routes not ready within 5 minutes", name, want)
		}
	}
}

// watchFor watches the object of list's kind named name and sends the time at which cond first
// holds for it (closing the channel without a value if ctx ends first). The watch is established
// when it returns.
func watchFor(t *testing.T, ctx context.Context, c client.WithWatch, list client.ObjectList, name string, cond func(client.Object) bool) <-chan time.Time {
	t.Helper()
	w, err := c.Watch(ctx, list, client.MatchingFields{"metadata.name": name})
	if err != nil {
		t.Fatalf("watching %s: %v", name, err)
	}
	seen := make(chan time.Time, 1)
	go func() {
		defer close(seen)
		defer w.Stop()
		for ev := range w.ResultChan() {
			if o, ok := ev.Object.(client.Object); ok && ev.Type != watch.Deleted && cond(o) {
				seen <- time.Now()
				return
			}
		}
	}()
	return seen
}

// increment is what adding one route cost.
type increment struct {
	// installed and accepted are the times from its creation to its flow being seen in the switch
	// and to winnet-controller accepting it.
	installed, accepted time.Duration
	// lag is how long after the agent logged the commit the flow monitor reported the flow.
	lag time.Duration
	// mods is the number of flow-mods the agent sent for it.
	mods int
}

// addOneRoute adds one route and measures it: acceptance through a watch, the flow through an
// OpenFlow flow monitor on the switch, the flow-mods from the agent's log.
func addOneRoute(t *testing.T, c client.WithWatch, node *simnode.Node, logFile string, i int) increment {
	t.Helper()
	name, cidr := fmt.Sprintf("remote-%05d", i), routeCIDR(i)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	flowSeen := benchutil.MonitorFlow(t, ctx, node, "br-int", "table=70,ip,nw_dst="+cidr)
	accepted := watchFor(t, ctx, c, &networkv1alpha1.RemoteSubnetRouteList{}, name, func(o client.Object) bool {
		return meta.IsStatusConditionTrue(o.(*networkv1alpha1.RemoteSubnetRoute).Status.Conditions, networkv1alpha1.AcceptedCondition)
	})
	start := time.Now()
	createRoutes(t, c, i, i+1)
	installedAt, ok := <-flowSeen
	if !ok {
		t.Fatalf("the flow of the added route %s did not appear", cidr)
	}
	acceptedAt, ok := <-accepted
	if !ok {
		t.Fatalf("winnet-controller did not accept the added route %s", name)
	}
	// The agent logs the sync just after the bundle is committed.
	for ctx.Err() == nil {
		if at, mods, ok := routeSync(t, logFile, name); ok {
			return increment{installed: installedAt.Sub(start), accepted: acceptedAt.Sub(start), lag: installedAt.Sub(at), mods: mods}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the agent did not log the route sync")
	return increment{}
}

// waitAccepted waits until winnet-controller has accepted n routes.
func waitAccepted(t *testing.T, c client.Client, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		list := &networkv1alpha1.RemoteSubnetRouteList{}
		if err := c.List(context.Background(), list); err == nil {
			accepted := 0
			for _, r := range list.Items {
				if meta.IsStatusConditionTrue(r.Status.Conditions, networkv1alpha1.AcceptedCondition) {
					accepted++
				}
			}
			if accepted >= n {
				return
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("winnet-controller did not accept %d routes within 5 minutes", n)
}

// routeSync returns when the agent logged the flow sync of the route named and the flow-mods it sent.
func routeSync(t *testing.T, logFile, route string) (time.Time, int, bool) {
	t.Helper()
	f, err := os.Open(logFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var entry struct {
			TS       time.Time `json:"ts"`
			Msg      string    `json:"msg"`
			Route    string    `json:"route"`
			FlowMods int       `json:"flowMods"`
		}
		if json.Unmarshal(sc.Bytes(), &entry) == nil && entry.Msg == "Synced route flows" && entry.Route == route {
			return entry.TS, entry.FlowMods, true
		}
	}
	return time.Time{}, 0, false
}
