//go:build soak && linux

package upgrade

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	cnpv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/winnet-io/winnet/test/e2e/cluster"
	"github.com/winnet-io/winnet/test/framework"
)

// The soak (make soak): the upgrade test's cluster and workload on this tree's release, under
// ordinary churn for SOAK_MINUTES, sampled every 30 s (soak_sample_linux_test.go) into
// bin/soak/samples.csv and one picture per quantity; at the end the churn stops, the cluster settles
// and what it holds is compared with what its objects need.

// soakDir holds the soak's CSV, pictures and dumps.
var soakDir = filepath.Join(framework.RepoRoot(), "bin", "soak")

// soakMinutes and soakRate: the run's length (SOAK_MINUTES, default 120) and the short-lived Pods
// it starts a second at most (SOAK_RATE, default 0.5; what the real kubelets sustain is measured).
func soakMinutes(t *testing.T) float64 { return envFloat(t, "SOAK_MINUTES", 120) }
func soakRate(t *testing.T) float64    { return envFloat(t, "SOAK_RATE", 0.5) }

func envFloat(t *testing.T, name string, def float64) float64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f <= 0 {
		t.Fatalf("%s=%q: want a positive number", name, v)
	}
	return f
}

// churnStats counts what the churn did and what failed, for the summary line.
type churnStats struct {
	podsCreated, podsFailed atomic.Int64
	scales, rollouts        atomic.Int64
	policyChanges, traces   atomic.Int64
	churnErrors             atomic.Int64
	mu                      sync.Mutex
	firstErrors             []string
}

func (s *churnStats) fail(format string, args ...any) {
	s.churnErrors.Add(1)
	msg := fmt.Sprintf(format, args...)
	logf("churn: %s", msg)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.firstErrors) < 10 {
		s.firstErrors = append(s.firstErrors, msg)
	}
}

// TestSoak runs the soak; it fails on what must never happen (a policy violation, a leak, a node that
// stays not Ready, an unreachable pair at the end, a fresh agent computing other flows) and prints
// one `soak ...` line with the goals' numbers, which it does not assert.
func TestSoak(t *testing.T) {
	logPrefix, dumpDir = "soak", soakDir
	minutes, rate := soakMinutes(t), soakRate(t)
	must(t, os.MkdirAll(soakDir, 0o755))
	ctx := context.Background()
	start := time.Now()
	c, err := cluster.Start(ctx, cluster.Options{Logf: logf, Kubelets: true, Release: cluster.CurrentRelease(), AgentReadiness: true,
		UnderlayCIDR: netip.MustParsePrefix("192.168.85.0/24"), ClusterCIDR: netip.MustParsePrefix("10.249.0.0/16")})
	if err != nil {
		t.Fatalf("starting the cluster: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", c.LogTails(60))
		}
		if err := c.Close(); err != nil {
			t.Errorf("tearing the cluster down: %v", err)
		}
	})
	pprof := map[string]string{}
	w := setUp(t, c, func(node string) []string {
		addr := freeLoopback(t)
		pprof[node] = addr
		return []string{"--pprof-bind-address", addr}
	})
	nodePort := w.addRollout(t)
	logf("cluster up in %v; soaking %.0f minutes at %.2f short-lived Pods a second at most", time.Since(start).Round(time.Second), minutes, rate)

	s := newSampler(w, pprof)
	stats := &churnStats{}
	external := netip.AddrPortFrom(kubeA.IP, uint16(nodePort))

	// The reference: the same probes with nothing churning, on this machine at this moment.
	idleFor := time.Duration(envFloat(t, "SOAK_IDLE_MINUTES", 2) * float64(time.Minute))
	p := w.startSoakProbes(t, external)
	s.every(contextFor(ctx, idleFor), 30*time.Second)
	idle := p.finish(t, "idle")

	p = w.startSoakProbes(t, external)
	churnStart := time.Now()
	runCtx, stopChurn := context.WithTimeout(ctx, time.Duration(minutes*float64(time.Minute)))
	defer stopChurn()
	var wg sync.WaitGroup
	for _, loop := range []func(context.Context, *churnStats){
		func(ctx context.Context, st *churnStats) { w.churnShortPods(ctx, st, rate) },
		w.churnScale, w.churnRollout, w.churnPolicies, w.churnTraces,
	} {
		wg.Add(1)
		go func() { defer wg.Done(); loop(runCtx, stats) }()
	}
	s.every(runCtx, 30*time.Second)
	wg.Wait()
	churnEnd := time.Now()
	logf("churn stopped after %v; settling", churnEnd.Sub(churnStart).Round(time.Second))

	// The end: the churn's objects gone, the cluster settled, the probes' totals, and what the nodes
	// hold against what the objects need.
	w.endChurn(t)
	if err := w.c.WaitReady(ctx, readyTimeout); err != nil {
		t.Errorf("the nodes are not Ready after the churn: %v", err)
	}
	churned := p.finish(t, "churn")
	s.addCounts("cluster", "pings_lost_per_30s", append(idle.lostAt, churned.lostAt...), 30*time.Second)
	violations := idle.violations + churned.violations
	if violations > 0 {
		t.Errorf("%d connections the policies deny got through during the soak", violations)
	}
	leaks := w.leaks(t)
	for _, l := range leaks {
		t.Errorf("leaked: %s", l)
	}
	unreachable := w.matrix(t, external)
	staleCT, staleCTLong := s.staleConntrack(ctx)
	fresh := w.freshFlows(t)
	s.sampleOnce(ctx) // the settled state, the last row
	if err := s.write(); err != nil {
		t.Errorf("writing the samples: %v", err)
	}
	sum := s.summary(churnStart, churnEnd)
	stats.mu.Lock()
	for _, e := range stats.firstErrors {
		logf("  churn error: %s", e)
	}
	stats.mu.Unlock()
	line := fmt.Sprintf("soak minutes=%.0f pods_created=%d pods_per_s=%.2f pod_failures=%d rollouts=%d scales=%d policy_changes=%d traces=%d %s leaked=%d unreachable=%d stale_ct=%d stale_ct_long=%d fresh_flow_diffs=%d violations=%d %s %s churn_errors=%d load_avg=%.1f",
		churnEnd.Sub(churnStart).Minutes(), stats.podsCreated.Load(), float64(stats.podsCreated.Load())/churnEnd.Sub(churnStart).Seconds(), stats.podsFailed.Load(),
		stats.rollouts.Load(), stats.scales.Load(), stats.policyChanges.Load(), stats.traces.Load(),
		sum, len(leaks), unreachable, staleCT, staleCTLong, fresh, violations, idle.fields("idle_"), churned.fields(""), stats.churnErrors.Load(), s.meanLoad())
	fmt.Println(line)
	must(t, os.WriteFile(filepath.Join(soakDir, "summary.txt"), []byte(line+"\n"), 0o644))
	if unreachable > 0 {
		t.Errorf("%d pairs of the connectivity matrix are unreachable after the soak", unreachable)
	}
	if fresh > 0 {
		t.Errorf("a fresh agent computes other flows, groups or ports than the soaked one had (%d lines; bin/soak/*.txt)", fresh)
	}
}

// soakProbes are the upgrade test's probes and the NodePort from the external host, for one window.
type soakProbes struct {
	*probes
	nodePort *cluster.TickProbe
	start    time.Time
}

func (w *world) startSoakProbes(t *testing.T, nodePort netip.AddrPort) *soakProbes {
	return &soakProbes{probes: w.startProbes(t), start: time.Now(),
		nodePort: cluster.StartTicks("external->NodePort", 200*time.Millisecond, func() error {
			return handshakeOnce(w.c.ExternalPlace(), nodePort, time.Second)
		})}
}

// probeTotals is what the probes saw in one window.
type probeTotals struct {
	minutes                                float64
	pingSent, pingLost                     int
	pingGap, maxStall                      time.Duration
	streamResets, newConnFailed, dnsFailed int
	nodePortFailed, violations             int
	// lostAt holds when each lost ping left.
	lostAt []time.Time
}

// fields renders the totals for the soak line, each name with prefix.
func (r probeTotals) fields(prefix string) string {
	return fmt.Sprintf("%[1]sping_sent=%[2]d %[1]sping_lost=%[3]d %[1]sping_gap_ms=%[4]d %[1]sstream_resets=%[5]d %[1]sstream_stall_ms=%[6]d %[1]snew_conn_failed=%[7]d %[1]sdns_failed=%[8]d %[1]snodeport_failed=%[9]d",
		prefix, r.pingSent, r.pingLost, r.pingGap.Milliseconds(), r.streamResets, r.maxStall.Milliseconds(), r.newConnFailed, r.dnsFailed, r.nodePortFailed)
}

// finish stops the probes and logs and returns what they saw.
func (p *soakProbes) finish(t *testing.T, what string) probeTotals {
	r := probeTotals{minutes: time.Since(p.start).Minutes()}
	ps, err := p.ping.Stop()
	if err != nil {
		t.Errorf("%s: ping: %v", what, err)
	}
	r.pingSent, r.pingLost, r.pingGap, r.lostAt = ps.Sent, ps.Lost(), ps.LongestGap, ps.LostAt
	for _, st := range p.streams {
		sr := st.finish()
		r.streamResets += sr.resets
		r.maxStall = max(r.maxStall, sr.maxStall)
		logf("  %s: stream %s: %d sent, %d answered, %d resets (last: %v), longest stall %v", what, sr.name, sr.sent, sr.answered, sr.resets, sr.lastErr, sr.maxStall.Round(time.Millisecond))
	}
	var ncFirst, dnsFirst, npFirst error
	r.newConnFailed, ncFirst = p.newConn.Finish().Failures()
	for _, d := range p.denied {
		r.violations += d.Finish().Successes()
	}
	r.dnsFailed, dnsFirst = p.dns.Finish().Failures()
	r.nodePortFailed, npFirst = p.nodePort.Finish().Failures()
	logf("  %s (%.1f minutes): ping client->web-b: %s; new connections failed %d (first %v); DNS failed %d (first %v); NodePort from the external host failed %d (first %v)",
		what, r.minutes, ps, r.newConnFailed, ncFirst, r.dnsFailed, dnsFirst, r.nodePortFailed, npFirst)
	return r
}

// contextFor is a context that ends after d.
func contextFor(ctx context.Context, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(ctx, d)
	context.AfterFunc(ctx, cancel)
	return ctx
}

// freeLoopback returns an address of the loopback with a port nothing listens on now.
func freeLoopback(t *testing.T) string {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	must(t, err)
	defer l.Close()
	return l.Addr().String()
}

// rolloutManifest is the Deployment the soak rolls every few minutes, behind a NodePort Service the
// external host reaches.
func rolloutManifest(restart int) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: roll}
spec:
  replicas: 2
  selector: {matchLabels: {app: roll}}
  strategy: {rollingUpdate: {maxUnavailable: 0, maxSurge: 1}}
  template:
    metadata:
      labels: {app: roll}
      annotations: {soak/restart: "%d"}
    spec:
      terminationGracePeriodSeconds: 1
      nodeSelector: {soak/workers: "yes"}
      containers:
      - name: netexec
        image: %s
        args: [netexec, --http-port=%d]
        readinessProbe:
          httpGet: {path: /hostname, port: %d}
          periodSeconds: 1
---
apiVersion: v1
kind: Service
metadata: {name: roll}
spec:
  type: NodePort
  selector: {app: roll}
  ports: [{name: http, port: 80, targetPort: %d}]
`, restart, cluster.KubeletImages.Agnhost, echoPort, echoPort, echoPort)
}

// scaleManifest is the Deployment the soak scales up and down.
func scaleManifest() string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: scaled}
spec:
  replicas: 0
  selector: {matchLabels: {app: scaled}}
  template:
    metadata: {labels: {app: scaled, churn: "yes"}}
    spec:
      terminationGracePeriodSeconds: 1
      nodeSelector: {soak/workers: "yes"}
      containers:
      - {name: pause, image: %s}
`, cluster.KubeletImages.Pause)
}

// addRollout labels the kubelet nodes as workers, creates the rolled Deployment with its NodePort
// Service and the scaled Deployment, waits for the rollout and returns the NodePort.
func (w *world) addRollout(t *testing.T) int32 {
	for _, n := range []string{kubeA.Name, kubeB.Name} {
		_, err := kubectl(w.c, "", "label", "node", n, "soak/workers=yes", "--overwrite")
		must(t, err)
	}
	_, err := kubectl(w.c, rolloutManifest(0)+"---\n"+scaleManifest(), "-n", appNamespace, "apply", "-f", "-")
	must(t, err)
	if out, err := kubectl(w.c, "", "-n", appNamespace, "rollout", "status", "deployment/roll", "--timeout=180s"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	svc := &corev1.Service{}
	must(t, w.c.Client.Get(context.Background(), client.ObjectKey{Namespace: appNamespace, Name: "roll"}, svc))
	return svc.Spec.Ports[0].NodePort
}

// churnShortPods starts short-lived Pods one after the other, alternately on each kubelet node, at
// rate a second at most: each is created, waited Ready (its sandbox ADDed) and deleted.
func (w *world) churnShortPods(ctx context.Context, st *churnStats, rate float64) {
	interval := time.Duration(float64(time.Second) / rate)
	nodes := []string{kubeA.Name, kubeB.Name}
	for i := 0; ctx.Err() == nil; i++ {
		began := time.Now()
		name := fmt.Sprintf("short-%d", i)
		if _, err := kubectl(w.c, netexecPod(name, nodes[i%2], map[string]string{"churn": "yes"}), "-n", appNamespace, "apply", "-f", "-"); err != nil {
			st.podsFailed.Add(1)
			st.fail("creating Pod %s: %v", name, err)
		} else if out, err := kubectl(w.c, "", "-n", appNamespace, "wait", "--for=condition=Ready", "--timeout=120s", "pod/"+name); err != nil {
			st.podsFailed.Add(1)
			st.fail("Pod %s not Ready: %v %s", name, err, out)
		} else {
			st.podsCreated.Add(1)
		}
		if _, err := kubectl(w.c, "", "-n", appNamespace, "delete", "pod", name, "--wait=false"); err != nil {
			st.fail("deleting Pod %s: %v", name, err)
		}
		sleepCtx(ctx, interval-time.Since(began))
	}
}

// churnScale scales the scaled Deployment between 0 and 6 replicas every 20 s.
func (w *world) churnScale(ctx context.Context, st *churnStats) {
	for ctx.Err() == nil {
		n := rand.IntN(7)
		if _, err := kubectl(w.c, "", "-n", appNamespace, "scale", "deployment/scaled", fmt.Sprintf("--replicas=%d", n)); err != nil {
			st.fail("scaling to %d: %v", n, err)
		} else {
			st.scales.Add(1)
		}
		sleepCtx(ctx, 20*time.Second)
	}
}

// churnRollout rolls the Deployment behind the NodePort Service every 3 minutes (its EndpointSlices
// change Pod by Pod).
func (w *world) churnRollout(ctx context.Context, st *churnStats) {
	for i := 1; ctx.Err() == nil; i++ {
		sleepCtx(ctx, 3*time.Minute)
		if ctx.Err() != nil {
			return
		}
		if _, err := kubectl(w.c, rolloutManifest(i), "-n", appNamespace, "apply", "-f", "-"); err != nil {
			st.fail("rolling: %v", err)
			continue
		}
		if out, err := kubectl(w.c, "", "-n", appNamespace, "rollout", "status", "deployment/roll", "--timeout=180s"); err != nil {
			st.fail("rollout %d: %v %s", i, err, out)
			continue
		}
		st.rollouts.Add(1)
	}
}

// churnPolicies adds, changes and removes a NetworkPolicy over the churned Pods and changes a
// ClusterNetworkPolicy every minute: each round creates policy N, changes N-1's port and deletes N-2.
func (w *world) churnPolicies(ctx context.Context, st *churnStats) {
	policy := func(i int, port int32) *networkingv1.NetworkPolicy {
		p := intstr.FromInt32(port)
		return &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: appNamespace, Name: fmt.Sprintf("churn-%d", i)},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"churn": "yes"}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{
					From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}}}},
					Ports: []networkingv1.NetworkPolicyPort{{Port: &p}},
				}},
			},
		}
	}
	for i := 0; ctx.Err() == nil; i++ {
		if err := w.c.Client.Create(ctx, policy(i, 8080)); err != nil && ctx.Err() == nil {
			st.fail("creating NetworkPolicy churn-%d: %v", i, err)
		}
		if i >= 1 {
			old := &networkingv1.NetworkPolicy{}
			if err := w.c.Client.Get(ctx, client.ObjectKey{Namespace: appNamespace, Name: fmt.Sprintf("churn-%d", i-1)}, old); err == nil {
				p := intstr.FromInt32(int32(8000 + i%100))
				old.Spec.Ingress[0].Ports[0].Port = &p
				if err := w.c.Client.Update(ctx, old); err != nil && ctx.Err() == nil {
					st.fail("changing NetworkPolicy churn-%d: %v", i-1, err)
				}
			}
		}
		if i >= 2 {
			if err := w.c.Client.Delete(ctx, policy(i-2, 0)); client.IgnoreNotFound(err) != nil && ctx.Err() == nil {
				st.fail("deleting NetworkPolicy churn-%d: %v", i-2, err)
			}
		}
		cnp := &cnpv1beta1.ClusterNetworkPolicy{}
		if err := w.c.Client.Get(ctx, client.ObjectKey{Name: "upg-admin-deny"}, cnp); err == nil {
			// The Admin tier's priority moves between 5 and 9: recompiled, the same verdicts.
			cnp.Spec.Priority = 5 + int32(i%5)
			if err := w.c.Client.Update(ctx, cnp); err != nil && ctx.Err() == nil {
				st.fail("changing the ClusterNetworkPolicy: %v", err)
			}
		}
		st.policyChanges.Add(1)
		sleepCtx(ctx, time.Minute)
	}
}

// churnTraces runs a PacketTrace every 4 minutes (world.trace: client to web-b, delivered).
func (w *world) churnTraces(ctx context.Context, st *churnStats) {
	for ctx.Err() == nil {
		sleepCtx(ctx, 4*time.Minute)
		if ctx.Err() != nil {
			return
		}
		if err := w.traceOnce(ctx); err != nil {
			st.fail("PacketTrace: %v", err)
		}
		st.traces.Add(1)
	}
}

// endChurn removes what the churn left: the short-lived Pods, the scaled Pods and the churn's
// NetworkPolicies, and waits until no Pod is terminating.
func (w *world) endChurn(t *testing.T) {
	_, err := kubectl(w.c, "", "-n", appNamespace, "scale", "deployment/scaled", "--replicas=0")
	must(t, err)
	_, err = kubectl(w.c, "", "-n", appNamespace, "delete", "pods,networkpolicies", "-l", "churn=yes", "--wait=true", "--timeout=180s")
	must(t, err)
	nps := &networkingv1.NetworkPolicyList{}
	must(t, w.c.Client.List(context.Background(), nps, client.InNamespace(appNamespace)))
	for _, np := range nps.Items {
		if strings.HasPrefix(np.Name, "churn-") {
			must(t, client.IgnoreNotFound(w.c.Client.Delete(context.Background(), &np)))
		}
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		pods := &corev1.PodList{}
		must(t, w.c.Client.List(context.Background(), pods, client.InNamespace(appNamespace)))
		terminating := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil || p.Labels["app"] == "scaled" {
				terminating++
			}
		}
		if terminating == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("%d churned Pods still terminating 3 minutes after the churn", terminating)
			break
		}
		time.Sleep(time.Second)
	}
	if out, err := kubectl(w.c, "", "-n", appNamespace, "rollout", "status", "deployment/roll", "--timeout=180s"); err != nil {
		t.Errorf("the rolled Deployment does not settle: %v %s", err, out)
	}
}

// matrix checks the workload's connections (allowed and denied, waitWorkload's), the NodePort from
// the external host and each kubelet node, and DNS, and returns how many pairs fail.
func (w *world) matrix(t *testing.T, nodePort netip.AddrPort) int {
	t.Helper()
	client, webA := w.places["client"], w.places["web-a"]
	checks := []struct {
		what    string
		from    cluster.Place
		dst     netip.AddrPort
		allowed bool
	}{
		{"client -> web-a", client, w.dst("web-a"), true},
		{"client -> web-b", client, w.dst("web-b"), true},
		{"client -> Service web", client, netip.AddrPortFrom(w.clusterIP, 80), true},
		{"client -> external", client, netip.AddrPortFrom(w.c.ExternalIP, echoPort), true},
		{"lx-1 (flannel) -> web-a", w.lx, w.dst("web-a"), true},
		{"lx-1 (flannel) -> web-b", w.lx, w.dst("web-b"), true},
		{"web-a -> locked", webA, w.dst("locked"), true},
		{"web-a -> guarded", webA, w.dst("guarded"), true},
		{"external -> NodePort on kube-a (handshake)", w.c.ExternalPlace(), nodePort, true},
		{"external -> NodePort on kube-b (handshake)", w.c.ExternalPlace(), netip.AddrPortFrom(kubeB.IP, nodePort.Port()), true},
		{"client -> locked (denied)", client, w.dst("locked"), false},
		{"client -> guarded (denied)", client, w.dst("guarded"), false},
	}
	bad := 0
	for _, ch := range checks {
		var err error
		try := connectOnce
		if strings.HasSuffix(ch.what, "(handshake)") {
			try = handshakeOnce // netexec answers HTTP, not the echo protocol
		}
		if ch.allowed { // answered once in ten tries
			for range 10 {
				if err = try(ch.from, ch.dst, time.Second); err == nil {
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
		} else { // refused every one of three tries
			for range 3 {
				if connectOnce(ch.from, ch.dst, time.Second) == nil {
					err = fmt.Errorf("answered")
					break
				}
			}
		}
		if err != nil {
			bad++
			logf("  matrix: %s (want allowed=%v): %v", ch.what, ch.allowed, err)
		}
	}
	if err := lookupOnce(client, "kubernetes.default.svc.cluster.local"); err != nil {
		bad++
		logf("  matrix: DNS from client: %v", err)
	}
	return bad
}

// freshFlows restarts every winnet node's agent (SIGTERM, as the DaemonSet does) and counts the lines
// of flows, groups and ports the fresh agent installs other than the soaked one had.
func (w *world) freshFlows(t *testing.T) int {
	before := w.dumps(t, "soaked")
	for _, n := range w.c.Nodes() {
		w.rollAgent(t, n, cluster.CurrentRelease(), syscall.SIGTERM)
	}
	after := w.dumps(t, "fresh")
	diffs := 0
	for node, b := range before {
		if d := diffLines(b, after[node]); d != "" {
			diffs += strings.Count(d, "\n") + 1
			logf("  %s: the fresh agent differs:\n%s", node, d)
		}
	}
	return diffs
}

// handshakeOnce opens a TCP connection from a place to dst and closes it once the handshake completed
// (the rolled Deployment's Pods answer HTTP, not the echo protocol).
func handshakeOnce(from cluster.Place, dst netip.AddrPort, timeout time.Duration) error {
	return ns.WithNetNSPath("/run/netns/"+from.NS, func(ns.NetNS) error {
		conn, err := net.DialTimeout("tcp4", dst.String(), timeout)
		if err == nil {
			conn.Close()
		}
		return err
	})
}

func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
