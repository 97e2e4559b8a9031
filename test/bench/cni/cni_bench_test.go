//go:build linux && bench

package cni

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	cnitypes "github.com/containernetworking/cni/pkg/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/podendpoint"
	"github.com/winnet-io/winnet/internal/agent"
	"github.com/winnet-io/winnet/internal/cni"
	"github.com/winnet-io/winnet/internal/hns"
	"github.com/winnet-io/winnet/internal/ovs/ovsdb"
	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/hostcmd"
	"github.com/winnet-io/winnet/test/simnode"
)

const (
	// pods is the number of ADD+DEL cycles per run.
	pods    = 200
	podCIDR = "10.98.0.0/22"
)

// TestBenchCNI runs the real winnet-agent binary on a simulated node (real OVS, netlink, API server)
// and times 200 Pods' CNI ADD and DEL through libcni and the real winnet-cni shim, at concurrency 1
// and 8, each Pod in its own network namespace; the floor is the same host work without winnet (the
// endpoint's veth, ovs-vsctl add-port, ovs-ofctl --bundle of the Pod's flows, and back: floorRun), at
// the same concurrency, in the same run; host-local IPAM alone is printed for information. For information, it then restarts the agent
// with simulated HNS latency (--hns-sim-latency) and runs concurrency 8 again; the last line printed
// is the run at concurrency 8 without latency.
func TestBenchCNI(t *testing.T) {
	server, err := framework.StartAPIServer()
	if err != nil {
		t.Fatalf("bench-cni needs a real kube-apiserver: %v", err)
	}
	defer func() { _ = server.Stop() }()
	binDir := t.TempDir()
	for _, cmd := range []string{"winnet-agent", "winnet-cni"} {
		build := hostcmd.Command("go", "build", "-o", filepath.Join(binDir, cmd), "./cmd/"+cmd)
		build.Dir = framework.RepoRoot()
		build.Env = append(os.Environ(), "GOTOOLCHAIN=local")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", cmd, err, out)
		}
	}
	underlay := simnode.NewUnderlay(t, netip.MustParsePrefix("192.168.41.0/24"))
	node := underlay.AddNode(t, "bench-cni", netip.MustParsePrefix("192.168.41.11/24"), simnode.NodeOptions{StartOVS: true})
	createNode(t, server.Client, node)
	dirs := t.TempDir()
	socket, confDir := filepath.Join(dirs, "run", "cni.sock"), filepath.Join(dirs, "net.d")
	logFile := filepath.Join(framework.RepoRoot(), "bin", "bench-cni-agent.log")
	metricsAddr := framework.FreeAddress(t)
	reader, err := server.NewMetricsReader(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	metrics := metricsEndpoint{reader: reader, address: metricsAddr}
	stopAgent := startAgent(t, filepath.Join(binDir, "winnet-agent"), logFile, node,
		"--kubeconfig", server.KubeconfigPath, "--cni-socket", socket, "--cni-conf-dir", confDir, "--state-dir", filepath.Join(dirs, "state"),
		"--audit-log-dir", filepath.Join(dirs, "audit"),
		"--metrics-bind-address", metricsAddr)
	list := waitConfList(t, filepath.Join(confDir, cni.ConfListName))

	namespaces := make([]string, 8)
	for i := range namespaces {
		namespaces[i] = fmt.Sprintf("%s-w%d", node.NS, i)
		if _, err := simnode.Exec("", "ip", "netns", "add", namespaces[i]); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = simnode.Exec("", "ip", "netns", "del", namespaces[i]) })
	}
	createPods(t, server.Client, node.Name)
	runtime := libcni.NewCNIConfigWithCacheDir([]string{binDir}, t.TempDir(), nil)
	db, err := ovsdb.New(context.Background(), ovsdb.Options{Address: node.OVS.DBSocket()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	sb := sandboxes{dir: filepath.Join(dirs, "state", agent.SimSandboxDir), db: db, node: node}

	var last string
	for _, conc := range []int{1, 8} {
		last = benchPass(t, runtime, list, conc, namespaces, sb, metrics, "")
	}
	if last == "" {
		t.Fatal("no run")
	}

	// For information, the run at concurrency 8 again with simulated HNS latency on every call: the
	// agent restarts with it, on the same state.
	stopAgent()
	if err := os.Remove(filepath.Join(confDir, cni.ConfListName)); err != nil {
		t.Fatal(err)
	}
	startAgent(t, filepath.Join(binDir, "winnet-agent"), filepath.Join(framework.RepoRoot(), "bin", "bench-cni-agent-latency.log"), node,
		"--kubeconfig", server.KubeconfigPath, "--cni-socket", socket, "--cni-conf-dir", confDir, "--state-dir", filepath.Join(dirs, "state"),
		"--audit-log-dir", filepath.Join(dirs, "audit"),
		"--metrics-bind-address", metricsAddr, "--hns-sim-latency", hnsLatency.String())
	list = waitConfList(t, filepath.Join(confDir, cni.ConfListName))
	benchPass(t, runtime, list, 8, namespaces, sb, metrics, "hns_latency="+hnsLatency.String()+" ")
	// The last line stays the run without latency.
	fmt.Println(last)
}

// hnsLatency is the simulated latency of every HNS call in the informational pass.
const hnsLatency = 20 * time.Millisecond

// benchPass times one run at concurrency conc, prints its lines (each after "bench-cni " and tag)
// and returns its summary line.
func benchPass(t *testing.T, runtime *libcni.CNIConfig, list *libcni.NetworkConfigList, conc int, namespaces []string, sb sandboxes, metrics metricsEndpoint, tag string) string {
	t.Helper()
	ipam := ipamRun(t, conc)
	floor := floorRun(t, sb.node, conc, namespaces)
	before, stepsBefore := cpuTimes(), scrapeSteps(t, metrics)
	retries.Store(0)
	add := cniRun(t, runtime, list, conc, namespaces, sb)
	fmt.Printf("bench-cni %sconc=%d: CPU seconds during the %.1f s of ADD+DEL: %s\n", tag, conc, add.total.Seconds(), cpuTimes().since(before))
	stepMeans := scrapeSteps(t, metrics).since(stepsBefore)
	if stepMeans == "" {
		t.Fatal("the agent's metrics have no winnet_cni_step_duration_seconds for the run")
	}
	fmt.Printf("bench-cni %sconc=%d: agent's mean ms per step (winnet_cni_step_duration_seconds): %s\n", tag, conc, stepMeans)
	p50, p99, ipamP99, floorP99 := add.percentile(50), add.percentile(99), ipam.percentile(99), floor.percentile(99)
	podsPerS, floorPodsPerS := float64(pods)/add.total.Seconds(), float64(pods)/floor.total.Seconds()
	fmt.Printf("bench-cni %sconc=%d: floor (veth, ovs-vsctl add-port, ovs-ofctl --bundle of the Pod's flows; and back) ADD p50 %.1f ms p99 %.1f ms, DEL p50 %.1f ms p99 %.1f ms, add-port p50 %.1f ms\n",
		tag, conc, ms(floor.percentile(50)), ms(floorP99), ms(floor.del.percentile(50)), ms(floor.del.percentile(99)), ms(floor.vnic.percentile(50)))
	last := fmt.Sprintf("bench-cni %sadds=%d conc=%d p50_ms=%.1f p99_ms=%.1f floor_p99_ms=%.1f ratio_p99=%.2f pods_per_s=%.0f floor_pods_per_s=%.0f ratio_pods_per_s=%.2f vnic_p99_ms=%.1f floor_vnic_p99_ms=%.1f",
		tag, pods, conc, ms(p50), ms(p99), ms(floorP99), float64(p99)/float64(floorP99), podsPerS, floorPodsPerS, podsPerS/floorPodsPerS,
		ms(add.vnic.percentile(99)), ms(floor.vnic.percentile(99)))
	fmt.Printf("bench-cni %sconc=%d: sandbox start to forwarding (the vNIC appears, the agent binds the port, OVS gives its ofport) p50 %.1f ms p99 %.1f ms\n",
		tag, conc, ms(add.vnic.percentile(50)), ms(add.vnic.percentile(99)))
	fmt.Printf("bench-cni %sconc=%d: ADD p50 %.1f ms p99 %.1f ms max %.1f ms, DEL p50 %.1f ms p99 %.1f ms, %d calls retried after \"try again later\"; host-local ADD p50 %.1f ms p99 %.1f ms, DEL p50 %.1f ms, ADD+DEL alone %.0f pods/s\n",
		tag, conc, ms(p50), ms(p99), ms(add.percentile(100)), ms(add.del.percentile(50)), ms(add.del.percentile(99)), retries.Load(), ms(ipam.percentile(50)), ms(ipamP99),
		ms(ipam.del.percentile(50)), float64(pods)/ipam.total.Seconds())
	fmt.Println(last)
	return last
}

// latencies are the durations of one run's calls and its wall time.
type latencies struct {
	d     []time.Duration
	total time.Duration
	del   *latencies
	// vnic are the times from each sandbox's start to its port forwarding.
	vnic   *latencies
	vnicMu sync.Mutex
}

// sandboxes starts Pod sandboxes as containerd does after ADD, and waits for their ports to forward.
type sandboxes struct {
	dir  string
	db   *ovsdb.Client
	node *simnode.Node
}

// start starts the sandbox of the namespace and returns how long its port took to forward.
func (s sandboxes) start(ctx context.Context, netns, sandbox string) (time.Duration, error) {
	start := time.Now()
	if err := hns.StartSandbox(s.dir, netns); err != nil {
		return 0, err
	}
	port := podendpoint.EndpointName(sandbox)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		// OVS reports an interface it could not open yet as an error; the agent binds it soon. The
		// harness looks again when the monitor brings an Interface change, so that it does not take
		// the CPU the agent and OVS are measured with.
		changed := s.db.InterfaceChanged()
		if _, err := s.db.WaitOFPort(wctx, port); err == nil {
			return time.Since(start), nil
		} else if wctx.Err() != nil {
			return 0, fmt.Errorf("the port %s did not forward within 10 s of its sandbox starting: %w", port, err)
		}
		select {
		case <-changed:
		case <-wctx.Done():
		case <-time.After(10 * time.Millisecond): // in case a reconnect replaces the cache
		}
	}
}

func (l *latencies) percentile(p int) time.Duration {
	s := slices.Clone(l.d)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(0, min(len(s)-1, i-1))]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// parallel runs work for 0..pods-1 on conc workers, each with its worker index, and records each
// call's duration.
func parallel(conc int, work func(worker, i int) (time.Duration, time.Duration, error)) (*latencies, error) {
	l := &latencies{d: make([]time.Duration, pods), del: &latencies{d: make([]time.Duration, pods)}}
	next := make(chan int)
	errs := make(chan error, conc)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range conc {
		wg.Go(func() {
			for i := range next {
				add, del, err := work(w, i)
				if err != nil {
					errs <- err
					for range next {
					}
					return
				}
				l.d[i], l.del.d[i] = add, del
			}
		})
	}
	for i := range pods {
		next <- i
	}
	close(next)
	wg.Wait()
	l.total = time.Since(start)
	close(errs)
	return l, <-errs
}

// cniRun adds and deletes every Pod through libcni and the shim; each worker reuses its network
// namespace, empty again after each DEL.
func cniRun(t *testing.T, runtime *libcni.CNIConfig, list *libcni.NetworkConfigList, conc int, namespaces []string, sb sandboxes) *latencies {
	t.Helper()
	ctx := context.Background()
	vnic := &latencies{}
	l, err := parallel(conc, func(w, i int) (time.Duration, time.Duration, error) {
		rt := &libcni.RuntimeConf{
			ContainerID: fmt.Sprintf("bench%d%057d", conc, i), NetNS: "/run/netns/" + namespaces[w], IfName: "eth0",
			Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", podName(i)}},
		}
		start := time.Now()
		if err := retried(func() error { _, err := runtime.AddNetworkList(ctx, list, rt); return err }); err != nil {
			return 0, 0, fmt.Errorf("ADD of Pod %d: %w", i, err)
		}
		added := time.Since(start)
		took, err := sb.start(ctx, rt.NetNS, rt.ContainerID)
		if err != nil {
			return 0, 0, fmt.Errorf("Pod %d: %w", i, err)
		}
		vnic.vnicMu.Lock()
		vnic.d = append(vnic.d, took)
		vnic.vnicMu.Unlock()
		start = time.Now()
		if err := retried(func() error { return runtime.DelNetworkList(ctx, list, rt) }); err != nil {
			return 0, 0, fmt.Errorf("DEL of Pod %d: %w", i, err)
		}
		deleted := time.Since(start)
		// The worker's namespace serves its next Pod: that sandbox is not started yet.
		if err := hns.StopSandbox(sb.dir, rt.NetNS); err != nil {
			return 0, 0, err
		}
		return added, deleted, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	l.vnic = vnic
	return l
}

// retries counts the calls repeated because the agent answered "try again later" (an HNS call that
// timed out), as kubelet repeats them; their time counts in the call's latency.
var retries atomic.Int32

// retried runs call until it succeeds, fails otherwise than with "try again later", or has been
// tried 5 times.
func retried(call func() error) error {
	for attempt := 1; ; attempt++ {
		err := call()
		var cniErr *cnitypes.Error
		if err == nil || attempt == 5 || !errors.As(err, &cniErr) || cniErr.Code != cnitypes.ErrTryAgainLater {
			return err
		}
		retries.Add(1)
		time.Sleep(100 * time.Millisecond)
	}
}

// ipamRun adds and deletes an address for every Pod with host-local alone: a network whose only
// plugin is host-local, called through libcni exactly like winnet's, so that the floor carries the
// same runtime-side costs (the plugin's exec, libcni's result cache).
func ipamRun(t *testing.T, conc int) *latencies {
	t.Helper()
	dirs := []string{"/opt/cni/bin", "/usr/lib/cni"}
	if _, err := invoke.FindInPath("host-local", dirs); err != nil {
		t.Fatalf("bench-cni needs host-local (Debian's containernetworking-plugins): %v", err)
	}
	conf, err := json.Marshal(map[string]any{
		"cniVersion": "1.0.0", "name": "bench-ipam",
		"plugins": []any{map[string]any{"type": "host-local",
			"ipam": map[string]any{"type": "host-local", "dataDir": t.TempDir(), "ranges": [][]map[string]string{{{"subnet": podCIDR}}}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	list, err := libcni.NetworkConfFromBytes(conf)
	if err != nil {
		t.Fatal(err)
	}
	runtime := libcni.NewCNIConfigWithCacheDir(dirs, t.TempDir(), nil)
	ctx := context.Background()
	l, err := parallel(conc, func(_, i int) (time.Duration, time.Duration, error) {
		rt := &libcni.RuntimeConf{ContainerID: fmt.Sprintf("ipam%d%057d", conc, i), NetNS: "/run/netns/none", IfName: "eth0"}
		start := time.Now()
		if _, err := runtime.AddNetworkList(ctx, list, rt); err != nil {
			return 0, 0, fmt.Errorf("host-local ADD: %w", err)
		}
		added := time.Since(start)
		start = time.Now()
		if err := runtime.DelNetworkList(ctx, list, rt); err != nil {
			return 0, 0, fmt.Errorf("host-local DEL: %w", err)
		}
		return added, time.Since(start), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func podName(i int) string { return fmt.Sprintf("bench-%03d", i) }

// createPods creates the Pod objects on the node, as they exist before kubelet sets their sandboxes
// up; their PodEndpoints are written while the bench runs.
func createPods(t *testing.T, c client.Client, nodeName string) {
	t.Helper()
	for i := range pods {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: podName(i), Namespace: "default"},
			Spec:       corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "c", Image: "pause"}}},
		}
		if err := c.Create(context.Background(), pod); err != nil {
			t.Fatal(err)
		}
	}
}

func createNode(t *testing.T, c client.Client, node *simnode.Node) {
	t.Helper()
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node.Name}, Spec: corev1.NodeSpec{PodCIDR: podCIDR, PodCIDRs: []string{podCIDR}}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &networkv1alpha1.WindowsNodeNetwork{
		ObjectMeta: metav1.ObjectMeta{Name: node.Name},
		Spec: networkv1alpha1.WindowsNodeNetworkSpec{
			PodCIDRs: []networkv1alpha1.CIDR{podCIDR}, NodeIP: networkv1alpha1.IPv4Address(node.NodeIP.Addr().String()),
			Bridge: networkv1alpha1.BridgeSpec{DatapathType: networkv1alpha1.DatapathTypeNetdev},
		},
	}); err != nil {
		t.Fatal(err)
	}
}

// startAgent runs the winnet-agent binary for the node, logging to logFile, until the test ends or
// the returned function stops it.
func startAgent(t *testing.T, bin, logFile string, node *simnode.Node, extra ...string) (stop func()) {
	t.Helper()
	f, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--node-name", node.Name, "--ovsdb", node.OVS.DBSocket(), "--ovs-rundir", node.OVS.Dir,
		"--netns", node.NSPath, "--health-probe-bind-address", "0", "--metrics-bind-address", "0"}, extra...)
	if level := os.Getenv("BENCH_AGENT_LOG_LEVEL"); level != "" { // e.g. 1 for the steps of each ADD
		args = append(args, "--zap-log-level", level)
	}
	if addr := os.Getenv("BENCH_AGENT_PPROF"); addr != "" { // e.g. 127.0.0.1:6060 to profile the agent
		args = append(args, "--pprof-bind-address", addr)
	}
	cmd := hostcmd.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting winnet-agent: %v", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
			_ = f.Close()
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitConfList waits for the agent to write the conflist (the node network is Ready) and loads it.
func waitConfList(t *testing.T, path string) *libcni.NetworkConfigList {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		list, err := libcni.ConfListFromFile(path)
		if err == nil {
			return list
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent wrote no conflist within a minute (see bin/bench-cni-agent.log): %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// cpu is the CPU time used so far by the bench's process, its exited children (the shim, host-local,
// ip) and each of its running children (kube-apiserver, etcd, ovsdb-server, ovs-vswitchd, the agent).
type cpu map[string]float64

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times.
const clockTicks = 100

func cpuTimes() cpu {
	c := cpu{}
	var self, children syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children)
	tv := func(r syscall.Rusage) float64 {
		return float64(r.Utime.Sec+r.Stime.Sec) + float64(r.Utime.Usec+r.Stime.Usec)/1e6
	}
	c["bench(libcni)"], c["exited(shim,host-local,ip)"] = tv(self), tv(children)
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		s := string(b)
		open, close := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || close < open {
			continue
		}
		fields := strings.Fields(s[close+2:])
		if len(fields) < 13 {
			continue
		}
		if ppid, _ := strconv.Atoi(fields[1]); ppid != os.Getpid() {
			continue
		}
		utime, _ := strconv.ParseFloat(fields[11], 64)
		stime, _ := strconv.ParseFloat(fields[12], 64)
		c[s[open+1:close]] += (utime + stime) / clockTicks
	}
	return c
}

// since renders the CPU used after before, largest first.
func (c cpu) since(before cpu) string {
	type use struct {
		name string
		s    float64
	}
	var uses []use
	for name, s := range c {
		uses = append(uses, use{name, s - before[name]})
	}
	slices.SortFunc(uses, func(a, b use) int { return int((b.s - a.s) * 1000) })
	var parts []string
	for _, u := range uses {
		parts = append(parts, fmt.Sprintf("%s=%.2f", u.name, u.s))
	}
	return strings.Join(parts, " ")
}

// steps are the sums and counts of the agent's step histogram, by "COMMAND step".
type steps map[string][2]float64

// metricsEndpoint is the agent's metrics endpoint and a reader allowed to scrape it.
type metricsEndpoint struct {
	reader  *framework.MetricsReader
	address string
}

// scrapeSteps reads winnet_cni_step_duration_seconds from the agent's metrics endpoint.
func scrapeSteps(t *testing.T, m metricsEndpoint) steps {
	t.Helper()
	body, err := m.reader.Scrape(context.Background(), m.address)
	if err != nil {
		t.Fatalf("scraping the agent's metrics: %v", err)
	}
	s := steps{}
	for _, line := range strings.Split(string(body), "\n") {
		name, rest, ok := strings.Cut(line, "{")
		if !ok || (name != "winnet_cni_step_duration_seconds_sum" && name != "winnet_cni_step_duration_seconds_count") {
			continue
		}
		labels, value, _ := strings.Cut(rest, "} ")
		var command, step string
		for _, kv := range strings.Split(labels, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "command":
				command = strings.Trim(v, `"`)
			case "step":
				step = strings.Trim(v, `"`)
			}
		}
		f, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		key, e := command+" "+step, s[command+" "+step]
		if strings.HasSuffix(name, "_sum") {
			e[0] = f
		} else {
			e[1] = f
		}
		s[key] = e
	}
	return s
}

// since renders the mean of each step over the calls made after earlier, ADD steps first.
func (s steps) since(earlier steps) string {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out []string
	for _, k := range keys {
		n := s[k][1] - earlier[k][1]
		if n == 0 {
			continue
		}
		out = append(out, fmt.Sprintf("%s=%.1f", strings.Replace(k, " ", ":", 1), (s[k][0]-earlier[k][0])/n*1000))
	}
	return strings.Join(out, " ")
}
