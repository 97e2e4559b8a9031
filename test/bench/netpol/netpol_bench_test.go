//go:build linux && bench

package netpol

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"net/netip"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/networkpolicy"
	"github.com/winnet-io/winnet/internal/pipeline"
	"github.com/winnet-io/winnet/test/bench/benchutil"
	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/simnode"
)

// The scales of the issue (#21): one policy of cidrRules ipBlock peers; policies policies on a node
// with localPods Pods, each selecting selected of them and allowing remotePods remote Pods.
const (
	cidrRules     = 5000
	policies      = 1000
	namespaces    = 50
	localPods     = 200
	selected      = 100
	remotePods    = 1000
	podSets       = 20 // distinct selections of `selected` local Pods, overlapping
	workers       = 16 // concurrent API writers when creating objects in bulk
	benchNode     = "bnp-a"
	joinerAddress = "10.245.200.1" // the remote Pod whose address joins the selected set
)

// TestBenchNetpol runs winnet-agent (in this process) on a simulated node with real OVS against
// a real API server and measures, from the objects written to the API server to the flows in the
// switch: one policy with 5,000 ipBlock rules (against ovs-ofctl --bundle add-flows of the same
// flows), 1,000 policies, and one address added to the peers of all of them.
func TestBenchNetpol(t *testing.T) {
	ctx := context.Background()
	logFile := filepath.Join(framework.RepoRoot(), "bin", "bench-netpol-agent.log")
	lf, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	ctrl.SetLogger(zap.New(zap.WriteTo(lf), zap.Level(zapcore.InfoLevel), func(o *zap.Options) {
		o.TimeEncoder = zapcore.RFC3339NanoTimeEncoder
		o.EncoderConfigOptions = append(o.EncoderConfigOptions, func(c *zapcore.EncoderConfig) { c.EncodeDuration = millis })
	}))
	server, err := framework.StartAPIServer()
	if err != nil {
		t.Fatalf("bench-netpol needs a real kube-apiserver: %v", err)
	}
	defer func() { _ = server.Stop() }()
	c := server.Client
	u := simnode.NewUnderlay(t, netip.MustParsePrefix("192.168.46.0/24"))
	node := framework.StartPodNode(t, server, u, benchNode, "192.168.46.11/24", "10.244.46.0/24", time.Minute)

	mustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "perf"}})
	mustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench"}})
	for i := range namespaces {
		mustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: remoteNamespace(i), Labels: map[string]string{"bench": "remote"}}})
	}

	// BENCH_NETPOL_PARTS=counters runs (b) and the counters' measurement only.
	countersOnly := os.Getenv("BENCH_NETPOL_PARTS") == "counters"

	// (a) One policy, one ingress rule, 5,000 ipBlock /32 peers, selecting two local Pods.
	var ours, ofctl time.Duration
	if !countersOnly {
		ours, ofctl = benchCIDR(t, ctx, server, node, logFile)
	}

	// (c) One policy admitting 0.0.0.0/0 except 4,000 /32s (about 150 KB): its realisation, its
	// flows against ovs-ofctl, and the agent's CPU in the 30 s that follow against 30 s idle.
	exceptLine := ""
	if !countersOnly {
		exceptLine = benchExcept(t, ctx, c, node, logFile)
	}
	if os.Getenv("BENCH_NETPOL_PARTS") == "except" {
		fmt.Println(exceptLine)
		return
	}

	// (b) 1,000 policies over 200 local Pods (each selecting 100), allowing 1,000 remote Pods.
	rnd := rand.New(rand.NewSource(21))
	member := make([][]bool, podSets)
	for s := range member {
		member[s] = make([]bool, localPods)
		for _, j := range rnd.Perm(localPods)[:selected] {
			member[s][j] = true
		}
	}
	addStart := time.Now()
	for j := range localPods {
		labels := map[string]string{}
		for s := range podSets {
			if member[s][j] {
				labels[fmt.Sprintf("set%d", s)] = "in"
			}
		}
		node.AddPod(t, fmt.Sprintf("local-%03d", j), framework.TestPodOptions{Namespace: "bench", Labels: labels})
	}
	fmt.Printf("bench-netpol: %d local Pods attached through CNI in %v\n", localPods, time.Since(addStart).Round(time.Millisecond))
	mustParallel(t, remotePods+1, func(i int) error {
		ns, name, role, ip := remoteNamespace(i), fmt.Sprintf("remote-%04d", i), "peer", fmt.Sprintf("10.245.%d.%d", i/250, 1+i%250)
		if i == remotePods {
			name, role, ip = "joiner", "idle", joinerAddress
		}
		return createRemotePod(ctx, c, ns, name, role, ip)
	})

	stopProfile := startProfile(t, "policies")
	// The last policy has a port of its own: its flow appears when it is realised, and with it every
	// policy created before it (the agent's cache sees them in order).
	lastSeen := benchutil.MonitorFlow(t, ctx, node.Node, networkv1alpha1.DefaultBridgeName, fmt.Sprintf("table=%d,tcp,tp_dst=9999", pipeline.IngressRuleTable))
	start := time.Now()
	mustParallel(t, policies-1, func(i int) error { return c.Create(ctx, benchPolicy(i, 8000+i%10)) })
	mustCreate(t, c, benchPolicy(policies-1, 9999))
	created := time.Since(start)
	at, ok := <-lastSeen
	if !ok {
		t.Fatal("the flows of the 1,000 policies did not appear")
	}
	policiesTime := at.Sub(start)
	wnn := &networkv1alpha1.WindowsNodeNetwork{}
	if err := c.Get(ctx, client.ObjectKey{Name: benchNode}, wnn); err != nil {
		t.Fatal(err)
	}
	policyFlows := benchutil.DumpCategoryFlows(t, node.Node, networkv1alpha1.DefaultBridgeName, pipeline.CategoryPolicy, filepath.Join(t.TempDir(), "policies.flows"))
	fmt.Printf("bench-netpol policies=%d: flows present %d ms after the first policy's creation (creating them took %d ms); %d policy flows\n",
		policies, policiesTime.Milliseconds(), created.Milliseconds(), policyFlows)
	countersLine := benchCounters(t, node)
	if countersOnly {
		fmt.Println(countersLine)
		return
	}

	// One address added to the selected peers of every policy: the joiner gets the peers' label.
	time.Sleep(2 * time.Second) // let the passes that followed the creations end
	joined := benchutil.MonitorFlow(t, ctx, node.Node, networkv1alpha1.DefaultBridgeName, fmt.Sprintf("table=%d,ip,nw_src=%s", pipeline.IngressRuleTable, joinerAddress))
	joiner := &corev1.Pod{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: remoteNamespace(remotePods), Name: "joiner"}, joiner); err != nil {
		t.Fatal(err)
	}
	// A plain watch of the joiner, beside the agent's informer: when the API server delivers the
	// change to a watcher that does nothing else.
	watched := watchPod(t, ctx, server, joiner)
	before := joiner.DeepCopy()
	joiner.Labels = map[string]string{"role": "peer"}
	start = time.Now()
	if err := c.Patch(ctx, joiner, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	patched := time.Since(start)
	at, ok = <-joined
	if !ok {
		flows, _ := node.OVS.DumpFlows(networkv1alpha1.DefaultBridgeName, "-O", "OpenFlow15", fmt.Sprintf("table=%d,ip,nw_src=%s", pipeline.IngressRuleTable, joinerAddress))
		t.Fatalf("the flow monitor did not see the added address's flow (see its last lines above); the switch has %q; the agent's first pass after the change: %+v",
			flows, syncedPass(t, logFile, start))
	}
	incr := at.Sub(start)
	stopProfile()
	incrPass := syncedPass(t, logFile, start)
	watchAt, ok := <-watched
	if !ok {
		t.Fatal("the plain watch of the joiner saw no change")
	}
	fmt.Printf("bench-netpol added one address to the peers of %d policies: flow present %.1f ms after the label change (the agent's pass, from the Pod event to its bundle committed: %.1f ms), %d flow mods in the agent's pass\n",
		policies, benchutil.MS(incr), incrPass.Latency, incrPass.FlowMods)
	fmt.Printf("bench-netpol added one address: steps, in ms from the patch call: patch returned %.1f; a plain watch saw the change %.1f; %s; then ovs-vswitchd answered an echo in %.1f (median of 5)\n",
		benchutil.MS(patched), benchutil.MS(watchAt.Sub(start)), incrPass.steps(start, at), benchutil.MS(benchutil.SwitchEcho(t, node.Node, networkv1alpha1.DefaultBridgeName)))
	fmt.Printf("bench-netpol load average at the end: %s (the numbers are only comparable on a quiet machine)\n", benchutil.LoadAverage())
	fmt.Printf("bench-netpol cidr_rules=%d ours_ms=%d ofctl_ms=%d ratio=%.2f policies=%d policies_ms=%d incr_ms=%.1f incr_msgs=%d\n",
		cidrRules, ours.Milliseconds(), ofctl.Milliseconds(), float64(ours)/float64(ofctl), policies, policiesTime.Milliseconds(), benchutil.MS(incr), incrPass.FlowMods)
	fmt.Println(exceptLine)
	fmt.Println(countersLine)
}

// benchCIDR is (a): one policy with 5,000 ipBlock /32 peers selecting two local Pods, from its
// creation to its flows in the switch, against ovs-ofctl --bundle add-flows of the same flows.
func benchCIDR(t *testing.T, ctx context.Context, server *framework.APIServer, node *framework.PodNode, logFile string) (ours, ofctl time.Duration) {
	t.Helper()
	c := server.Client
	for i := range 2 {
		node.AddPod(t, fmt.Sprintf("perf-%d", i), framework.TestPodOptions{Namespace: "perf", Labels: map[string]string{"app": "perf"}})
	}
	np, last := cidrPolicy()
	time.Sleep(2 * time.Second) // let the passes that followed the Pods' attachment end
	seen := benchutil.MonitorFlow(t, ctx, node.Node, networkv1alpha1.DefaultBridgeName, fmt.Sprintf("table=%d,ip,nw_src=%s", pipeline.IngressRuleTable, last))
	// BENCH_NETPOL_PROFILE=cidr profiles this process (the agent included) over the 5,000-rule
	// policy's realisation, =policies over the 1,000 policies and the added address.
	stopProfile := startProfile(t, "cidr")
	policyWatched := watchPolicies(t, ctx, server, np.Namespace)
	start := time.Now()
	mustCreate(t, c, np)
	created := time.Since(start)
	at, ok := <-seen
	if !ok {
		t.Fatal("the flows of the 5,000-rule policy did not appear")
	}
	ours = at.Sub(start)
	stopProfile()
	cidrPass := syncedPass(t, logFile, start)
	policyWatchAt, ok := <-policyWatched
	if !ok {
		t.Fatal("the plain watch of the policies saw no creation")
	}
	fmt.Printf("bench-netpol cidr_rules=%d: steps, in ms from the create call: create returned %.1f; a plain watch saw the policy %.1f; %s; then ovs-vswitchd answered an echo in %.1f (median of 5)\n",
		cidrRules, benchutil.MS(created), benchutil.MS(policyWatchAt.Sub(start)), cidrPass.steps(start, at), benchutil.MS(benchutil.SwitchEcho(t, node.Node, networkv1alpha1.DefaultBridgeName)))
	flowFile := filepath.Join(t.TempDir(), "policy.flows")
	n := benchutil.DumpCategoryFlows(t, node.Node, networkv1alpha1.DefaultBridgeName, pipeline.CategoryPolicy, flowFile)
	ofctl = benchutil.OfctlReference(t, node.Node, flowFile)
	fmt.Printf("bench-netpol cidr_rules=%d: flows present %d ms after the policy's creation (the agent's pass, from the event to its bundle committed: %.1f ms, of which reading the caches %.1f ms, compiling %.1f ms, the bundle %.1f ms); ovs-ofctl --bundle add-flows of the same %d flows: %d ms\n",
		cidrRules, ours.Milliseconds(), cidrPass.Latency, cidrPass.Read, cidrPass.Compute, cidrPass.Sync, n, ofctl.Milliseconds())
	if err := c.Delete(ctx, np); err != nil {
		t.Fatal(err)
	}
	return ours, ofctl
}

// benchCounters measures the per-rule counters at the rule count of the 1,000 policies: their flows
// in the metric tables, and a scrape of the agent's metrics (its registry's Gather) when the
// counters' cache has expired (the switch is read) against one served from the cache.
func benchCounters(t *testing.T, node *framework.PodNode) string {
	t.Helper()
	counterFlows := 0
	for _, table := range []uint8{pipeline.EgressMetricTable, pipeline.IngressMetricTable} {
		flows, err := node.OVS.DumpFlows(networkv1alpha1.DefaultBridgeName, "-O", "OpenFlow15", fmt.Sprintf("table=%d", table))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range flows {
			if strings.Contains(f, "ct_label=") {
				counterFlows++
			}
		}
	}
	// Scrapes that read the switch (the cache expired before each) against scrapes answered from
	// the cache, each the median of counterScrapes.
	var reads, cachedReads []time.Duration
	series := 0
	for range counterScrapes {
		time.Sleep(networkpolicy.CounterCacheTTL + 100*time.Millisecond) // no read cached
		start := time.Now()
		families, err := ctrlmetrics.Registry.Gather()
		reads = append(reads, time.Since(start))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			if f.GetName() == "winnet_policy_rule_packets_total" {
				series = len(f.GetMetric())
			}
		}
		start = time.Now()
		if _, err := ctrlmetrics.Registry.Gather(); err != nil {
			t.Fatal(err)
		}
		cachedReads = append(cachedReads, time.Since(start))
	}
	slices.Sort(reads)
	slices.Sort(cachedReads)
	fmt.Printf("bench-netpol-counters: %d scrapes reading the switch: %v; from the cache: %v\n", counterScrapes, reads, cachedReads)
	return fmt.Sprintf("bench-netpol-counters policies=%d counter_flows=%d series=%d scrape_ms=%.1f cached_scrape_ms=%.1f (medians of %d)",
		policies, counterFlows, series, benchutil.MS(reads[len(reads)/2]), benchutil.MS(cachedReads[len(cachedReads)/2]), counterScrapes)
}

// counterScrapes is how many scrapes of each kind benchCounters times.
const counterScrapes = 9

// excepts is the number of /32 exceptions of the except policy: the agent's limit per rule.
const excepts = 4000

// benchExcept measures the except policy on the perf Pods and returns its summary line.
func benchExcept(t *testing.T, ctx context.Context, c client.Client, node *framework.PodNode, logFile string) string {
	t.Helper()
	time.Sleep(2 * time.Second) // let the passes that followed the last deletion end
	idle := cpuPercent(30 * time.Second)
	rnd := rand.New(rand.NewSource(4000))
	seen := map[string]bool{}
	var except []string
	for len(except) < excepts {
		ip := fmt.Sprintf("%d.%d.%d.%d", 1+rnd.Intn(223), rnd.Intn(256), rnd.Intn(256), 1+rnd.Intn(254))
		if seen[ip] || strings.HasPrefix(ip, "10.") || strings.HasPrefix(ip, "127.") {
			continue
		}
		seen[ip] = true
		except = append(except, ip+"/32")
	}
	// Its port is its own: the port's clause flow is in the same bundle as the rest of the policy,
	// whatever the agent compiles the exceptions to.
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "perf", Name: "except"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "perf"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: except}}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(9998))}},
			}},
		},
	}
	realised := benchutil.MonitorFlow(t, ctx, node.Node, networkv1alpha1.DefaultBridgeName, fmt.Sprintf("table=%d,tcp,tp_dst=9998", pipeline.IngressRuleTable))
	start := time.Now()
	mustCreate(t, c, np)
	at, ok := <-realised
	if !ok {
		t.Fatal("the flows of the except policy did not appear")
	}
	realise := at.Sub(start)
	after := cpuPercent(30 * time.Second)
	flowFile := filepath.Join(t.TempDir(), "except.flows")
	n := benchutil.DumpCategoryFlows(t, node.Node, networkv1alpha1.DefaultBridgeName, pipeline.CategoryPolicy, flowFile)
	ofctl := benchutil.OfctlReference(t, node.Node, flowFile)
	fmt.Printf("bench-netpol-except excepts=%d: the agent's CPU over 30 s idle before the policy: %.1f%%; after its realisation: %.1f%%; load average %s\n",
		excepts, idle, after, benchutil.LoadAverage())
	if err := c.Delete(ctx, np); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("bench-netpol-except excepts=%d realise_ms=%d flows=%d ofctl_ms=%d agent_cpu_pct_30s_after=%.1f",
		excepts, realise.Milliseconds(), n, ofctl.Milliseconds(), after)
}

// cpuPercent is the CPU this process (the agent, and the bench's idle goroutines) used over d, in
// percent of one core.
func cpuPercent(d time.Duration) float64 {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			return 0
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	before, start := cpu(), time.Now()
	time.Sleep(d)
	return 100 * float64(cpu()-before) / float64(time.Since(start))
}

// startProfile starts a CPU profile of this process into bin/bench-netpol-<part>.cpu.pprof when
// BENCH_NETPOL_PROFILE is part, and returns what stops it.
func startProfile(t *testing.T, part string) func() {
	t.Helper()
	if os.Getenv("BENCH_NETPOL_PROFILE") != part {
		return func() {}
	}
	f, err := os.Create(filepath.Join(framework.RepoRoot(), "bin", "bench-netpol-"+part+".cpu.pprof"))
	if err != nil {
		t.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		t.Fatal(err)
	}
	return func() { pprof.StopCPUProfile(); _ = f.Close() }
}

func remoteNamespace(i int) string { return fmt.Sprintf("remote-%02d", i%namespaces) }

// cidrPolicy is Antrea's RealizeNetworkPolicy shape: one ingress rule from cidrRules distinct
// random /32 ipBlocks, selecting the Pods app=perf. It returns the policy and its last address.
func cidrPolicy() (*networkingv1.NetworkPolicy, string) {
	rnd := rand.New(rand.NewSource(5000))
	seen := map[string]bool{}
	var peers []networkingv1.NetworkPolicyPeer
	var last string
	for len(peers) < cidrRules {
		ip := fmt.Sprintf("%d.%d.%d.%d", 1+rnd.Intn(223), rnd.Intn(256), rnd.Intn(256), 1+rnd.Intn(254))
		if seen[ip] || strings.HasPrefix(ip, "10.") || strings.HasPrefix(ip, "127.") {
			continue
		}
		seen[ip] = true
		last = ip
		peers = append(peers, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: ip + "/32"}})
	}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "perf", Name: "cidrs"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "perf"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: peers}},
		},
	}, last
}

// benchPolicy is the i-th of the 1,000: it selects the local Pods of set i%podSets and admits the
// remote Pods labelled role=peer on TCP port.
func benchPolicy(i, port int) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: fmt.Sprintf("p-%04d", i)},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{fmt.Sprintf("set%d", i%podSets): "in"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{{
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"bench": "remote"}},
					PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"role": "peer"}},
				}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(int32(port)))}},
			}},
		},
	}
}

// createRemotePod writes a Pod of another node with its address, as the scheduler and kubelet would.
func createRemotePod(ctx context.Context, c client.Client, ns, name, role, ip string) error {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"role": role}},
		Spec:       corev1.PodSpec{NodeName: "bnp-remote", Containers: []corev1.Container{{Name: "c", Image: "pause"}}},
	}
	if err := c.Create(ctx, p); err != nil {
		return err
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.PodIP = ip
	p.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	return c.Status().Update(ctx, p)
}

func mustCreate(t *testing.T, c client.Client, obj client.Object) {
	t.Helper()
	if err := c.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
}

// pass is what the agent logged of a NetworkPolicy pass ("Synced NetworkPolicy flows"): its flow
// mods and, in ms, its latency (from the change the agent saw to its bundle committed) and, for a
// full pass, its steps.
type pass struct {
	TS                                   time.Time `json:"ts"`
	Msg                                  string    `json:"msg"`
	FlowMods                             int       `json:"flowMods"`
	Latency, Queued, Read, Compute, Sync float64
	// Locked, Written and Answered are, within Sync, when the incremental path's change took the
	// bridge's lock, was written to the switch and had its answer read.
	Locked, Written, Answered float64
}

// steps renders the pass's steps as times from start (the bench's API call) and the time the
// flow monitor saw the flow, at: the agent's event handler (the pass's latency counts from it),
// the pass starting, reading the caches (full pass only), compiling, the bundle committed, and
// the log line written just after.
func (p pass) steps(start, at time.Time) string {
	event := benchutil.MS(p.TS.Sub(start)) - p.Latency
	read := event + p.Queued + p.Read
	s := fmt.Sprintf("the agent's handler saw the event %.1f; its pass started %.1f", event, event+p.Queued)
	if p.Read > 0 {
		s += fmt.Sprintf("; read the caches %.1f", read)
	}
	s += fmt.Sprintf("; compiled %.1f", read+p.Compute)
	if p.Written > 0 {
		s += fmt.Sprintf("; took the bridge's lock %.1f; written to the switch %.1f; its answer read %.1f",
			read+p.Compute+p.Locked, read+p.Compute+p.Written, read+p.Compute+p.Answered)
	}
	return s + fmt.Sprintf("; committed %.1f (logged %.1f); the flow monitor saw the flow %.1f",
		read+p.Compute+p.Sync, benchutil.MS(p.TS.Sub(start)), benchutil.MS(at.Sub(start)))
}

// watchPod watches pod from its current version with a client of its own and sends the time of
// the first change it sees.
func watchPod(t *testing.T, ctx context.Context, server *framework.APIServer, pod *corev1.Pod) <-chan time.Time {
	t.Helper()
	w, err := plainClient(t, server).CoreV1().Pods(pod.Namespace).Watch(ctx, metav1.ListOptions{
		FieldSelector: "metadata.name=" + pod.Name, ResourceVersion: pod.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	return firstEvent(t, w, watch.Modified)
}

// watchPolicies watches the NetworkPolicies of namespace ns with a client of its own and sends the
// time of the first creation it sees.
func watchPolicies(t *testing.T, ctx context.Context, server *framework.APIServer, ns string) <-chan time.Time {
	t.Helper()
	cs := plainClient(t, server)
	list, err := cs.NetworkingV1().NetworkPolicies(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := cs.NetworkingV1().NetworkPolicies(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	return firstEvent(t, w, watch.Added)
}

// plainClient is a client of its own for the bench's watches, speaking protobuf as the agent's
// client does for built-in kinds.
func plainClient(t *testing.T, server *framework.APIServer) *kubernetes.Clientset {
	t.Helper()
	cfg := rest.CopyConfig(server.Config)
	cfg.ContentType = runtime.ContentTypeProtobuf
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// firstEvent sends the time of w's first event of type typ and stops w.
func firstEvent(t *testing.T, w watch.Interface, typ watch.EventType) <-chan time.Time {
	t.Cleanup(w.Stop)
	seen := make(chan time.Time, 1)
	go func() {
		defer close(seen)
		for ev := range w.ResultChan() {
			if ev.Type == typ {
				seen <- time.Now()
				return
			}
		}
	}()
	return seen
}

// syncedPass returns the agent's first NetworkPolicy pass that changed the switch after since.
func syncedPass(t *testing.T, logFile string, since time.Time) pass {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		f, err := os.Open(logFile)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var entry pass
			if json.Unmarshal(sc.Bytes(), &entry) == nil && entry.Msg == "Synced NetworkPolicy flows" && entry.TS.After(since) {
				f.Close()
				return entry
			}
		}
		f.Close()
	}
	t.Fatal("the agent logged no NetworkPolicy pass after the change")
	return pass{}
}

// millis logs durations in milliseconds, to the microsecond (syncedPass reads them).
func millis(d time.Duration, enc zapcore.PrimitiveArrayEncoder) { enc.AppendFloat64(benchutil.MS(d)) }

// mustParallel runs f(0..n-1) on `workers` goroutines and fails on the first error.
func mustParallel(t *testing.T, n int, f func(int) error) {
	t.Helper()
	if err := benchutil.Parallel(0, n, workers, f); err != nil {
		t.Fatal(err)
	}
}
