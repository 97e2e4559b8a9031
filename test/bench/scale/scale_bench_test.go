//go:build linux && bench

package scale

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/winnet-io/winnet/internal/pipeline"
	"github.com/winnet-io/winnet/test/e2e/cluster"
	"github.com/winnet-io/winnet/test/framework"
)

const (
	// idleWindow is how long the idle cost is measured; churnWindow how long the watches count.
	idleWindow  = 60 * time.Second
	churnWindow = 30 * time.Second
	// heartbeatPeriod is how often each object Node's heartbeat is written (kubelet writes its
	// status every 10 s when it changes and at least every 5 minutes).
	heartbeatPeriod = time.Minute
	// endpointChanges are made endpointGap apart; each one's writes are counted in that gap.
	endpointChanges = 5
	endpointGap     = 3 * time.Second
	burstPods       = 100
	probes          = 3
	// settledCPU: the agents are settled when each used less than this share of a core over 5 s.
	settledCPU = 0.15
)

// result is one size's line.
type result struct {
	s                                            shape
	heapMB, rssMB, idleCPU, idleWrites, epWrites float64
	agentKBs, proxyKBs                           float64
	fullPass, burst                              time.Duration
}

func (r result) String() string {
	return fmt.Sprintf("bench-scale pods=%d services=%d policies=%d agent_heap_mb=%.0f agent_rss_mb=%.0f agent_idle_cpu_pct=%.1f "+
		"idle_writes_per_min=%.1f writes_per_endpoint_change=%.1f watch_kb_s_per_agent=%.1f kubeproxy_watch_kb_s=%.1f full_pass_ms=%.0f burst_converge_ms=%.0f",
		r.s.pods, r.s.services, r.s.policies, r.heapMB, r.rssMB, r.idleCPU, r.idleWrites, r.epWrites, r.agentKBs, r.proxyKBs,
		float64(r.fullPass.Microseconds())/1000, float64(r.burst.Microseconds())/1000)
}

func sizes(t *testing.T) []int {
	out := []int{10000, 30000, 60000}
	if v := os.Getenv("BENCH_SCALE_SIZES"); v != "" {
		out = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1000 {
				t.Fatalf("BENCH_SCALE_SIZES=%q: each size is a Pod count of at least 1000", v)
			}
			out = append(out, n)
		}
	}
	if os.Getenv("BENCH_SCALE_150K") == "1" {
		out = append(out, 150000)
	}
	slices.Sort(out)
	return out
}

// agent is one winnet node of the benchmark.
type agent struct {
	node  *cluster.Node
	pprof string
}

// TestBenchScale grows one cluster through the sizes and measures winnet at each (see doc.go).
func TestBenchScale(t *testing.T) {
	ctx := context.Background()
	agents := 3
	if v := os.Getenv("BENCH_SCALE_AGENTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 3 {
			t.Fatalf("BENCH_SCALE_AGENTS=%q: 1, 2 or 3", v)
		}
		agents = n
	}
	out := filepath.Join(framework.RepoRoot(), "bin", "bench-scale")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	policyFile, auditLog := filepath.Join(out, "audit-policy.yaml"), filepath.Join(out, "audit.log")
	_ = os.Remove(auditLog)
	if err := os.WriteFile(policyFile, []byte(auditPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c, err := cluster.Start(ctx, cluster.Options{
		Logf:         func(f string, a ...any) { fmt.Fprintf(os.Stderr, "bench-scale: "+f+"\n", a...) },
		BinDir:       os.Getenv("BENCH_SCALE_BIN"),
		UnderlayCIDR: netip.MustParsePrefix("192.168.78.0/24"),
		// Room for 5,000 Nodes' /24s (the object Nodes' are under 100.65.0.0).
		ClusterCIDR:   netip.MustParsePrefix("100.64.0.0/10"),
		APIServerArgs: map[string]string{"audit-policy-file": policyFile, "audit-log-path": auditLog},
		// The object Nodes have no Lease: only their status heartbeats (every heartbeatPeriod)
		// tell node lifecycle they live.
		ControllerManagerArgs: []string{"--node-monitor-grace-period=2h", "--node-startup-grace-period=2h"},
	})
	if err != nil {
		t.Fatalf("starting the cluster: %v", err)
	}
	defer func() {
		for _, n := range c.Nodes() {
			copyFile(n.AgentLog(), filepath.Join(out, "winnet-agent-"+n.Name+".log"))
		}
		copyFile(filepath.Join(c.RunDir, "winnet-controller.log"), filepath.Join(out, "winnet-controller.log"))
		if err := c.Close(); err != nil {
			t.Errorf("tearing the cluster down: %v", err)
		}
	}()
	w, err := newWriter(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	var nodes []*agent
	for i := range agents {
		a := &agent{pprof: framework.FreeAddress(t)}
		a.node, err = c.AddNode(ctx, cluster.NodeSpec{Name: fmt.Sprintf("win-%c", 'a'+i), IP: netip.MustParseAddr(fmt.Sprintf("192.168.78.%d", 11+i)),
			PodCIDR:   netip.MustParsePrefix(fmt.Sprintf("100.64.%d.0/24", 1+i)),
			AgentArgs: []string{"--pprof-bind-address", a.pprof, "--zap-time-encoding", "rfc3339nano"}})
		if err != nil {
			t.Fatalf("adding node %d: %v\n%s", i, err, c.LogTails(30))
		}
		nodes = append(nodes, a)
	}
	if err := c.WaitReady(ctx, 3*time.Minute); err != nil {
		t.Fatalf("the nodes did not get ready: %v\n%s", err, c.LogTails(30))
	}
	if err := parallel(0, localNamespaces, func(i int) error { return w.namespace(ctx, i) }); err != nil {
		t.Fatal(err)
	}
	// The local Pods: one per local namespace on each agent's node, attached through CNI.
	var wg sync.WaitGroup
	errs := make([]error, agents)
	for i, a := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range localNamespaces {
				if _, err := c.AddPodWith(ctx, a.node, fmt.Sprintf("l%d-%02d", i, j), cluster.PodOptions{Namespace: nsName(j),
					Labels: map[string]string{"app": fmt.Sprintf("a%d", j%5), "role": "local"}}, 2*time.Minute); err != nil {
					errs[i] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("attaching the local Pods: %v\n%s", err, c.LogTails(30))
		}
	}
	fmt.Printf("bench-scale-info: %d winnet nodes with %d local Pods each up in %v\n", agents, localNamespaces, time.Since(start).Round(time.Second))
	hbCtx, stopHeartbeats := context.WithCancel(ctx)
	defer stopHeartbeats()
	go w.heartbeats(hbCtx, heartbeatPeriod)

	var results []result
	for si, size := range sizes(t) {
		s := shapeOf(size)
		local := agents * localNamespaces
		built := time.Now()
		if err := w.grow(ctx, s, size-local); err != nil {
			t.Fatalf("growing the cluster to %d Pods: %v", size, err)
		}
		burstPolicy := probePolicy(fmt.Sprintf("burst-%d", si), int32(7000+si), map[string]string{"role": fmt.Sprintf("burst%d", si)}, nsName(1), "a1")
		if _, err := w.cs.NetworkingV1().NetworkPolicies(nsName(1)).Create(ctx, burstPolicy, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		writeTime := time.Since(built)
		settle := settled(t, nodes)
		fmt.Printf("bench-scale-info pods=%d nodes=%d namespaces=%d services=%d policies=%d: written in %v, agents settled %v later (%v in all)\n",
			size, s.nodes, s.namespaces, s.services, s.policies, writeTime.Round(time.Second), settle.Round(time.Second), time.Since(built).Round(time.Second))
		r := result{s: s}
		r.s.pods = size
		for _, a := range nodes {
			pid := a.node.AgentPID()
			if pid == 0 {
				t.Fatalf("the agent of %s is not running:\n%s", a.node.Name, c.LogTails(40))
			}
			h, err := heapMB(a.pprof)
			if err != nil {
				t.Fatal(err)
			}
			rss, err := rssMB(pid)
			if err != nil {
				t.Fatal(err)
			}
			r.heapMB, r.rssMB = max(r.heapMB, h), max(r.rssMB, rss)
		}

		// Idle: the heartbeats only.
		cpu0 := agentCPU(t, nodes)
		idleFrom := time.Now()
		time.Sleep(idleWindow)
		idleTo := time.Now()
		cpu1 := agentCPU(t, nodes)
		r.idleCPU = float64(cpu1-cpu0) / float64(idleTo.Sub(idleFrom)) / float64(agents) * 100
		time.Sleep(time.Second) // the audit log is written when a request completes
		n, what, err := agentWrites(auditLog, idleFrom, idleTo)
		if err != nil {
			t.Fatal(err)
		}
		r.idleWrites = float64(n) / idleTo.Sub(idleFrom).Minutes()
		fmt.Printf("bench-scale-info pods=%d: the agents' writes in %v idle: %d (%s)\n", size, idleWindow, n, what)

		// One endpoint of one Service changed, endpointChanges times.
		epFrom := time.Now()
		for range endpointChanges {
			if err := w.changeEndpoint(ctx, 0, s.namespaces); err != nil {
				t.Fatal(err)
			}
			time.Sleep(endpointGap)
		}
		epTo := time.Now()
		time.Sleep(time.Second)
		n, what, err = agentWrites(auditLog, epFrom, epTo)
		if err != nil {
			t.Fatal(err)
		}
		r.epWrites = float64(n) / endpointChanges
		fmt.Printf("bench-scale-info pods=%d: the agents' writes in the %v after %d endpoint changes: %d (%s)\n", size, epTo.Sub(epFrom).Round(time.Second), endpointChanges, n, what)

		// The full pass: a policy selecting local Pods, created probes times.
		var passes []time.Duration
		for k := range probes {
			at := time.Now()
			np := probePolicy(fmt.Sprintf("probe-%d-%d", si, k), int32(20000+si*10+k), map[string]string{"role": "peer"}, nsName(0), "a0")
			if _, err := w.cs.NetworkingV1().NetworkPolicies(nsName(0)).Create(ctx, np, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
				ps, err := fullPasses(nodes[0].node.AgentLog(), at)
				if err != nil {
					t.Fatal(err)
				}
				if len(ps) > 0 {
					passes = append(passes, ps[0])
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no full NetworkPolicy pass of %s logged in 3 minutes after a policy's creation", nodes[0].node.Name)
				}
			}
			time.Sleep(2 * time.Second)
		}
		r.fullPass = median(passes)
		fmt.Printf("bench-scale-info pods=%d: full passes %v\n", size, passes)

		r.burst = burst(t, ctx, w, nodes[0], si, s)

		// Churn, with the watches of one agent and one kube-proxy counting.
		agentW, err := startWatches(ctx, c.Config, agentWatches(nodes[0].node.Name))
		if err != nil {
			t.Fatal(err)
		}
		proxyW, err := startWatches(ctx, c.Config, kubeProxyWatches(nodeName(0)))
		if err != nil {
			t.Fatal(err)
		}
		churnCtx, stop := context.WithTimeout(ctx, churnWindow)
		churnStart := time.Now()
		writes, err := w.churn(churnCtx, 10, 5)
		stop()
		if err != nil {
			t.Fatalf("churn: %v", err)
		}
		elapsed := time.Since(churnStart).Seconds()
		r.agentKBs, r.proxyKBs = float64(agentW.Stop())/1024/elapsed, float64(proxyW.Stop())/1024/elapsed
		fmt.Printf("bench-scale-info pods=%d: churn of %d writes in %.0f s\n", size, writes, elapsed)
		fmt.Println(r)
		results = append(results, r)
	}
	fmt.Printf("bench-scale-info: the run took %v\n", time.Since(start).Round(time.Second))
	for _, r := range results {
		fmt.Println(r)
	}
}

// agentCPU is the agents' CPU time together.
func agentCPU(t *testing.T, nodes []*agent) time.Duration {
	t.Helper()
	var sum time.Duration
	for _, a := range nodes {
		d, err := cpuTime(a.node.AgentPID())
		if err != nil {
			t.Fatal(err)
		}
		sum += d
	}
	return sum
}

// settled waits until every agent used less than settledCPU of a core over 5 s (at most 10
// minutes) and returns how long that took.
func settled(t *testing.T, nodes []*agent) time.Duration {
	t.Helper()
	start := time.Now()
	for time.Since(start) < 10*time.Minute {
		before := make([]time.Duration, len(nodes))
		for i, a := range nodes {
			before[i], _ = cpuTime(a.node.AgentPID())
		}
		time.Sleep(5 * time.Second)
		quiet := true
		for i, a := range nodes {
			d, err := cpuTime(a.node.AgentPID())
			if err != nil {
				t.Fatalf("the agent of %s: %v", a.node.Name, err)
			}
			if float64(d-before[i]) > settledCPU*float64(5*time.Second) {
				quiet = false
			}
		}
		if quiet {
			return time.Since(start)
		}
	}
	fmt.Printf("bench-scale-info: the agents were still busy after 10 minutes; measuring anyway\n")
	return time.Since(start)
}

// burst creates burstPods Pods in parallel, peers of the burst policy on the first agent's Pods,
// and returns how long until that agent's switch has a peer flow for every one of their addresses.
func burst(t *testing.T, ctx context.Context, w *writer, a *agent, si int, s shape) time.Duration {
	t.Helper()
	addrs := make([]string, burstPods)
	for k := range burstPods {
		addrs[k] = addrAt(burstBase, si*256+k+1).String()
	}
	start := time.Now()
	errc := make(chan error, burstPods)
	for k := range burstPods {
		go func() {
			errc <- w.podAt(ctx, nsName(1), fmt.Sprintf("burst-%d-%03d", si, k), nodeName(k%s.nodes), addrAt(burstBase, si*256+k+1),
				map[string]string{"role": fmt.Sprintf("burst%d", si), "app": "burst"})
		}()
	}
	table := fmt.Sprintf("table=%d", pipeline.IngressRuleTable)
	written := false
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if !written {
			for range burstPods {
				if err := <-errc; err != nil {
					t.Fatalf("burst: %v", err)
				}
			}
			written = true
			fmt.Printf("bench-scale-info pods=%d: the burst's %d Pods written in %v\n", s.pods, burstPods, time.Since(start).Round(time.Millisecond))
		}
		flows, err := a.node.OVS.DumpFlows(cluster.BridgeName, table)
		if err != nil {
			t.Fatal(err)
		}
		dump := strings.Join(flows, "\n") + "\n"
		missing := 0
		for _, ip := range addrs {
			if !strings.Contains(dump, "nw_src="+ip+",") && !strings.Contains(dump, "nw_src="+ip+" ") {
				missing++
			}
		}
		if missing == 0 {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Fatalf("burst: %d of %d addresses still without a peer flow on %s after 5 minutes", missing, burstPods, a.node.Name)
		}
	}
}

// copyFile keeps a log of the run, which goes with the cluster's run directory.
func copyFile(from, to string) {
	if data, err := os.ReadFile(from); err == nil {
		_ = os.WriteFile(to, data, 0o644)
	}
}
