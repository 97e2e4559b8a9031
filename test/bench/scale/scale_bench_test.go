//go:build linux && bench

package scale

import (
	"context"
	"errors"
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

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/winnet-io/winnet/internal/memlimit"
	"github.com/winnet-io/winnet/internal/pipeline"
	"github.com/winnet-io/winnet/test/e2e/cluster"
	"github.com/winnet-io/winnet/test/framework"
)

const (
	// idleWindow is how long the idle cost is measured; churnWindow how long the watches count.
	idleWindow  = 60 * time.Second
	churnWindow = 30 * time.Second
	// heartbeatPeriod is how often each object Node's heartbeat is written: as kubelet writes an
	// unchanged status (its nodeStatusReportFrequency, 5 minutes; its liveness goes in a Lease
	// every 10 s, which winnet does not watch). Once a minute, 5,000 Nodes wrote 83 status
	// patches a second, five times a real cluster's, which every Node watcher (winnet-controller,
	// kube-controller-manager) decodes and which slowed the writing of everything else.
	heartbeatPeriod = 5 * time.Minute
	// endpointChanges are made endpointGap apart; each one's writes are counted in that gap.
	endpointChanges = 5
	// unnamedUpdates is how many status updates of a Pod no local policy names are counted.
	unnamedUpdates = 5
	endpointGap    = 3 * time.Second
	burstPods      = 100
	probes         = 3
	// settledCPU: the agents are settled when each used less than this share of a core over 5 s.
	settledCPU = 0.15
)

// result is one size's line.
type result struct {
	s                                            shape
	heapMB, rssMB, idleCPU, idleWrites, epWrites float64
	// idleRSSMB is the largest RSS of the agents (the limited one apart, limitedIdleRSSMB) at the end
	// of the idle minute: at rest, once the runtime has returned what the growth no longer needs.
	idleRSSMB, limitedIdleRSSMB float64
	agentKBs, proxyKBs          float64
	fullPass, burst             time.Duration
	// unnamedEvents: the events an agent's watches receive per status update of a Pod no local
	// policy names.
	unnamedEvents float64
	// onlyPods: the sizes differ in Pods only (BENCH_SCALE_FIXED=1).
	onlyPods bool
	// growWrites: the set's agents' writes while the size was built and they settled, per agent and
	// per Node, Service or NetworkPolicy added (-1 when none was).
	growWrites float64
	// memLimit: the bytes of WINNET_MEMORY_LIMIT the set's last agent runs with
	// (BENCH_SCALE_AGENT_MEMORY_LIMIT), 0 when none does; heapMB and rssMB are then the other agents'.
	// limitedHeapMB and limitedRSSMB are that agent's, limitedCPURatio its CPU time since its start
	// over the mean of the other agents' at the same moment.
	memLimit                                     int64
	limitedHeapMB, limitedRSSMB, limitedCPURatio float64
	// gogc: the GOGC the set's last agent runs with (BENCH_SCALE_AGENT_GOGC), "" when none; it is then
	// measured apart as the limited agent is (with a memory limit too when both are set).
	gogc string
}

func (r result) String() string {
	return fmt.Sprintf("bench-scale pods=%d services=%d policies=%d agent_heap_mb=%.0f agent_rss_mb=%.0f agent_idle_rss_mb=%.0f agent_idle_cpu_pct=%.1f "+
		"idle_writes_per_min=%.1f writes_per_endpoint_change=%.1f watch_kb_s_per_agent=%.1f kubeproxy_watch_kb_s=%.1f full_pass_ms=%.0f burst_converge_ms=%.0f "+
		"unnamed_pod_update_events=%.1f only_pods_grow=%d agent_writes_per_object_added=%.2f",
		r.s.pods, r.s.services, r.s.policies, r.heapMB, r.rssMB, r.idleRSSMB, r.idleCPU, r.idleWrites, r.epWrites, r.agentKBs, r.proxyKBs,
		float64(r.fullPass.Microseconds())/1000, float64(r.burst.Microseconds())/1000, r.unnamedEvents, boolInt(r.onlyPods), r.growWrites) + r.limited()
}

// limited is the fields of the agent with a memory limit or a GOGC of its own, appended to the line
// when one runs.
func (r result) limited() string {
	if r.memLimit == 0 && r.gogc == "" {
		return ""
	}
	var out string
	if r.memLimit > 0 {
		out += fmt.Sprintf(" agent_memory_limit_mb=%.0f", float64(r.memLimit)/(1<<20))
	}
	if r.gogc != "" {
		out += " agent_gogc=" + r.gogc
	}
	return out + fmt.Sprintf(" limited_agent_heap_mb=%.0f limited_agent_rss_mb=%.0f limited_agent_idle_rss_mb=%.0f limited_agent_cpu_ratio=%.2f",
		r.limitedHeapMB, r.limitedRSSMB, r.limitedIdleRSSMB, r.limitedCPURatio)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
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
	if os.Getenv("BENCH_SCALE_FIXED") == "1" && os.Getenv("BENCH_SCALE_SIZES") == "" {
		// Only Pods grow, on the first size's Nodes: the default sizes start at the first whose
		// Nodes hold the largest size's Pods (30,000 with BENCH_SCALE_150K=1).
		for len(out) > 1 {
			if _, _, err := fixedShape(out); err == nil {
				break
			}
			out = out[1:]
		}
	}
	return out
}

// agent is one winnet node of the benchmark.
type agent struct {
	node  *cluster.Node
	pprof string
}

// agentSet is the agents of one build: the one measured, or the reference (BENCH_SCALE_REF_BIN).
type agentSet struct {
	name   string
	agents []*agent
	// limited is the agent that runs with WINNET_MEMORY_LIMIT (BENCH_SCALE_AGENT_MEMORY_LIMIT, the
	// measured set's last, so that full_pass_ms and burst_converge_ms, the first's, keep the
	// runtime's defaults), nil in a set without one.
	limited *agent
}

// agentMemoryLimit is BENCH_SCALE_AGENT_MEMORY_LIMIT in bytes, 0 when it is not set.
func agentMemoryLimit(t *testing.T, agents int) int64 {
	v := os.Getenv("BENCH_SCALE_AGENT_MEMORY_LIMIT")
	if v == "" {
		return 0
	}
	q, err := resource.ParseQuantity(v)
	if err != nil || q.Sign() <= 0 {
		t.Fatalf("BENCH_SCALE_AGENT_MEMORY_LIMIT=%q: want a positive Kubernetes quantity, the container's memory limit, such as 352Mi", v)
	}
	if agents < 2 {
		t.Fatalf("BENCH_SCALE_AGENT_MEMORY_LIMIT=%q with BENCH_SCALE_AGENTS=%d: the limited agent is compared with the others of its build, "+
			"so at least 2 agents", v, agents)
	}
	// The agents inherit the benchmark's environment: GOMEMLIMIT would win over the limit in every one,
	// WINNET_MEMORY_LIMIT would limit them all.
	for _, e := range []string{"GOMEMLIMIT", memlimit.EnvVar} {
		if os.Getenv(e) != "" {
			t.Fatalf("BENCH_SCALE_AGENT_MEMORY_LIMIT=%q: %s is set in the benchmark's environment, which every agent inherits; unset it", v, e)
		}
	}
	return q.Value()
}

// agentGOGC is BENCH_SCALE_AGENT_GOGC, "" when it is not set.
func agentGOGC(t *testing.T, agents int) string {
	v := os.Getenv("BENCH_SCALE_AGENT_GOGC")
	if v == "" {
		return ""
	}
	if n, err := strconv.Atoi(v); err != nil || n <= 0 {
		t.Fatalf("BENCH_SCALE_AGENT_GOGC=%q: want a positive garbage collection target, such as 25", v)
	}
	if agents < 2 {
		t.Fatalf("BENCH_SCALE_AGENT_GOGC=%q with BENCH_SCALE_AGENTS=%d: that agent is compared with the others of its build, so at least 2 agents", v, agents)
	}
	if os.Getenv("GOGC") != "" {
		t.Fatalf("BENCH_SCALE_AGENT_GOGC=%q: GOGC is set in the benchmark's environment, which every agent inherits; unset it", v)
	}
	return v
}

func (s *agentSet) nodes() map[string]bool {
	out := map[string]bool{}
	for _, a := range s.agents {
		out[a.node.Name] = true
	}
	return out
}

// TestBenchScale grows one cluster through the sizes and measures winnet at each (see doc.go).
func TestBenchScale(t *testing.T) {
	ctx := context.Background()
	profileDir := os.Getenv("BENCH_SCALE_PROFILE_DIR")
	agents := 3
	if v := os.Getenv("BENCH_SCALE_AGENTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 3 {
			t.Fatalf("BENCH_SCALE_AGENTS=%q: 1, 2 or 3", v)
		}
		agents = n
	}
	memLimit := agentMemoryLimit(t, agents)
	gogc := agentGOGC(t, agents)
	out := filepath.Join(framework.RepoRoot(), "bin", "bench-scale")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatalf("creating %s for the run's logs: %v", out, err)
	}
	policyFile, auditLog := filepath.Join(out, "audit-policy.yaml"), filepath.Join(out, "audit.log")
	_ = os.Remove(auditLog)
	if err := os.WriteFile(policyFile, []byte(auditPolicy), 0o644); err != nil {
		t.Fatalf("writing the audit policy: %v", err)
	}
	start := time.Now()
	controllerPprof, controllerMetrics := framework.FreeAddress(t), framework.FreeAddress(t)
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
		// winnet-controller as the chart runs it (its ServiceAccount: the audit log tells its writes
		// apart), with its profiler and metrics on the loopback.
		ControllerServiceAccount: true,
		ControllerArgs:           []string{"--pprof-bind-address", controllerPprof, "--metrics-bind-address", controllerMetrics},
		EtcdArgs:                 etcdArgs,
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
		t.Fatalf("the writers' client: %v", err)
	}
	if v := os.Getenv("BENCH_SCALE_WRITERS"); v != "" {
		if writers, err = strconv.Atoi(v); err != nil || writers < 1 {
			t.Fatalf("BENCH_SCALE_WRITERS=%q: how many objects are written at once, at least 1", v)
		}
	}
	ctl, err := newControllerProbe(ctx, c, c.Config, controllerPprof, controllerMetrics)
	if err != nil {
		t.Fatalf("reading winnet-controller: %v", err)
	}
	sets := []*agentSet{{name: "bench-scale"}}
	if ref := os.Getenv("BENCH_SCALE_REF_BIN"); ref != "" {
		sets = append(sets, &agentSet{name: "bench-scale-ref"})
	}
	var all []*agent
	for si, set := range sets {
		for i := range agents {
			a := &agent{pprof: framework.FreeAddress(t)}
			k := si*3 + i
			spec := cluster.NodeSpec{Name: fmt.Sprintf("win-%c", 'a'+k), IP: netip.MustParseAddr(fmt.Sprintf("192.168.78.%d", 11+k)),
				PodCIDR:   netip.MustParsePrefix(fmt.Sprintf("100.64.%d.0/24", 1+k)),
				AgentArgs: []string{"--pprof-bind-address", a.pprof, "--zap-time-encoding", "rfc3339nano"}}
			if si == 1 {
				spec.AgentBinary = filepath.Join(os.Getenv("BENCH_SCALE_REF_BIN"), "winnet-agent")
			}
			if si == 0 && i == agents-1 && memLimit > 0 {
				// As the chart gives it the container's limit; the set's other agents run without.
				spec.AgentEnv = []string{memlimit.EnvVar + "=" + strconv.FormatInt(memLimit, 10)}
				set.limited = a
				fmt.Printf("bench-scale-info: %s's agent runs with %s (Go soft limit %d%% of it), the other agents of %s without\n",
					spec.Name, spec.AgentEnv[0], memlimit.Percent, set.name)
			}
			if si == 0 && i == agents-1 && gogc != "" {
				spec.AgentEnv = append(spec.AgentEnv, "GOGC="+gogc)
				set.limited = a
				fmt.Printf("bench-scale-info: %s's agent runs with GOGC=%s, the other agents of %s with their build's own target\n", spec.Name, gogc, set.name)
			}
			a.node, err = c.AddNode(ctx, spec)
			if err != nil {
				t.Fatalf("adding node %s: %v\n%s", spec.Name, err, c.LogTails(30))
			}
			set.agents = append(set.agents, a)
			all = append(all, a)
		}
	}
	if err := c.WaitReady(ctx, 3*time.Minute); err != nil {
		t.Fatalf("the nodes did not get ready: %v\n%s", err, c.LogTails(30))
	}
	if err := parallel(0, localNamespaces, func(i int) error { return w.namespace(ctx, i) }); err != nil {
		t.Fatalf("creating the local namespaces: %v", err)
	}
	// The local Pods: one per local namespace on each agent's node, attached through CNI.
	var wg sync.WaitGroup
	errs := make([]error, len(all))
	for i, a := range all {
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
	fmt.Printf("bench-scale-info: %d winnet nodes with %d local Pods each up in %v (the reference's agents: %d)\n", len(all), localNamespaces,
		time.Since(start).Round(time.Second), len(all)-agents)
	hbCtx, stopHeartbeats := context.WithCancel(ctx)
	defer stopHeartbeats()
	go w.heartbeats(hbCtx, heartbeatPeriod)

	var lines []string
	sizeList := sizes(t)
	// BENCH_SCALE_FIXED=1: only the Pods grow (issue 38's heap goal), everything else is the first
	// size's.
	var fixed shape
	if os.Getenv("BENCH_SCALE_FIXED") == "1" {
		f, perNode, err := fixedShape(sizeList)
		if err != nil {
			t.Fatalf("BENCH_SCALE_FIXED=1 with sizes %v: %v", sizeList, err)
		}
		fixed, w.perNode, w.fixedFrom = f, perNode, sizeList[0]-len(all)*localNamespaces
		fmt.Printf("bench-scale-info: only Pods grow: %d Nodes, %d namespaces, %d Services, %d policies at every size, up to %d Pods per Node\n",
			f.nodes, f.namespaces, f.services, f.policies, perNode)
	}
	for si, size := range sizeList {
		s := shapeOf(size)
		if fixed.pods != 0 {
			s = fixed
			s.pods = size
		}
		local := len(all) * localNamespaces
		built := time.Now()
		cpuBefore := takeCPU()
		ctlCPU0 := cpuTime0(t, ctl.pid(t))
		grown := w.built
		nodesBefore := grown.nodes
		queue := ctl.sampleQueue(ctx)
		rates, err := w.grow(ctx, s, size-local)
		if err != nil {
			t.Fatalf("growing the cluster to %d Pods: %v (written: %s)", size, err, writeRates(rates))
		}
		cpuWritten := takeCPU()
		cr := controllerResult{pods: size, nodes: s.nodes}
		cr.growCPU = float64(cpuTime0(t, ctl.pid(t))-ctlCPU0) / float64(cpuWritten.at.Sub(cpuBefore.at)) * 100
		fmt.Printf("bench-scale-info pods=%d: written per second (%d writers; %d requests retried after a 429 or a timeout so far): %s\n",
			size, writers, retried.Load(), writeRates(rates))
		fmt.Printf("bench-scale-info pods=%d: cores used while writing: %s\n", size, cpuWritten.coresSince(cpuBefore))
		for _, k := range rates {
			if k.objects > 0 {
				fmt.Printf("bench-scale-info pods=%d: cores used while writing %s: %s\n", size, k.kind, k.cpuAfter.coresSince(k.cpuBefore))
			}
		}
		burstPolicy := probePolicy(fmt.Sprintf("burst-%d", si), int32(7000+si), map[string]string{"role": fmt.Sprintf("burst%d", si)}, nsName(1), "a1")
		if _, err := w.cs.NetworkingV1().NetworkPolicies(nsName(1)).Create(ctx, burstPolicy, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating the burst policy of %d Pods: %v", size, err)
		}
		writeTime := time.Since(built)
		settle := settled(t, all)
		ctlSettle, err := ctl.waitQueuesEmpty(ctx, 10*time.Minute)
		if err != nil {
			t.Fatalf("waiting for winnet-controller's queues to empty at %d Pods: %v", size, err)
		}
		settledAt := time.Now()
		var which string
		if cr.queueGrow, which, err = queue.Stop(); err != nil {
			t.Fatalf("sampling winnet-controller's queue depth while growing to %d Pods: %v", size, err)
		}
		fmt.Printf("bench-scale-info pods=%d nodes=%d namespaces=%d services=%d policies=%d: written in %v, agents settled %v later, winnet-controller's "+
			"queues empty %v after that (%v in all); its deepest queue while growing: %s\n",
			size, s.nodes, s.namespaces, s.services, s.policies, writeTime.Round(time.Second), settle.Round(time.Second), ctlSettle.Round(time.Second),
			time.Since(built).Round(time.Second), which)
		time.Sleep(time.Second) // the audit log is written when a request completes
		n, what, err := controllerWrites(auditLog, built, settledAt)
		if err != nil {
			t.Fatalf("counting winnet-controller's writes while growing to %d Pods: %v", size, err)
		}
		cr.writesPerNode = -1
		if added := s.nodes - nodesBefore; added > 0 {
			cr.writesPerNode = float64(n) / float64(added)
		}
		fmt.Printf("bench-scale-info pods=%d: winnet-controller's writes while %d Nodes were added and the agents settled: %d (%s)\n",
			size, s.nodes-nodesBefore, n, what)
		if cr.heapMB, err = heapMB(ctl.pprof); err != nil {
			t.Fatalf("winnet-controller's heap: %v", err)
		}
		if cr.rssMB, err = rssMB(ctl.pid(t)); err != nil {
			t.Fatalf("winnet-controller's RSS: %v", err)
		}
		rs := make([]result, len(sets))
		for k, set := range sets {
			rs[k].growWrites = -1
			if added := s.nodes - grown.nodes + s.services - grown.services + s.policies - grown.policies; added > 0 {
				n, what, err := agentWrites(auditLog, set.nodes(), built, settledAt)
				if err != nil {
					t.Fatalf("counting the agents' writes while growing to %d Pods: %v", size, err)
				}
				rs[k].growWrites = float64(n) / float64(len(set.agents)) / float64(added)
				fmt.Printf("bench-scale-info pods=%d %s: the agents' writes while %d Nodes, Services and policies were added and they settled: %d (%s)\n",
					size, set.name, added, n, what)
			}
			rs[k].s = s
			rs[k].s.pods = size
			rs[k].onlyPods = fixed.pods != 0
			if set.limited != nil {
				rs[k].memLimit, rs[k].gogc = memLimit, gogc
			}
			for _, a := range set.agents {
				pid := a.node.AgentPID()
				if pid == 0 {
					t.Fatalf("the agent of %s is not running:\n%s", a.node.Name, c.LogTails(40))
				}
				h, err := heapMB(a.pprof)
				if err != nil {
					t.Fatalf("the heap of %s's agent: %v", a.node.Name, err)
				}
				if profileDir != "" {
					f := filepath.Join(profileDir, fmt.Sprintf("heap-%s-%s-%d.pb.gz", set.name, a.node.Name, size))
					if err := saveHeapProfile(a.pprof, f); err != nil {
						t.Fatalf("the heap profile of %s's agent: %v", a.node.Name, err)
					}
				}
				rss, err := rssMB(pid)
				if err != nil {
					t.Fatalf("the RSS of %s's agent: %v", a.node.Name, err)
				}
				if a == set.limited {
					rs[k].limitedHeapMB, rs[k].limitedRSSMB = h, rss
					continue
				}
				rs[k].heapMB, rs[k].rssMB = max(rs[k].heapMB, h), max(rs[k].rssMB, rss)
			}
		}

		// Idle: the heartbeats only.
		cpu0 := make([]time.Duration, len(sets))
		for k, set := range sets {
			cpu0[k] = agentCPU(t, set.agents)
		}
		ctlIdle0 := cpuTime0(t, ctl.pid(t))
		idleFrom := time.Now()
		// With BENCH_SCALE_PROFILE_DIR, what each agent allocates while idle (what lifts its RSS at
		// rest over the settled reading), and its MemStats at the end of the window.
		var idleProfiles sync.WaitGroup
		var idleMu sync.Mutex
		var idleErrs []error
		if profileDir != "" {
			query := fmt.Sprintf("allocs?seconds=%d", int((idleWindow - 5*time.Second).Seconds()))
			for _, set := range sets {
				for _, a := range set.agents {
					f := filepath.Join(profileDir, fmt.Sprintf("idle-allocs-%s-%s-%d.pb.gz", set.name, a.node.Name, size))
					idleProfiles.Go(func() {
						if err := saveProfile(a.pprof, query, f); err != nil {
							idleMu.Lock()
							idleErrs = append(idleErrs, err)
							idleMu.Unlock()
						}
					})
				}
			}
		}
		time.Sleep(idleWindow)
		idleTo := time.Now()
		idleProfiles.Wait()
		if err := errors.Join(idleErrs...); err != nil {
			t.Fatalf("an agent's allocations while idle: %v", err)
		}
		if profileDir != "" {
			for _, set := range sets {
				for _, a := range set.agents {
					f := filepath.Join(profileDir, fmt.Sprintf("idle-memstats-%s-%s-%d.txt", set.name, a.node.Name, size))
					if err := saveProfile(a.pprof, "heap?debug=1", f); err != nil {
						t.Fatalf("an agent's MemStats at rest: %v", err)
					}
				}
			}
		}
		for k, set := range sets {
			rs[k].idleCPU = float64(agentCPU(t, set.agents)-cpu0[k]) / float64(idleTo.Sub(idleFrom)) / float64(len(set.agents)) * 100
			for _, a := range set.agents {
				rss, err := rssMB(a.node.AgentPID())
				if err != nil {
					t.Fatalf("the RSS of %s's agent at rest: %v", a.node.Name, err)
				}
				if a == set.limited {
					rs[k].limitedIdleRSSMB = rss
					continue
				}
				rs[k].idleRSSMB = max(rs[k].idleRSSMB, rss)
			}
		}
		cr.idleCPU = float64(cpuTime0(t, ctl.pid(t))-ctlIdle0) / float64(idleTo.Sub(idleFrom)) * 100
		if cr.queueIdle, _, err = ctl.queueDepth(ctx); err != nil {
			t.Fatalf("winnet-controller's queue depth at idle: %v", err)
		}
		time.Sleep(time.Second) // the audit log is written when a request completes
		n, what, err = controllerWrites(auditLog, idleFrom, idleTo)
		if err != nil {
			t.Fatalf("counting winnet-controller's idle writes at %d Pods: %v", size, err)
		}
		cr.idleWrites = float64(n) / idleTo.Sub(idleFrom).Minutes()
		fmt.Printf("bench-scale-info pods=%d: winnet-controller's writes in %v idle: %d (%s)\n", size, idleWindow, n, what)
		for k, set := range sets {
			n, what, err := agentWrites(auditLog, set.nodes(), idleFrom, idleTo)
			if err != nil {
				t.Fatalf("counting the idle writes of %s's agents at %d Pods: %v", set.name, size, err)
			}
			rs[k].idleWrites = float64(n) / idleTo.Sub(idleFrom).Minutes()
			fmt.Printf("bench-scale-info pods=%d %s: the agents' writes in %v idle: %d (%s)\n", size, set.name, idleWindow, n, what)
		}

		// One endpoint of one Service changed, endpointChanges times.
		epFrom := time.Now()
		for range endpointChanges {
			if err := w.changeEndpoint(ctx, 0, s.namespaces); err != nil {
				t.Fatalf("changing an endpoint at %d Pods: %v", size, err)
			}
			time.Sleep(endpointGap)
		}
		epTo := time.Now()
		time.Sleep(time.Second)
		for k, set := range sets {
			n, what, err := agentWrites(auditLog, set.nodes(), epFrom, epTo)
			if err != nil {
				t.Fatalf("counting the writes of %s's agents after endpoint changes at %d Pods: %v", set.name, size, err)
			}
			rs[k].epWrites = float64(n) / endpointChanges
			fmt.Printf("bench-scale-info pods=%d %s: the agents' writes in the %v after %d endpoint changes: %d (%s)\n", size, set.name,
				epTo.Sub(epFrom).Round(time.Second), endpointChanges, n, what)
		}

		// The full pass: a policy selecting local Pods, created probes times.
		passes := make([][]time.Duration, len(sets))
		for k := range probes {
			at := time.Now()
			np := probePolicy(fmt.Sprintf("probe-%d-%d", si, k), int32(20000+si*10+k), map[string]string{"role": "peer"}, nsName(0), "a0")
			if _, err := w.cs.NetworkingV1().NetworkPolicies(nsName(0)).Create(ctx, np, metav1.CreateOptions{}); err != nil {
				t.Fatalf("creating probe policy %s at %d Pods: %v", np.Name, size, err)
			}
			for j, set := range sets {
				first := set.agents[0].node
				for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
					ps, err := fullPasses(first.AgentLog(), at)
					if err != nil {
						t.Fatalf("reading the full passes in %s's agent log: %v", first.Name, err)
					}
					if len(ps) > 0 {
						passes[j] = append(passes[j], ps[0])
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("no full NetworkPolicy pass of %s logged in 3 minutes after a policy's creation", first.Name)
					}
				}
			}
			time.Sleep(2 * time.Second)
		}
		for k, set := range sets {
			rs[k].fullPass = median(passes[k])
			fmt.Printf("bench-scale-info pods=%d %s: full passes %v\n", size, set.name, passes[k])
		}

		firsts := make([]*agent, len(sets))
		for k, set := range sets {
			firsts[k] = set.agents[0]
		}
		for k, d := range burst(t, ctx, w, firsts, si, s) {
			rs[k].burst = d
		}

		// A new Node's route, until it is in every agent's switch.
		conv := routeConvergence(t, ctx, w, all, si)
		cr.routeConverge = slowest(conv)
		fmt.Printf("bench-scale-info pods=%d: a new Node's route in each agent's switch after %v\n", size, conv)

		// Churn, with the watches of one agent of each build and one kube-proxy counting: the
		// measured agent's are its node's Pods and its local policies' peer watches
		// (networkpolicy.PeerWatches of the same inputs), the reference's (main before issue 38)
		// every Pod.
		peers, err := w.peerWatches(ctx)
		if err != nil {
			t.Fatalf("computing the agent's peer watches at %d Pods: %v", size, err)
		}
		models := make([]*watchModel, len(sets))
		for k := range sets {
			specs := agentWatches(firsts[0].node.Name, peers)
			if k == 1 {
				specs = refAgentWatches(firsts[1].node.Name)
			}
			if models[k], err = startWatches(ctx, c.Config, specs); err != nil {
				t.Fatalf("opening the watch model of %s at %d Pods: %v", sets[k].name, size, err)
			}
		}
		proxyW, err := startWatches(ctx, c.Config, kubeProxyWatches(nodeName(0)))
		if err != nil {
			t.Fatalf("opening kube-proxy's watch model at %d Pods: %v", size, err)
		}
		// A Pod no local policy names (role other, in a namespace without local Pods) has its
		// status written unnamedUpdates times, as kubelet does: the events each agent's watches
		// receive for it.
		before := make([]int64, len(sets))
		for k := range sets {
			before[k] = models[k].events.Load()
		}
		// Object Pod 31: role other, in ns-0031 (beyond the local namespaces) when the first size
		// has more than 31 namespaces (1,920 Pods or more); below, every namespace holds local Pods.
		unnamed := 31
		for i := range unnamedUpdates {
			if err := w.touchStatus(ctx, w.podNamespaceOf(unnamed), fmt.Sprintf("p-%06d", unnamed), i); err != nil {
				t.Fatalf("writing the status of a Pod no policy names at %d Pods: %v", size, err)
			}
		}
		time.Sleep(2 * time.Second)
		for k := range sets {
			rs[k].unnamedEvents = float64(models[k].events.Load()-before[k]) / unnamedUpdates
		}
		fmt.Printf("bench-scale-info pods=%d: the measured agent's peer watches: %v\n", size, peers)
		churnCtx, stop := context.WithTimeout(ctx, churnWindow)
		churnStart := time.Now()
		writes, err := w.churn(churnCtx, 10, 5)
		stop()
		if err != nil {
			t.Fatalf("churn: %v", err)
		}
		elapsed := time.Since(churnStart).Seconds()
		proxyKBs := float64(proxyW.Stop()) / 1024 / elapsed
		fmt.Printf("bench-scale-info pods=%d: churn of %d writes in %.0f s\n", size, writes, elapsed)
		for k, set := range sets {
			rs[k].agentKBs, rs[k].proxyKBs = float64(models[k].Stop())/1024/elapsed, proxyKBs
			if set.limited != nil {
				rs[k].limitedCPURatio = limitedCPURatio(t, set)
			}
			line := strings.Replace(rs[k].String(), "bench-scale ", set.name+" ", 1)
			fmt.Println(line)
			lines = append(lines, line)
		}
		fmt.Println(cr.String())
		lines = append(lines, cr.String())
	}
	fmt.Printf("bench-scale-info: the run took %v\n", time.Since(start).Round(time.Second))
	for _, l := range lines {
		fmt.Println(l)
	}
}

// cpuTime0 is the CPU time of process pid; the test fails when it cannot be read.
func cpuTime0(t *testing.T, pid int) time.Duration {
	t.Helper()
	d, err := cpuTime(pid)
	if err != nil {
		t.Fatalf("the CPU time of pid %d: %v", pid, err)
	}
	return d
}

// agentCPU is the agents' CPU time together.
func agentCPU(t *testing.T, nodes []*agent) time.Duration {
	t.Helper()
	var sum time.Duration
	for _, a := range nodes {
		d, err := cpuTime(a.node.AgentPID())
		if err != nil {
			t.Fatalf("the CPU time of %s's agent: %v", a.node.Name, err)
		}
		sum += d
	}
	return sum
}

// limitedCPURatio is the CPU time of the set's limited agent since its start over the mean of its other
// agents', all read at one moment.
func limitedCPURatio(t *testing.T, set *agentSet) float64 {
	t.Helper()
	var limited, others time.Duration
	for _, a := range set.agents {
		pid := a.node.AgentPID()
		if pid == 0 {
			t.Fatalf("the agent of %s is not running", a.node.Name)
		}
		d := cpuTime0(t, pid)
		if a == set.limited {
			limited = d
		} else {
			others += d
		}
	}
	return float64(limited) / (float64(others) / float64(len(set.agents)-1))
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

// burst creates burstPods Pods in parallel, peers of the burst policy on the agents' Pods, and
// returns, for each agent, how long until its switch has a peer flow for every one of their
// addresses.
func burst(t *testing.T, ctx context.Context, w *writer, agents []*agent, si int, s shape) []time.Duration {
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
	out := make([]time.Duration, len(agents))
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
		done := true
		for i, a := range agents {
			if out[i] != 0 {
				continue
			}
			flows, err := a.node.OVS.DumpFlows(cluster.BridgeName, table)
			if err != nil {
				t.Fatalf("dumping the flows of %s's switch: %v", a.node.Name, err)
			}
			dump := strings.Join(flows, "\n") + "\n"
			missing := 0
			for _, ip := range addrs {
				if !strings.Contains(dump, "nw_src="+ip+",") && !strings.Contains(dump, "nw_src="+ip+" ") {
					missing++
				}
			}
			if missing == 0 {
				out[i] = time.Since(start)
				continue
			}
			done = false
			if time.Now().After(deadline) {
				// Reported, and the size's other numbers still printed (burst_converge_ms -1).
				var which []string
				for _, ip := range addrs {
					if !strings.Contains(dump, "nw_src="+ip+",") && !strings.Contains(dump, "nw_src="+ip+" ") {
						which = append(which, ip)
					}
				}
				t.Errorf("burst: %d of %d addresses still without a peer flow on %s after 5 minutes: %v", missing, burstPods, a.node.Name, which)
				out[i] = -time.Millisecond
			}
		}
		if done {
			return out
		}
	}
}

// copyFile keeps a log of the run, which goes with the cluster's run directory.
func copyFile(from, to string) {
	if data, err := os.ReadFile(from); err == nil {
		_ = os.WriteFile(to, data, 0o644)
	}
}
