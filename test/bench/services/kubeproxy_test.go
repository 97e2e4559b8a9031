//go:build linux && bench

package services

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/winnet-io/winnet/test/bench/benchutil"
	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/hostcmd"
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
	if err := hostcmd.Check("nft"); err != nil {
		t.Fatal(err)
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
	cmd := hostcmd.Command("ip", "netns", "exec", h.host.NS, h.bin,
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

// nftMonitor follows the kernel's nftables notifications in kube-proxy's namespace (netlink group
// NFNLGRP_NFTABLES): the kernel sends them once a transaction is committed, so the time one arrives
// is the time its rules reached the data path. This is what `nft monitor` prints, read without nft:
// nft monitor first lists the whole ruleset into its cache, which took 8+ minutes at 10,000
// Services on this machine, while the notifications themselves cost nothing to follow.
//
// It records when each endpoint address first appeared in a dnat map: kube-proxy 1.37 writes a
// Service's endpoints into its chain's rule (`dnat ip to numgen random mod 2 map { 0 : 10.128.0.1
// . 8080, ... }`), an anonymous map whose elements the kernel notifies as NFT_MSG_NEWSETELEM, each
// value an NFTA_DATA_VALUE attribute of 12 bytes: its header (length 12, type 1), the address, the
// port (network order) padded to 4 bytes (dnatValueHeader). winnet's side measures the same span:
// from the EndpointSlice write to the switch's commit of the bundle that carries the endpoint.
type nftMonitor struct {
	fd     int
	mu     sync.Mutex
	seen   map[netip.Addr]time.Time
	marker []byte // the name of a table whose notification tells the monitor is receiving
	ready  chan struct{}
	err    error // set when the kernel dropped notifications (the socket's buffer overran)
	closed chan struct{}
	done   chan struct{}
}

// dnatValueHeader starts an element value `<address> . <port>` of a dnat map in a notification:
// the NFTA_DATA_VALUE attribute's header (length 12, type 1, little-endian), followed by the
// address and the port in network order.
var dnatValueHeader = []byte{12, 0, 1, 0}

// monitor subscribes to kube-proxy's namespace's nftables notifications and returns once they
// arrive (checked with a marker table it adds and deletes). One monitor serves both measurements.
func (r *kubeProxyRun) monitor(t *testing.T) *nftMonitor {
	t.Helper()
	m := &nftMonitor{seen: map[netip.Addr]time.Time{}, ready: make(chan struct{}), closed: make(chan struct{}), done: make(chan struct{})}
	// The socket belongs to the namespace it is created in.
	if err := framework.InNS(r.h.host.NS, func() error {
		fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
		if err != nil {
			return err
		}
		m.fd = fd
		return unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1 << (unix.NFNLGRP_NFTABLES - 1)})
	}); err != nil {
		t.Fatalf("subscribing to nftables notifications in kube-proxy's namespace: %v", err)
	}
	// Room for a churn's bursts: an overrun loses notifications (reported, see err), and the
	// receive timeout lets stop end the reader.
	if err := unix.SetsockoptInt(m.fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 64<<20); err != nil {
		t.Fatal(err)
	}
	if err := unix.SetsockoptTimeval(m.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 200_000}); err != nil {
		t.Fatal(err)
	}
	marker := "bench_ready_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	m.marker = []byte(marker)
	go m.read()
	t.Cleanup(m.stop)
	startedAt := time.Now()
	if _, err := simnode.Exec(r.h.host.NS, "nft", "add", "table", "ip", marker); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = simnode.Exec(r.h.host.NS, "nft", "delete", "table", "ip", marker) }()
	select {
	case <-m.ready:
		fmt.Printf("bench-services nftables notifications followed in %s\n", time.Since(startedAt).Round(time.Millisecond))
		return m
	case <-time.After(30 * time.Second):
		t.Fatalf("no nftables notification for the table %s added in kube-proxy's namespace within 30 s", marker)
	}
	return nil
}

// read receives notifications until stop.
func (m *nftMonitor) read() {
	defer close(m.done)
	buf := make([]byte, 1<<20)
	receiving := false
	for {
		select {
		case <-m.closed:
			return
		default:
		}
		n, _, err := unix.Recvfrom(m.fd, buf, 0)
		now := time.Now()
		switch {
		case err == unix.EAGAIN || err == unix.EINTR:
			continue
		case err != nil:
			m.mu.Lock()
			if m.err == nil {
				m.err = fmt.Errorf("receiving nftables notifications: %w (ENOBUFS: the kernel dropped some)", err)
			}
			m.mu.Unlock()
			continue
		}
		msg := buf[:n]
		if !receiving && bytes.Contains(msg, m.marker) {
			close(m.ready)
			receiving = true
		}
		m.mu.Lock()
		for i := bytes.Index(msg, dnatValueHeader); i >= 0; {
			v := msg[i+len(dnatValueHeader):]
			if len(v) >= 6 && int(v[4])<<8|int(v[5]) == targetPort {
				addr := netip.AddrFrom4([4]byte(v[:4]))
				if _, ok := m.seen[addr]; !ok {
					m.seen[addr] = now
				}
			}
			j := bytes.Index(v, dnatValueHeader)
			if j < 0 {
				break
			}
			i += len(dnatValueHeader) + j
		}
		m.mu.Unlock()
	}
}

func (m *nftMonitor) stop() {
	select {
	case <-m.closed:
	default:
		close(m.closed)
		<-m.done
		_ = unix.Close(m.fd)
	}
}

// waitProgrammed returns when each of the addresses appeared, waiting for them up to the timeout;
// it fails the benchmark when the kernel dropped notifications.
func (m *nftMonitor) waitProgrammed(t *testing.T, addrs []netip.Addr, timeout time.Duration) map[netip.Addr]time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		m.mu.Lock()
		err := m.err
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
		if err != nil {
			t.Fatalf("following kube-proxy's nftables: %v", err)
		}
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
	addr, _, done, took, err := w.addEndpoint(ctx, objs, len(objs.slices)/2)
	if err != nil {
		t.Fatal(err)
	}
	at, ok := m.waitProgrammed(t, []netip.Addr{addr}, time.Minute)[addr]
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
	seen := m.waitProgrammed(t, written.current(), 30*time.Second)
	r.checkRunning(t)
	res := churnResult{changes: len(written.done), cpu: r.cpu(t) - cpu0}
	res.p50, res.p99, res.max = percentiles(latencies(t, "kube-proxy", written, seen))
	return res
}
