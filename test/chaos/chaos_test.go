//go:build linux

package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/podendpoint"
	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/internal/pipeline"
	"github.com/winnet-io/winnet/test/e2e/cluster"
	"github.com/winnet-io/winnet/test/framework"
)

// RoundsEnv sets the number of rounds; `make test-chaos` runs 200, `make test` the default. FaultsEnv, for
// a person chasing one fault, limits the faults to those named (comma-separated, e.g. "winnet-agent").
const (
	RoundsEnv = "WINNET_CHAOS_ROUNDS"
	FaultsEnv = "WINNET_CHAOS_FAULTS"
)

const (
	defaultRounds = 3
	// concurrency is how many Pods are ADDed and DELed at once through the shim.
	concurrency = 8
	// settleTimeout bounds how long a round waits, after the faulted process is back, for the node to be
	// Ready, every live Pod reachable and every count back to the live Pods.
	settleTimeout = 45 * time.Second
	// delTimeout bounds how long a worker calls DEL again for one sandbox, as kubelet keeps doing; a sandbox
	// whose DEL never succeeds is a Pod stuck Terminating.
	delTimeout = 60 * time.Second
	// addAttempts bounds the sandboxes a worker tries for one Pod (each failed ADD is torn down with DEL and
	// a new sandbox made, as kubelet does).
	addAttempts = 20
)

// fault is a process of the node killed with SIGKILL at a random moment of a round, then started again as
// its service manager would.
type fault struct {
	name  string
	kill  func(n *cluster.Node) error
	start func(n *cluster.Node) error
}

var faults = []fault{
	{"winnet-agent", func(n *cluster.Node) error { _, err := n.KillAgent(syscall.SIGKILL); return err }, (*cluster.Node).StartAgent},
	{"ovs-vswitchd", func(n *cluster.Node) error { return n.OVS.KillVswitchd() }, func(n *cluster.Node) error { return n.OVS.StartVswitchd() }},
	{"ovsdb-server", func(n *cluster.Node) error { return n.OVS.KillOVSDB() }, func(n *cluster.Node) error { return n.OVS.StartOVSDB() }},
}

// counts are what the faulted node holds for Pods, each compared with the live Pods: leaked are held
// without a live Pod, missing are a live Pod's that are not held.
type counts struct {
	leaked, missing map[string][]string // by kind: addresses, OVS ports, HNS endpoints, flows, PodEndpoints, state entries
}

var kinds = []string{"addresses", "ports", "endpoints", "flows", "podendpoints", "state"}

func (c counts) total(m map[string][]string) int {
	n := 0
	for _, k := range kinds {
		n += len(m[k])
	}
	return n
}

func (c counts) String() string {
	var b strings.Builder
	for _, k := range kinds {
		fmt.Fprintf(&b, " %s=%d", k, len(c.leaked[k]))
	}
	return "leaked" + b.String()
}

// TestChaos ADDs and DELs Pods through the shim at concurrency 8 on node-a while, in turn, its winnet-agent,
// ovs-vswitchd and ovsdb-server are killed with SIGKILL at a random moment and started again. After each
// round settles, every live Pod must be reachable from node-b and node-a must hold exactly the live Pods'
// addresses, OVS ports, HNS endpoints, flows, PodEndpoints and state entries: one line per round, and the
// last line `test-chaos rounds=N pods=N leaked=N unreachable=N`.
func TestChaos(t *testing.T) {
	rounds := defaultRounds
	if v := os.Getenv(RoundsEnv); v != "" {
		var err error
		if rounds, err = strconv.Atoi(v); err != nil || rounds < 1 {
			t.Fatalf("%s=%q: want a positive number of rounds", RoundsEnv, v)
		}
	}
	ctx := context.Background()
	start := time.Now()
	// A copy of the binaries: a long run must not see a `make build` of the same tree replace them.
	binDir := t.TempDir()
	for _, b := range []string{"winnet-agent", "winnet-controller", "winnet-cni"} {
		if err := copyFile(filepath.Join(framework.RepoRoot(), "bin", "linux", b), filepath.Join(binDir, b)); err != nil {
			t.Fatalf("%v; run 'make build'", err)
		}
	}
	c, err := cluster.Start(ctx, cluster.Options{
		BinDir:       binDir,
		UnderlayCIDR: netip.MustParsePrefix("192.168.79.0/24"),
		Logf:         func(f string, a ...any) { t.Logf(f, a...) },
	})
	if err != nil {
		t.Fatalf("the chaos test needs a cluster on this machine: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", c.LogTails(80))
		}
		if err := c.Close(); err != nil {
			t.Errorf("tearing the cluster down: %v", err)
		}
	})
	a, err := c.AddNode(ctx, cluster.NodeSpec{Name: "node-a", IP: netip.MustParseAddr("192.168.79.11"), PodCIDR: netip.MustParsePrefix("10.244.1.0/24")})
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.AddNode(ctx, cluster.NodeSpec{Name: "node-b", IP: netip.MustParseAddr("192.168.79.12"), PodCIDR: netip.MustParsePrefix("10.244.2.0/24")})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	observer, err := c.AddPodWith(ctx, b, "observer", cluster.PodOptions{DNSPolicy: "Default"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster up in %v", time.Since(start).Round(time.Millisecond))

	chosen := faults
	if v := os.Getenv(FaultsEnv); v != "" {
		chosen = slices.DeleteFunc(slices.Clone(faults), func(f fault) bool { return !slices.Contains(strings.Split(v, ","), f.name) })
		if len(chosen) == 0 {
			t.Fatalf("%s=%q names none of the faults", FaultsEnv, v)
		}
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("random seed %d", seed)
	ch := &chaos{c: c, node: a, observer: observer, rng: rand.New(rand.NewPCG(seed, 23)), churnWindow: 1500 * time.Millisecond}
	var totalPods, totalLeaked, totalUnreachable, ran int
	table := map[string]*faultRow{}
	live := []*cluster.Pod{}
	for r := 1; r <= rounds; r++ {
		f := chosen[(r-1)%len(chosen)]
		res := ch.round(ctx, t, r, f, live)
		ran++
		live = res.live
		totalPods += res.added
		totalLeaked += res.counts.total(res.counts.leaked)
		totalUnreachable += res.unreachable
		if table[f.name] == nil {
			table[f.name] = &faultRow{leaked: map[string]int{}}
		}
		table[f.name].add(res)
		fmt.Printf("round %d fault=%s killed_at=%v of %v cni_calls_in_flight=%d back_after=%v live=%d adds=%d failed_adds=%d dels=%d del_retries=%d settled=%v unreachable=%d %s missing=%d\n",
			r, f.name, res.killedAt.Round(time.Millisecond), res.churn.Round(time.Millisecond), res.inFlight, res.downFor.Round(time.Millisecond),
			len(live), res.added, res.failedAdds, res.deleted, res.delRetries, res.settled.Round(time.Millisecond), res.unreachable, res.counts,
			res.counts.total(res.counts.missing))
		for _, k := range kinds {
			for _, what := range res.counts.leaked[k] {
				t.Errorf("round %d (%s killed): leaked %s: %s", r, f.name, k, what)
			}
			for _, what := range res.counts.missing[k] {
				t.Errorf("round %d (%s killed): missing %s: %s", r, f.name, k, what)
			}
		}
		if res.unreachable > 0 {
			t.Errorf("round %d (%s killed): %d live Pods not reachable from node-b within %v", r, f.name, res.unreachable, settleTimeout)
		}
		for _, e := range res.errs {
			t.Errorf("round %d (%s killed): %v", r, f.name, e)
		}
		if t.Failed() {
			break // the node is not in a state later rounds can be judged from
		}
	}
	t.Logf("%d rounds in %v", ran, time.Since(start).Round(time.Second))
	printTable(chosen, table, time.Since(start))
	fmt.Printf("test-chaos rounds=%d pods=%d leaked=%d unreachable=%d\n", ran, totalPods, totalLeaked, totalUnreachable)
}

// faultRow sums the rounds of one fault for the table printed at the end.
type faultRow struct {
	rounds, midCNI, adds, failedAdds, unreachable int
	leaked                                        map[string]int
	settled                                       []time.Duration
}

func (f *faultRow) add(res roundResult) {
	f.rounds++
	if res.inFlight > 0 {
		f.midCNI++
	}
	f.adds += res.added
	f.failedAdds += res.failedAdds
	f.unreachable += res.unreachable
	for _, k := range kinds {
		f.leaked[k] += len(res.counts.leaked[k])
	}
	f.settled = append(f.settled, res.settled)
}

// printTable prints the leak table, each line starting "chaos-table " for `make test-chaos` to show.
func printTable(chosen []fault, table map[string]*faultRow, took time.Duration) {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "FAULT (SIGKILL)\tROUNDS\tKILLED MID-CNI\tADDS\tFAILED ADDS\tUNREACHABLE\t%s\tSETTLED P50/MAX\n",
		strings.ToUpper(strings.Join(kinds, "\t")))
	for _, f := range chosen {
		r := table[f.name]
		if r == nil {
			continue
		}
		slices.Sort(r.settled)
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d", f.name, r.rounds, r.midCNI, r.adds, r.failedAdds, r.unreachable)
		for _, k := range kinds {
			fmt.Fprintf(w, "\t%d", r.leaked[k])
		}
		fmt.Fprintf(w, "\t%v/%v\n", r.settled[len(r.settled)/2].Round(100*time.Millisecond), r.settled[len(r.settled)-1].Round(100*time.Millisecond))
	}
	_ = w.Flush()
	for _, line := range strings.Split(strings.TrimRight(b.String(), "\n"), "\n") {
		fmt.Println("chaos-table " + line)
	}
	fmt.Printf("chaos-table took %v\n", took.Round(time.Second))
}

type chaos struct {
	c        *cluster.Cluster
	node     *cluster.Node
	observer *cluster.Pod
	rng      *rand.Rand
	// churnWindow is how long the last round's churn took: the fault strikes at a random moment of it.
	churnWindow time.Duration
	// inFlight counts the CNI calls under way.
	inFlight atomic.Int32
}

type roundResult struct {
	live                       []*cluster.Pod
	added, failedAdds, deleted int
	delRetries, unreachable    int
	killedAt, downFor, settled time.Duration
	// churn is how long the ADDs and DELs took; inFlight how many CNI calls were under way at the kill.
	churn    time.Duration
	inFlight int
	counts   counts
	errs     []error
}

// round deletes the previous round's live Pods and adds two Pods per worker, deleting the first of them at
// once, while the fault strikes; then it waits for the node to settle and counts.
func (ch *chaos) round(ctx context.Context, t *testing.T, r int, f fault, previous []*cluster.Pod) roundResult {
	var res roundResult
	var mu sync.Mutex
	fail := func(err error) {
		mu.Lock()
		res.errs = append(res.errs, err)
		mu.Unlock()
	}
	start := time.Now()
	// The fault strikes at a random moment of the churn.
	killAt := time.Duration(ch.rng.Int64N(int64(ch.churnWindow)))
	downFor := time.Duration(ch.rng.Int64N(int64(500 * time.Millisecond)))
	faultDone := make(chan struct{})
	go func() {
		defer close(faultDone)
		time.Sleep(killAt)
		res.killedAt = time.Since(start)
		res.inFlight = int(ch.inFlight.Load())
		if err := f.kill(ch.node); err != nil {
			fail(fmt.Errorf("killing %s: %w", f.name, err))
			return
		}
		time.Sleep(downFor) // the service manager's restart delay
		if err := f.start(ch.node); err != nil {
			fail(fmt.Errorf("starting %s again: %w", f.name, err))
		}
		res.downFor = time.Since(start) - res.killedAt
	}()

	var wg sync.WaitGroup
	for w := range concurrency {
		var mine []*cluster.Pod
		for i := w; i < len(previous); i += concurrency {
			mine = append(mine, previous[i])
		}
		names := []string{ch.name(r, w, 0), ch.name(r, w, 1)}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, p := range mine {
				retries, err := ch.deletePod(ctx, p)
				mu.Lock()
				res.delRetries += retries
				res.deleted++
				mu.Unlock()
				if err != nil {
					fail(err)
				}
			}
			for k, name := range names {
				p, failed, err := ch.addPod(ctx, name)
				mu.Lock()
				res.failedAdds += failed
				mu.Unlock()
				if err != nil {
					fail(err)
					continue
				}
				mu.Lock()
				res.added++
				mu.Unlock()
				if k == 0 { // deleted at once: DEL racing the vNIC's binding
					retries, err := ch.deletePod(ctx, p)
					mu.Lock()
					res.delRetries += retries
					res.deleted++
					mu.Unlock()
					if err != nil {
						fail(err)
					}
					continue
				}
				mu.Lock()
				res.live = append(res.live, p)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	res.churn = time.Since(start)
	ch.churnWindow = res.churn
	<-faultDone
	sort.Slice(res.live, func(i, j int) bool { return res.live[i].Name < res.live[j].Name })

	// Settle: the node Ready, every live Pod forwarding and reachable from node-b, the counts back to the
	// live Pods.
	settleStart := time.Now()
	deadline := settleStart.Add(settleTimeout)
	if err := ch.c.WaitReady(ctx, settleTimeout); err != nil {
		fail(fmt.Errorf("node not Ready after the fault: %w", err))
	}
	for _, p := range res.live {
		if err := ch.c.WaitPodForwarding(ctx, p, time.Until(deadline)); err != nil {
			fail(err)
		}
	}
	res.unreachable = ch.unreachable(res.live, deadline)
	for {
		res.counts = ch.count(ctx, t, res.live)
		if res.counts.total(res.counts.leaked)+res.counts.total(res.counts.missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	res.settled = time.Since(settleStart)
	return res
}

func (ch *chaos) name(r, w, k int) string {
	return fmt.Sprintf("r%d-w%d-%d", r, w, k)
}

// addPod creates the Pod and ADDs sandboxes until one succeeds; each failed one is torn down with DEL first, as
// the runtime does, and kubelet makes a new sandbox. It returns how many ADDs failed.
func (ch *chaos) addPod(ctx context.Context, name string) (*cluster.Pod, int, error) {
	p, err := ch.c.NewPod(ctx, ch.node, name, cluster.PodOptions{DNSPolicy: "Default"})
	if err != nil {
		return nil, 0, err
	}
	failed := 0
	for failed < addAttempts {
		ch.inFlight.Add(1)
		err := ch.c.CNIAdd(ctx, p, 30*time.Second)
		ch.inFlight.Add(-1)
		if err == nil {
			return p, failed, nil
		}
		failed++
		if _, err := ch.del(ctx, p); err != nil {
			return nil, failed, fmt.Errorf("tearing down the failed sandbox %s of Pod %s: %w", p.ContainerID, p.Name, err)
		}
		p.NewSandbox()
		time.Sleep(100 * time.Millisecond)
	}
	return nil, failed, fmt.Errorf("Pod %s: %d sandboxes failed to ADD, the last with: %w", p.Name, failed, err)
}

// del calls DEL for the Pod's sandbox until it succeeds, as kubelet does, up to delTimeout.
func (ch *chaos) del(ctx context.Context, p *cluster.Pod) (int, error) {
	deadline := time.Now().Add(delTimeout)
	for retries := 0; ; retries++ {
		ch.inFlight.Add(1)
		err := ch.c.CNIDel(ctx, p)
		ch.inFlight.Add(-1)
		if err == nil {
			return retries, nil
		}
		if time.Now().After(deadline) {
			return retries, fmt.Errorf("Pod %s stuck: DEL of sandbox %s failed for %v, the last time with: %w", p.Name, p.ContainerID, delTimeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// deletePod DELs the Pod's sandbox (retrying) and deletes the Pod.
func (ch *chaos) deletePod(ctx context.Context, p *cluster.Pod) (int, error) {
	retries, err := ch.del(ctx, p)
	if err != nil {
		return retries, err
	}
	return retries, ch.c.DeletePod(ctx, p)
}

// unreachable counts the live Pods the observer on node-b cannot ping before the deadline, and logs them.
func (ch *chaos) unreachable(live []*cluster.Pod, deadline time.Time) int {
	var wg sync.WaitGroup
	var mu sync.Mutex
	n := 0
	for _, p := range live {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if _, received, _ := cluster.Ping(ch.observer.Place(), p.IP, 1); received == 1 {
					return
				}
				if time.Now().After(deadline) {
					mu.Lock()
					n++
					mu.Unlock()
					fmt.Printf("unreachable: Pod %s (%s, sandbox %s, port %s)\n%s", p.Name, p.IP, p.ContainerID, podendpoint.EndpointName(p.ContainerID), ch.diagnose(p))
					return
				}
				time.Sleep(200 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	return n
}

// diagnose gathers what shows where a live Pod's traffic stops: its interface and neighbours, its OVS port and
// interface rows, the flows naming its address, and a trace of a ping from node-b arriving through the tunnel.
func (ch *chaos) diagnose(p *cluster.Pod) string {
	var b strings.Builder
	section := func(title, out string, err error) {
		fmt.Fprintf(&b, "--- %s\n%s", title, out)
		if err != nil {
			fmt.Fprintf(&b, "(error: %v)\n", err)
		}
	}
	out, err := p.Exec("ip", "-d", "link", "show")
	section("Pod links", out, err)
	out, err = p.Exec("ip", "neigh", "show")
	section("Pod neighbours", out, err)
	port := podendpoint.EndpointName(p.ContainerID)
	out, err = ch.node.OVS.Vsctl("--columns=name,type,ofport,ofport_request,mac_in_use,external_ids,error", "list", "Interface", port)
	section("OVS interface "+port, out, err)
	flows, err := ch.node.OVS.DumpFlows(cluster.BridgeName)
	var mine []string
	for _, f := range flows {
		if strings.Contains(f, p.IP.String()) {
			mine = append(mine, f)
		}
	}
	section("flows naming "+p.IP.String(), strings.Join(mine, "\n")+"\n", err)
	out, err = ch.node.OVS.Vsctl("--columns=name,ofport", "list", "Interface")
	section("all interfaces", out, err)
	return b.String()
}

// count compares what node-a holds for Pods with the live Pods.
func (ch *chaos) count(ctx context.Context, t *testing.T, live []*cluster.Pod) counts {
	n := ch.node
	want := map[string]map[string]bool{}
	for _, k := range kinds {
		want[k] = map[string]bool{}
	}
	ofports := map[uint64]bool{}
	for _, p := range live {
		ep := podendpoint.EndpointName(p.ContainerID)
		want["addresses"][p.IP.String()] = true
		want["ports"][ep] = true
		want["endpoints"][ep] = true
		want["podendpoints"][p.Name] = true
		want["state"][p.ContainerID] = true
		if out, err := n.OVS.Vsctl("get", "interface", ep, "ofport"); err == nil {
			if v, err := strconv.ParseUint(strings.TrimSpace(out), 10, 64); err == nil {
				ofports[v] = true
				want["flows"]["ofport "+strconv.FormatUint(v, 10)] = true
			}
		}
	}
	have := map[string]map[string]bool{}
	for _, k := range kinds {
		have[k] = map[string]bool{}
	}
	var errs []error
	// Addresses: host-local's store names a file after every address it gave.
	ipamFiles, err := filepath.Glob(filepath.Join(n.StateDir, "ipam", "*", "*"))
	errs = append(errs, err)
	for _, f := range ipamFiles {
		if ip, err := netip.ParseAddr(filepath.Base(f)); err == nil {
			have["addresses"][ip.String()] = true
		}
	}
	out, err := n.OVS.Vsctl("list-ports", cluster.BridgeName)
	errs = append(errs, err)
	for _, port := range strings.Fields(out) {
		if port != cluster.GatewayName && port != cluster.TunnelName && port != "uplink0" {
			have["ports"][port] = true
		}
	}
	var sim struct {
		Endpoints []struct {
			Name string `json:"name"`
		} `json:"endpoints"`
	}
	b, err := os.ReadFile(filepath.Join(n.StateDir, cluster.HNSStateFile))
	errs = append(errs, err)
	if err == nil {
		errs = append(errs, json.Unmarshal(b, &sim))
	}
	for _, ep := range sim.Endpoints {
		have["endpoints"][ep.Name] = true
	}
	flows, err := n.OVS.DumpFlows(cluster.BridgeName)
	errs = append(errs, err)
	for _, f := range flows {
		m := cookieRE.FindStringSubmatch(f)
		if m == nil {
			continue
		}
		cookie, _ := strconv.ParseUint(m[1], 16, 64)
		if openflow.CookieCategory(cookie) == pipeline.CategoryPod {
			obj := cookie & openflow.ObjectMask
			key := "ofport " + strconv.FormatUint(obj, 10)
			if !ofports[obj] {
				key += ": " + f
			}
			have["flows"][key] = true
		}
	}
	peps := &networkv1alpha1.PodEndpointList{}
	errs = append(errs, ch.c.Client.List(ctx, peps, client.InNamespace(cluster.PodNamespace)))
	for _, pep := range peps.Items {
		if pep.Spec.NodeName != n.Name {
			continue
		}
		// Keyed by Pod name (PodEndpoints are named <node>.<Pod UID>); a second record of the same
		// Pod is a leak.
		key := pep.Spec.PodName
		if have["podendpoints"][key] {
			key += " (another record " + pep.Name + ")"
		}
		have["podendpoints"][key] = true
	}
	records, err := filepath.Glob(filepath.Join(n.StateDir, "pods", "*.json"))
	errs = append(errs, err)
	for _, f := range records {
		have["state"][strings.TrimSuffix(filepath.Base(f), ".json")] = true
	}
	if err := errors.Join(errs...); err != nil {
		t.Logf("counting what node-a holds: %v", err)
	}
	res := counts{leaked: map[string][]string{}, missing: map[string][]string{}}
	for _, k := range kinds {
		for x := range have[k] {
			if !want[k][x] {
				res.leaked[k] = append(res.leaked[k], x)
			}
		}
		for x := range want[k] {
			if !have[k][x] {
				res.missing[k] = append(res.missing[k], x)
			}
		}
		slices.Sort(res.leaked[k])
		slices.Sort(res.missing[k])
	}
	return res
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o755)
}

var cookieRE = regexp.MustCompile(`cookie=0x([0-9a-f]+)`)
