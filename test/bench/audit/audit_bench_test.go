//go:build linux && bench

package audit

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/auditlog"
	"github.com/winnet-io/winnet/test/bench/benchutil"
	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/hostcmd"
	"github.com/winnet-io/winnet/test/simnode"
)

// loadSeconds is how long each rate is offered.
const loadSeconds = 10

// loadgen opens new TCP connections at a rate: a non-blocking connect (one SYN), then close, so
// that each connection is one new 5-tuple and the client's kernel answers the SYN-ACK with a RST.
// It prints the connections opened and the seconds it took.
const loadgen = `
import socket, sys, time
dst, port, rate, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
n, sent, start = int(rate * secs), 0, time.perf_counter()
while sent < n:
    due = start + sent / rate
    now = time.perf_counter()
    if due > now:
        time.sleep(due - now)
    s = socket.socket()
    s.setblocking(False)
    s.connect_ex((dst, port))
    s.close()
    sent += 1
print(sent, time.perf_counter() - start)
`

// TestBenchAudit measures, in one run, new connections at 200 and 1,000 per second through an
// audited NetworkPolicy rule against the same with the audit log off.
func TestBenchAudit(t *testing.T) {
	ctx := context.Background()
	server, err := framework.StartAPIServer()
	if err != nil {
		t.Fatalf("bench-audit needs a real kube-apiserver: %v", err)
	}
	defer func() { _ = server.Stop() }()
	u := simnode.NewUnderlay(t, netip.MustParsePrefix("192.168.48.0/24"))
	// BENCH_AUDIT_RATE sets the log's rate and burst (lines/s): high, every decision is written.
	logOpts := auditlog.Options{}
	if v := os.Getenv("BENCH_AUDIT_RATE"); v != "" {
		r, err := strconv.Atoi(v)
		if err != nil || r < 1 {
			t.Fatalf("BENCH_AUDIT_RATE=%q: a positive number of lines per second", v)
		}
		logOpts.Rate, logOpts.Burst = float64(r), r
	}
	node := framework.StartPodNodeWith(t, server, u, "baudit-a", "192.168.48.11/24", "10.244.48.0/24", time.Minute,
		framework.PodNodeOptions{Agent: framework.AgentOptions{AuditLog: logOpts}})
	log := node.Agent.AuditLog
	if log == nil {
		t.Fatal("the agent has no audit log")
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench-audit"}}
	if err := server.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	web := node.AddPod(t, "web", framework.TestPodOptions{Namespace: ns.Name, Labels: map[string]string{"app": "web"}})
	clientPod := node.AddPod(t, "client", framework.TestPodOptions{Namespace: ns.Name, Labels: map[string]string{"app": "client"}})
	framework.Serve(t, web.NS, "web", 8080)
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "allow-client"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}}}}}},
		},
	}
	if err := server.Client.Create(ctx, np); err != nil {
		t.Fatal(err)
	}
	dst := netip.AddrPortFrom(web.IP, 8080)
	waitFor(t, "the policy admits the client", func() bool { _, err := framework.Ask(clientPod.NS, "tcp4", dst); return err == nil })
	vswitchd := benchutil.VswitchdPID(t, node.Node)
	self := os.Getpid()
	controllerFlows := func() int {
		flows, err := node.OVS.DumpFlows("br-int", "-O", "OpenFlow15")
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, f := range flows {
			if strings.Contains(f, "CONTROLLER:128") {
				n++
			}
		}
		return n
	}
	setAudit := func(on bool) {
		if err := server.Client.Get(ctx, client.ObjectKeyFromObject(ns), ns); err != nil {
			t.Fatal(err)
		}
		before := ns.DeepCopy()
		ns.Annotations = map[string]string{networkv1alpha1.AuditLogAnnotation: fmt.Sprint(on)}
		if err := server.Client.Patch(ctx, ns, client.MergeFrom(before)); err != nil {
			t.Fatal(err)
		}
		waitFor(t, fmt.Sprintf("audit %t in the switch", on), func() bool { return (controllerFlows() > 0) == on })
	}
	fmt.Printf("bench-audit-machine cpus=%d kernel=%s\n", runtime.NumCPU(), kernel())
	for _, rate := range []int{200, 1000} {
		for _, on := range []bool{false, true} {
			setAudit(on)
			time.Sleep(2 * time.Second) // the pass and its writes settle
			s0, a0, v0 := log.Stats(), benchutil.CPUTime(t, self, false), benchutil.CPUTime(t, vswitchd, false)
			start := time.Now()
			out, err := hostcmd.Command("ip", "netns", "exec", clientPod.NS, "/usr/bin/python3", "-c", loadgen,
				web.IP.String(), "8080", fmt.Sprint(rate), fmt.Sprint(loadSeconds)).CombinedOutput()
			if err != nil {
				t.Fatalf("load generator: %v: %s", err, out)
			}
			time.Sleep(auditlog.DefaultWindow + time.Second) // the last window is written
			elapsed := time.Since(start)
			s1, a1, v1 := log.Stats(), benchutil.CPUTime(t, self, false), benchutil.CPUTime(t, vswitchd, false)
			var sent int
			var secs float64
			if _, err := fmt.Sscan(string(out), &sent, &secs); err != nil {
				t.Fatalf("load generator said %q: %v", out, err)
			}
			pct := func(d time.Duration) float64 { return 100 * d.Seconds() / elapsed.Seconds() }
			fmt.Printf("bench-audit rate=%d audit=%s log_rate=%s offered=%.0f/s agent_cpu=%.1f%% vswitchd_cpu=%.1f%% packet_ins=%d lines=%d dropped_rate=%d dropped_queue=%d window=%.1fs load=%s\n",
				rate, onOff(on), logRate(logOpts), float64(sent)/secs, pct(a1-a0), pct(v1-v0), s1.PacketIns-s0.PacketIns, s1.Lines-s0.Lines,
				s1.DroppedRate-s0.DroppedRate, s1.DroppedQueue-s0.DroppedQueue, elapsed.Seconds(), loadavg())
		}
	}
}

func logRate(o auditlog.Options) string {
	if o.Rate == 0 {
		return fmt.Sprint(auditlog.DefaultRate)
	}
	return fmt.Sprint(o.Rate)
}

// loadavg is the machine's 1-minute load average.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !ok(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
	}
}

func kernel() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}

// Fairness: what a flood in one audited namespace costs another audited namespace of the node.
const (
	// floodRate is the flooding namespace's new connections a second (the top rate above).
	floodRate = 1000
	// quietRate is the other namespace's.
	quietRate = 20
)

// benchTenant is an audited namespace with a web Pod, a client Pod and a policy that admits the
// client.
type benchTenant struct {
	ns          string
	web, client *framework.TestPod
}

func newBenchTenant(t *testing.T, server *framework.APIServer, node *framework.PodNode, ns string) *benchTenant {
	t.Helper()
	ctx := context.Background()
	obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Annotations: map[string]string{networkv1alpha1.AuditLogAnnotation: "true"}}}
	if err := server.Client.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	b := &benchTenant{ns: ns,
		web:    node.AddPod(t, "web", framework.TestPodOptions{Namespace: ns, Labels: map[string]string{"app": "web"}}),
		client: node.AddPod(t, "client", framework.TestPodOptions{Namespace: ns, Labels: map[string]string{"app": "client"}})}
	framework.Serve(t, b.web.NS, "web", 8080)
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "allow-client"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}}}}}},
		},
	}
	if err := server.Client.Create(ctx, np); err != nil {
		t.Fatal(err)
	}
	dst := netip.AddrPortFrom(b.web.IP, 8080)
	waitFor(t, "the policy of "+ns+" admits its client", func() bool { _, err := framework.Ask(b.client.NS, "tcp4", dst); return err == nil })
	return b
}

// load opens new connections from the tenant's client to its web at rate for loadSeconds and
// returns how many it opened.
func (b *benchTenant) load(t *testing.T, rate int) int {
	t.Helper()
	out, err := hostcmd.Command("ip", "netns", "exec", b.client.NS, "/usr/bin/python3", "-c", loadgen,
		b.web.IP.String(), "8080", fmt.Sprint(rate), fmt.Sprint(loadSeconds)).CombinedOutput()
	if err != nil {
		t.Errorf("load generator: %v: %s", err, out)
		return 0
	}
	var sent int
	var secs float64
	if _, err := fmt.Sscan(string(out), &sent, &secs); err != nil {
		t.Errorf("load generator said %q: %v", out, err)
	}
	return sent
}

// decisionLines counts the decision lines (not summaries) of each namespace in the log.
func decisionLines(t *testing.T, path string) map[string]int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]int{}
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		var r auditlog.Record
		if err := json.Unmarshal(s.Bytes(), &r); err != nil {
			t.Fatalf("audit log line %q: %v", s.Text(), err)
		}
		if r.Action != "" { // a summary line has no action
			out[r.Namespace]++
		}
	}
	return out
}

// TestBenchAuditFairness measures, in one run, what namespace a's flood of new connections
// (floodRate a second) costs namespace b on the same node, both audited: b makes quietRate new
// connections a second alone (the reference), then during a's flood; each phase gives b's lines
// written per connection.
func TestBenchAuditFairness(t *testing.T) {
	server, err := framework.StartAPIServer()
	if err != nil {
		t.Fatalf("bench-audit needs a real kube-apiserver: %v", err)
	}
	defer func() { _ = server.Stop() }()
	u := simnode.NewUnderlay(t, netip.MustParsePrefix("192.168.49.0/24"))
	node := framework.StartPodNodeWith(t, server, u, "baudit-f", "192.168.49.11/24", "10.244.49.0/24", time.Minute, framework.PodNodeOptions{})
	log := node.Agent.AuditLog
	if log == nil {
		t.Fatal("the agent has no audit log")
	}
	flood, quiet := newBenchTenant(t, server, node, "bench-flood"), newBenchTenant(t, server, node, "bench-quiet")
	waitFor(t, "both namespaces audited in the switch", func() bool {
		flows, err := node.OVS.DumpFlows("br-int", "-O", "OpenFlow15")
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, f := range flows {
			if strings.Contains(f, "CONTROLLER:128") {
				n++
			}
		}
		return n == 4
	})
	for _, flooded := range []bool{false, true} {
		time.Sleep(2 * time.Second) // the pass and its writes settle
		l0, s0 := decisionLines(t, log.Path()), log.Stats()
		start := time.Now()
		var floodSent int
		done := make(chan struct{})
		go func() {
			defer close(done)
			if flooded {
				floodSent = flood.load(t, floodRate)
			}
		}()
		quietSent := quiet.load(t, quietRate)
		<-done
		time.Sleep(auditlog.DefaultWindow + time.Second) // the last window is written
		elapsed := time.Since(start)
		l1, s1 := decisionLines(t, log.Path()), log.Stats()
		quietLines, floodLines := l1[quiet.ns]-l0[quiet.ns], l1[flood.ns]-l0[flood.ns]
		phase, rate := "alone", 0
		if flooded {
			phase, rate = "flooded", floodRate
		}
		fmt.Printf("bench-audit-fairness phase=%s flood_rate=%d quiet_rate=%d quiet_connections=%d quiet_lines=%d quiet_written=%.2f flood_connections=%d flood_lines=%d packet_ins=%d dropped_rate=%d dropped_queue=%d window=%.1fs load=%s\n",
			phase, rate, quietRate, quietSent, quietLines, float64(quietLines)/float64(max(quietSent, 1)), floodSent, floodLines,
			s1.PacketIns-s0.PacketIns, s1.DroppedRate-s0.DroppedRate, s1.DroppedQueue-s0.DroppedQueue, elapsed.Seconds(), loadavg())
	}
}
