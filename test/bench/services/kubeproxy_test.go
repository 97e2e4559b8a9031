//go:build linux && bench

package services

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/winnet-io/winnet/test/bench/benchutil"
	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/simnode"
)

// kubeProxyBinary is the kube-proxy that hack/setup-test-deps.sh builds with the argument
// kube-proxy (make bench-services runs it), next to kube-apiserver.
func kubeProxyBinary(t *testing.T) string {
	t.Helper()
	assets, err := framework.AssetsDir()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(assets, "kube-proxy")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("bench-services needs kube-proxy at %s: run `hack/setup-test-deps.sh kube-proxy` (make bench-services does)", bin)
	}
	if _, err := exec.LookPath("nft"); err != nil {
		t.Fatal("bench-services needs nft (Debian's nftables): run `hack/setup-test-deps.sh kube-proxy` (make bench-services does)")
	}
	return bin
}

// kubeProxyHost is the namespace kube-proxy runs in, on the underlay: a node of its own, named
// "kp", whose nftables only kube-proxy writes. The API server listens on the host's loopback; a
// forwarder on the namespace's loopback, same port, brings kube-proxy to it with the admin
// kubeconfig unchanged (its certificate is for 127.0.0.1).
type kubeProxyHost struct {
	host       *simnode.Host
	bin        string
	kubeconfig string
	cur        *kubeProxyRun
}

func newKubeProxyHost(t *testing.T, s *framework.APIServer, u *simnode.Underlay, bin string, ip netip.Prefix) *kubeProxyHost {
	t.Helper()
	h := &kubeProxyHost{host: u.AddHost(t, "kp", ip), bin: bin, kubeconfig: s.KubeconfigPath}
	api, err := url.Parse(s.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	var l net.Listener
	if err := framework.InNS(h.host.NS, func() error {
		var err error
		l, err = net.Listen("tcp", api.Host)
		return err
	}); err != nil {
		t.Fatalf("listening on %s in kube-proxy's namespace: %v", api.Host, err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go forward(l, api.Host)
	// kube-proxy reads its node's addresses from its Node.
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "kp"}}
	if err := s.Client.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip.Addr().String()}}
	if err := s.Client.Status().Update(ctx, node); err != nil {
		t.Fatal(err)
	}
	return h
}

// forward accepts connections on l (in kube-proxy's namespace) and joins each to addr in the
// test's namespace.
func forward(l net.Listener, addr string) {
	for {
		in, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer in.Close()
			out, err := net.Dial("tcp", addr)
			if err != nil {
				return
			}
			defer out.Close()
			go func() { _, _ = io.Copy(out, in) }()
			_, _ = io.Copy(in, out)
		}()
	}
}

// kubeProxyRun is a running kube-proxy.
type kubeProxyRun struct {
	h      *kubeProxyHost
	cmd    *exec.Cmd
	pid    int
	exited chan struct{}
	start  time.Time
	log    string
}

// start starts kube-proxy in nftables mode with its defaults (a sync at most once a second), on
// a namespace without any nftables ruleset left from a previous run.
func (h *kubeProxyHost) start(t *testing.T, tag string) *kubeProxyRun {
	t.Helper()
	if _, err := simnode.Exec(h.host.NS, "nft", "flush", "ruleset"); err != nil {
		t.Fatalf("flushing kube-proxy's namespace's nftables: %v", err)
	}
	logFile := filepath.Join(framework.RepoRoot(), "bin", "bench-services-kube-proxy-"+tag+".log")
	f, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	cmd := exec.Command("ip", "netns", "exec", h.host.NS, h.bin,
		"--kubeconfig", h.kubeconfig, "--proxy-mode", "nftables", "--hostname-override", "kp",
		"--cluster-cidr", "10.244.0.0/16",
		"--metrics-bind-address", "127.0.0.1:10249", "--healthz-bind-address", "127.0.0.1:10256",
		// The namespace shares the host's conntrack table size: leave it as it is.
		"--conntrack-max-per-core", "0", "--v", "2")
	cmd.Stdout, cmd.Stderr = f, f
	r := &kubeProxyRun{h: h, cmd: cmd, exited: make(chan struct{}), log: logFile}
	r.start = time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting kube-proxy: %v", err)
	}
	r.pid = cmd.Process.Pid // ip netns exec execs kube-proxy in its own process
	go func() {
		_ = cmd.Wait()
		close(r.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-r.exited
	})
	h.cur = r
	return r
}

// stop stops the running kube-proxy.
func (h *kubeProxyHost) stop() {
	if h.cur != nil {
		_ = h.cur.cmd.Process.Kill()
		<-h.cur.exited
		h.cur = nil
	}
}

// cpu is kube-proxy's CPU time, with the nft processes it ran.
func (r *kubeProxyRun) cpu(t *testing.T) time.Duration { return benchutil.CPUTime(t, r.pid, true) }

func (r *kubeProxyRun) checkRunning(t *testing.T) {
	t.Helper()
	select {
	case <-r.exited:
		out, _ := os.ReadFile(r.log)
		t.Fatalf("kube-proxy exited: %s", out)
	default:
	}
}

// waitCold returns the time from kube-proxy's start until every Service of the scenario is in the
// kernel: an element of its service-ips map (polled every 100 ms with nft list map). kube-proxy
// writes a sync in one nftables transaction, so the Service's chains and endpoints came with it.
func (r *kubeProxyRun) waitCold(t *testing.T, objs *scenario) time.Duration {
	t.Helper()
	want := len(objs.services)
	element := fmt.Sprintf(" . tcp . %d : goto service-", servicePort)
	deadline := r.start.Add(15 * time.Minute)
	for {
		r.checkRunning(t)
		out, err := simnode.Exec(r.h.host.NS, "nft", "list", "map", "ip", "kube-proxy", "service-ips")
		now := time.Now()
		if err == nil { // before kube-proxy's first sync the map does not exist
			if n := strings.Count(out, element); n == want {
				return now.Sub(r.start)
			} else if n > want {
				t.Fatalf("%d Services in kube-proxy's service-ips map for %d", n, want)
			}
		}
		if now.After(deadline) {
			t.Fatalf("kube-proxy did not program %d Services within 15 minutes", want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// endpointRE finds the endpoints of a rule that DNATs: kube-proxy 1.37 writes a Service's
// endpoints into its rule (`dnat ip to numgen random mod 2 map { 0 : 10.128.0.1 . 8080, ... }`);
// earlier versions had a rule per endpoint (`dnat to 10.128.0.1:8080`).
var endpointRE = regexp.MustCompile(`(\d+\.\d+\.\d+\.\d+)(?: \. |:)` + strconv.Itoa(targetPort) + `\b`)

// nftMonitor is `nft monitor` in kube-proxy's namespace: it prints each transaction once the
// kernel committed it. It records when each endpoint first appeared in a dnat rule.
type nftMonitor struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	seen map[netip.Addr]time.Time
	done chan struct{}
}

// monitor starts nft monitor and returns once it reports changes (a marker table it adds). One
// monitor serves both measurements: at 10,000 Services it takes minutes to start.
func (r *kubeProxyRun) monitor(t *testing.T) *nftMonitor {
	t.Helper()
	m := &nftMonitor{seen: map[netip.Addr]time.Time{}, done: make(chan struct{})}
	m.cmd = exec.Command("ip", "netns", "exec", r.h.host.NS, "nft", "monitor")
	out, err := m.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	m.cmd.Stderr = os.Stderr
	if err := m.cmd.Start(); err != nil {
		t.Fatalf("starting nft monitor: %v", err)
	}
	t.Cleanup(m.stop)
	copyTo, err := os.Create(filepath.Join(framework.RepoRoot(), "bin", "bench-services-nft-monitor.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = copyTo.Close() })
	marker := "bench_ready_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	ready := make(chan struct{})
	go func() {
		defer close(m.done)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		readyClosed := false
		for sc.Scan() {
			now := time.Now()
			line := sc.Text()
			fmt.Fprintln(copyTo, line)
			if !readyClosed && strings.Contains(line, marker) {
				close(ready)
				readyClosed = true
			}
			if !strings.Contains(line, " dnat ") {
				continue
			}
			m.mu.Lock()
			for _, a := range endpointRE.FindAllStringSubmatch(line, -1) {
				addr := netip.MustParseAddr(a[1])
				if _, ok := m.seen[addr]; !ok {
					m.seen[addr] = now
				}
			}
			m.mu.Unlock()
		}
	}()
	// nft monitor first reads the whole ruleset: at 10,000 Services on a loaded machine that takes
	// minutes (nft list of kube-proxy's table takes as long).
	startedAt := time.Now()
	deadline := time.After(10 * time.Minute)
	for {
		if _, err := simnode.Exec(r.h.host.NS, "nft", "add", "table", "ip", marker); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ready:
			_, _ = simnode.Exec(r.h.host.NS, "nft", "delete", "table", "ip", marker)
			fmt.Printf("bench-services nft monitor ready in %s\n", time.Since(startedAt).Round(time.Millisecond))
			return m
		case <-time.After(100 * time.Millisecond): // added before the monitor subscribed: again
			_, _ = simnode.Exec(r.h.host.NS, "nft", "delete", "table", "ip", marker)
		case <-deadline:
			t.Fatal("nft monitor reported nothing within 10 minutes")
		}
	}
}

func (m *nftMonitor) stop() {
	if m.cmd.Process != nil {
		_ = m.cmd.Process.Kill()
		<-m.done
	}
}

// programmed returns when each of the addresses appeared, waiting for them up to the timeout.
func (m *nftMonitor) waitProgrammed(addrs []netip.Addr, timeout time.Duration) map[netip.Addr]time.Time {
	deadline := time.Now().Add(timeout)
	for {
		m.mu.Lock()
		all := true
		for _, a := range addrs {
			if _, ok := m.seen[a]; !ok {
				all = false
				break
			}
		}
		out := make(map[netip.Addr]time.Time, len(m.seen))
		for a, ts := range m.seen {
			out[a] = ts
		}
		m.mu.Unlock()
		if all || time.Now().After(deadline) {
			return out
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// addEndpoint adds one endpoint to the Service in the middle of the scenario and measures the time
// to its Service's dnat rule with it in the kernel.
func (r *kubeProxyRun) addEndpoint(t *testing.T, ctx context.Context, w *writer, objs *scenario, m *nftMonitor) increment {
	t.Helper()
	addr, done, took, err := w.addEndpoint(ctx, objs, len(objs.slices)/2)
	if err != nil {
		t.Fatal(err)
	}
	at, ok := m.waitProgrammed([]netip.Addr{addr}, time.Minute)[addr]
	if !ok {
		t.Fatalf("kube-proxy did not program the added endpoint %s within a minute", addr)
	}
	return increment{took: max(0, at.Sub(done)), write: took}
}

// churn runs the churn and measures each change from its write to its Service's dnat rule with
// the new endpoint in the kernel.
func (r *kubeProxyRun) churn(t *testing.T, ctx context.Context, w *writer, objs *scenario, d time.Duration, m *nftMonitor) churnResult {
	t.Helper()
	cpu0 := r.cpu(t)
	written := churnWrites(t, ctx, w, objs, d)
	seen := m.waitProgrammed(written.current(), 30*time.Second)
	r.checkRunning(t)
	res := churnResult{changes: len(written.done), cpu: r.cpu(t) - cpu0}
	res.p50, res.p99, res.max = percentiles(latencies(t, "kube-proxy", written, seen))
	return res
}
