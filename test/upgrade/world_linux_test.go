//go:build (upgrade || soak) && linux

package upgrade

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	cnpv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/test/e2e/cluster"
	"github.com/winnet-io/winnet/test/framework"
)

// world is the running cluster with its workload and what the test knows of it.
type world struct {
	c         *cluster.Cluster
	places    map[string]cluster.Place // the app Pods' network namespaces
	uids      map[string]string        // the app Pods' UIDs at the start: a Pod made again is a restart
	lx        cluster.Place            // the flannel node's Pod
	clusterIP netip.Addr
	churned   int
	traced    int
	// previousStopChanges counts the stops of previous-release agents that changed the switch (rollAgent).
	previousStopChanges int
}

func (w *world) dst(pod string) netip.AddrPort { return netip.AddrPortFrom(w.places[pod].IP, echoPort) }

// waitWorkload waits until the workload works as it should: connections the policies allow succeed, those
// they deny fail, the Service and the DNS answer.
func (w *world) waitWorkload(t *testing.T) {
	t.Helper()
	client, webA := w.places["client"], w.places["web-a"]
	checks := []struct {
		what    string
		from    cluster.Place
		dst     netip.AddrPort
		allowed bool
	}{
		{"client -> web-b", client, w.dst("web-b"), true},
		{"client -> Service web", client, netip.AddrPortFrom(w.clusterIP, 80), true},
		{"client -> external", client, netip.AddrPortFrom(w.c.ExternalIP, echoPort), true},
		{"lx-1 (flannel) -> web-b", w.lx, w.dst("web-b"), true},
		{"web-a -> locked (the NetworkPolicy admits it)", webA, w.dst("locked"), true},
		{"web-a -> guarded (the Admin tier denies only client)", webA, w.dst("guarded"), true},
		{"client -> locked (the NetworkPolicy denies it)", client, w.dst("locked"), false},
		{"client -> guarded (the Admin tier denies it)", client, w.dst("guarded"), false},
	}
	deadline := time.Now().Add(2 * time.Minute)
	for _, ch := range checks {
		for {
			err := connectOnce(ch.from, ch.dst, time.Second)
			if (err == nil) == ch.allowed {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: want allowed=%v, got error %v", ch.what, ch.allowed, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	for {
		err := lookupOnce(client, "kubernetes.default.svc.cluster.local")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cluster DNS does not answer client: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// probes are what runs through a phase.
type probes struct {
	ping    *cluster.SteadyPing
	streams []*streamProbe
	newConn *cluster.TickProbe
	denied  []*cluster.TickProbe
	dns     *cluster.TickProbe
}

func (w *world) startProbes(t *testing.T) *probes {
	t.Helper()
	client := w.places["client"]
	p := &probes{}
	var err error
	p.ping, err = cluster.StartSteadyPing(client, w.places["web-b"].IP, 10*time.Millisecond)
	must(t, err)
	for _, s := range []struct {
		name string
		from cluster.Place
		dst  netip.AddrPort
	}{
		{"client->web-b", client, w.dst("web-b")},
		{"client->ClusterIP", client, netip.AddrPortFrom(w.clusterIP, 80)},
		{"client->external(SNAT)", client, netip.AddrPortFrom(w.c.ExternalIP, echoPort)},
		{"lx-1(flannel)->web-b", w.lx, w.dst("web-b")},
	} {
		sp, err := startStream(s.name, s.from, s.dst)
		must(t, err)
		p.streams = append(p.streams, sp)
	}
	svc := netip.AddrPortFrom(w.clusterIP, 80)
	p.newConn = cluster.StartTicks("new connections to Service web", 50*time.Millisecond, func() error { return connectOnce(client, svc, time.Second) })
	for _, d := range []string{"locked", "guarded"} {
		dst := w.dst(d)
		p.denied = append(p.denied, cluster.StartTicks("client->"+d, 50*time.Millisecond, func() error { return connectOnce(client, dst, 300*time.Millisecond) }))
	}
	p.dns = cluster.StartTicks("DNS", 100*time.Millisecond, func() error { return lookupOnce(client, "kubernetes.default.svc.cluster.local") })
	return p
}

// phaseResult is one line of make test-upgrade.
type phaseResult struct {
	what, from, to                  string
	lost, resets                    int
	maxStall, newConnGap            time.Duration
	dnsFailures, violations, leaked int
	detail                          []string
}

func (r phaseResult) String() string {
	return fmt.Sprintf("test-upgrade from=%s to=%s lost=%d resets=%d max_stall_ms=%d new_conn_gap_ms=%d dns_failures=%d policy_violations=%d leaked=%d what=%s",
		r.from, r.to, r.lost, r.resets, r.maxStall.Milliseconds(), r.newConnGap.Milliseconds(), r.dnsFailures, r.violations, r.leaked, r.what)
}

// phase runs action with the probes on, waits until the cluster has settled, and prints the phase's line; it
// fails the test on what must never happen (a policy violation, a reset, a leak, a Pod restarted).
func (w *world) phase(t *testing.T, what string, from, to cluster.Release, action func()) {
	w.waitWorkload(t)
	logf("phase %s: %s -> %s", what, from, to)
	start := time.Now()
	stopChanges := w.previousStopChanges
	p := w.startProbes(t)
	action()
	if err := w.c.WaitReady(context.Background(), readyTimeout); err != nil {
		t.Errorf("%s: the nodes are not Ready after it: %v", what, err)
	}
	time.Sleep(3 * time.Second) // the probes see the settled cluster too
	r := phaseResult{what: what, from: from.Version, to: to.Version}
	ps, err := p.ping.Stop()
	if err != nil {
		t.Errorf("%s: ping: %v", what, err)
	}
	r.lost = ps.Lost()
	r.detail = append(r.detail, fmt.Sprintf("ping client->web-b every 10 ms: %s", ps))
	for _, s := range p.streams {
		sr := s.finish()
		r.resets += sr.resets
		r.maxStall = max(r.maxStall, sr.maxStall)
		r.detail = append(r.detail, fmt.Sprintf("stream %s: %d lines sent, %d answered, %d resets (last: %v), longest stall %v ending %v into the phase",
			sr.name, sr.sent, sr.answered, sr.resets, sr.lastErr, sr.maxStall.Round(time.Millisecond), sr.stallEndedAt.Sub(start).Round(time.Millisecond)))
	}
	nc := p.newConn.Finish()
	failed, firstErr := nc.Failures()
	r.newConnGap = nc.LongestGap()
	r.detail = append(r.detail, fmt.Sprintf("new connections every 50 ms: %d of %d failed (first: %v), longest window %v", failed, len(nc), firstErr, r.newConnGap))
	for _, d := range p.denied {
		rs := d.Finish()
		r.violations += rs.Successes()
		r.detail = append(r.detail, fmt.Sprintf("denied %s every 50 ms: %d of %d got through", d.Name, rs.Successes(), len(rs)))
	}
	dns := p.dns.Finish()
	r.dnsFailures, firstErr = dns.Failures()
	r.detail = append(r.detail, fmt.Sprintf("DNS every 100 ms: %d of %d failed (first: %v)", r.dnsFailures, len(dns), firstErr))
	leaks := w.leaks(t)
	r.leaked = len(leaks)
	for _, l := range r.detail {
		logf("  %s", l)
	}
	fmt.Println(r)
	switch {
	case r.violations > 0 && w.previousStopChanges > stopChanges:
		logf("  %s: %d connections the policies deny got through while agents of the previous release changed the switch as they stopped (fixed in this release)", what, r.violations)
	case r.violations > 0:
		t.Errorf("%s: %d connections the policies deny got through", what, r.violations)
	}
	if r.resets > 0 {
		t.Errorf("%s: %d connections were reset", what, r.resets)
	}
	for _, l := range leaks {
		t.Errorf("%s: leaked %s", what, l)
	}
	w.checkPodsKept(t, what)
	w.trace(t, what)
}

// rollAgent replaces the node's agent by release r's, as the DaemonSet does (the old one stopped with sig), and
// waits until the new one has settled.
func (w *world) rollAgent(t *testing.T, n *cluster.Node, r cluster.Release, sig syscall.Signal) {
	t.Helper()
	stopped := n.AgentRelease()
	before, err := n.Flows()
	must(t, err)
	if sig == syscall.SIGKILL {
		if _, err := n.KillAgent(sig); err != nil {
			t.Fatal(err)
		}
	} else {
		must(t, n.StopAgent(sig))
	}
	// A stopping agent changes nothing on the switch: it keeps forwarding with what it has until the next
	// agent takes over. Releases before 0.2.0 could send a NetworkPolicy pass computed from their stopping
	// caches (peers gone): counted, and excused in the phase's policy violations, for them alone.
	after, err := n.Flows()
	must(t, err)
	if d := diffLines(strings.Split(before, "\n"), strings.Split(after, "\n")); d != "" {
		if stopped.Version == cluster.CurrentRelease().Version {
			t.Errorf("the agent %s of %s changed the switch while stopping (%v):\n%s", stopped, n.Name, sig, d)
		} else {
			w.previousStopChanges++
			logf("  the agent %s of %s changed the switch while stopping (%v), a defect of that release:\n%s", stopped, n.Name, sig, d)
		}
	}
	n.SetAgentRelease(r)
	started := time.Now()
	must(t, n.StartAgent())
	// The DaemonSet moves on once the new Pod is Ready (its /readyz).
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if err = n.AgentReady(); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("the agent %s of %s is not ready: %v", r, n.Name, err)
	}
	logf("  agent %s of %s ready %v after its start", r, n.Name, time.Since(started).Round(time.Millisecond))
	if err := w.settled(n, 2*time.Minute); err != nil {
		t.Fatalf("the agent %s of %s: %v", r, n.Name, err)
	}
}

// settled waits until the node's agent runs, its network is Ready for its generation, and its flows have not
// changed for a second (the agent has none of its own start left to install).
func (w *world) settled(n *cluster.Node, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	stable := 0
	for {
		if !n.AgentRunning() {
			return errors.New("the agent exited")
		}
		err := w.c.WaitReady(context.Background(), time.Second)
		flows, ferr := n.Flows()
		if err == nil && ferr == nil && flows == last {
			stable++
		} else {
			stable = 0
		}
		if stable >= 2 {
			return nil
		}
		last = flows
		if time.Now().After(deadline) {
			return fmt.Errorf("not settled within %v: %v", timeout, errors.Join(err, ferr))
		}
		time.Sleep(time.Second)
	}
}

// churnPod starts a Pod on the node and deletes it: a CNI ADD and DEL through the node's shim and agent of the
// moment.
func (w *world) churnPod(t *testing.T, n *cluster.Node) {
	t.Helper()
	ctx := context.Background()
	w.churned++
	name := fmt.Sprintf("churn-%d", w.churned)
	if !n.HasKubelet() {
		p, err := w.c.AddPod(ctx, n, name, time.Minute)
		if err != nil {
			t.Fatalf("ADD of a Pod on %s (agent %s, shim %s): %v", n.Name, n.AgentRelease(), n.ShimRelease(), err)
		}
		if err := w.c.DeletePod(ctx, p); err != nil {
			t.Fatalf("DEL of a Pod on %s (agent %s, shim %s): %v", n.Name, n.AgentRelease(), n.ShimRelease(), err)
		}
		return
	}
	if _, err := kubectl(w.c, netexecPod(name, n.Name, map[string]string{"churn": "yes"}), "-n", appNamespace, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	if out, err := kubectl(w.c, "", "-n", appNamespace, "wait", "--for=condition=Ready", "--timeout=120s", "pod/"+name); err != nil {
		desc, _ := kubectl(w.c, "", "-n", appNamespace, "describe", "pod", name)
		t.Fatalf("a Pod on %s (agent %s, shim %s): %v\n%s\n%s", n.Name, n.AgentRelease(), n.ShimRelease(), err, out, desc)
	}
	if _, err := kubectl(w.c, "", "-n", appNamespace, "delete", "pod", name, "--wait=true", "--timeout=120s"); err != nil {
		t.Fatalf("deleting a Pod on %s (agent %s, shim %s): %v", n.Name, n.AgentRelease(), n.ShimRelease(), err)
	}
}

// checkPodsKept fails the test when an app Pod was restarted or made again.
func (w *world) checkPodsKept(t *testing.T, what string) {
	ctx := context.Background()
	for _, p := range appPods {
		pod := &corev1.Pod{}
		if err := w.c.Client.Get(ctx, client.ObjectKey{Namespace: appNamespace, Name: p.name}, pod); err != nil {
			t.Errorf("%s: Pod %s: %v", what, p.name, err)
			continue
		}
		if string(pod.UID) != w.uids[p.name] {
			t.Errorf("%s: Pod %s was made again", what, p.name)
		}
		for _, cs := range pod.Status.ContainerStatuses {
			if cs.RestartCount > 0 {
				t.Errorf("%s: Pod %s's container %s restarted %d times", what, p.name, cs.Name, cs.RestartCount)
			}
		}
	}
}

// leaks lists what the winnet nodes hold for Pods that do not run there, and objects left being deleted.
func (w *world) leaks(t *testing.T) []string {
	ctx := context.Background()
	// Give the last DELs time to finish.
	var leaks []string
	deadline := time.Now().Add(time.Minute)
	for {
		leaks = w.leaksNow(ctx)
		if len(leaks) == 0 || time.Now().After(deadline) {
			return leaks
		}
		time.Sleep(time.Second)
	}
}

func (w *world) leaksNow(ctx context.Context) []string {
	var leaks []string
	pods := &corev1.PodList{}
	peps := &networkv1alpha1.PodEndpointList{}
	if err := errors.Join(w.c.Client.List(ctx, pods), w.c.Client.List(ctx, peps)); err != nil {
		return []string{"listing: " + err.Error()}
	}
	for _, n := range w.c.Nodes() {
		live := map[string]bool{}
		for _, p := range pods.Items {
			if p.Spec.NodeName == n.Name && !p.Spec.HostNetwork && p.Status.PodIP != "" &&
				p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
				live[p.Status.PodIP] = true
			}
		}
		count := func(kind string, have int) {
			if have != len(live) {
				leaks = append(leaks, fmt.Sprintf("%s: %d %s for %d running Pods", n.Name, have, kind, len(live)))
			}
		}
		ipam, _ := filepath.Glob(filepath.Join(n.StateDir, "ipam", "*", "*"))
		addrs := 0
		for _, f := range ipam {
			if ip, err := netip.ParseAddr(filepath.Base(f)); err == nil {
				addrs++
				if !live[ip.String()] {
					leaks = append(leaks, fmt.Sprintf("%s: address %s held for no running Pod", n.Name, ip))
				}
			}
		}
		count("addresses", addrs)
		out, err := n.OVS.Vsctl("list-ports", cluster.BridgeName)
		if err != nil {
			leaks = append(leaks, err.Error())
		}
		ports := 0
		for _, p := range strings.Fields(out) {
			if p != cluster.GatewayName && p != cluster.TunnelName && p != "uplink0" {
				ports++
			}
		}
		count("OVS ports", ports)
		var sim struct {
			Endpoints []json.RawMessage `json:"endpoints"`
		}
		if b, err := os.ReadFile(filepath.Join(n.StateDir, cluster.HNSStateFile)); err == nil {
			_ = json.Unmarshal(b, &sim)
		}
		count("HNS endpoints", len(sim.Endpoints))
		records, _ := filepath.Glob(filepath.Join(n.StateDir, "pods", "*.json"))
		count("state records", len(records))
		mine := 0
		for _, p := range peps.Items {
			if p.Spec.NodeName == n.Name {
				mine++
			}
		}
		count("PodEndpoints", mine)
	}
	for _, p := range peps.Items {
		if p.DeletionTimestamp != nil {
			leaks = append(leaks, fmt.Sprintf("PodEndpoint %s/%s is being deleted (finalizers %v)", p.Namespace, p.Name, p.Finalizers))
		}
	}
	wnns := &networkv1alpha1.WindowsNodeNetworkList{}
	rsrs := &networkv1alpha1.RemoteSubnetRouteList{}
	if err := errors.Join(w.c.Client.List(ctx, wnns), w.c.Client.List(ctx, rsrs)); err != nil {
		return append(leaks, "listing: "+err.Error())
	}
	for _, o := range wnns.Items {
		if o.DeletionTimestamp != nil {
			leaks = append(leaks, fmt.Sprintf("WindowsNodeNetwork %s is being deleted (finalizers %v)", o.Name, o.Finalizers))
		}
	}
	for _, o := range rsrs.Items {
		if o.DeletionTimestamp != nil {
			leaks = append(leaks, fmt.Sprintf("RemoteSubnetRoute %s is being deleted (finalizers %v)", o.Name, o.Finalizers))
		}
	}
	return leaks
}

// dumps returns, per winnet node, its flows, groups and ports (with their type and options); it writes them
// to bin/test-upgrade/<node>-<label>.txt too.
func (w *world) dumps(t *testing.T, label string) map[string][]string {
	out := map[string][]string{}
	for _, n := range w.c.Nodes() {
		flows, err := n.OVS.DumpFlows(cluster.BridgeName)
		must(t, err)
		groups, err := n.OVS.DumpGroups(cluster.BridgeName)
		must(t, err)
		var lines []string
		for _, f := range flows {
			lines = append(lines, withoutRound(f))
		}
		lines = append(lines, groups...)
		ports, err := n.OVS.Vsctl("--format=csv", "--columns=name,type,options", "list", "interface")
		must(t, err)
		for _, l := range strings.Split(strings.TrimSpace(ports), "\n")[1:] {
			lines = append(lines, "interface "+l)
		}
		slices.Sort(lines)
		out[n.Name] = lines
		must(t, os.MkdirAll(dumpDir, 0o755))
		must(t, os.WriteFile(filepath.Join(dumpDir, n.Name+"-"+label+".txt"), []byte(strings.Join(lines, "\n")+"\n"), 0o644))
	}
	return out
}

// cookieRE matches a flow's cookie.
var cookieRE = regexp.MustCompile(`^cookie=0x([0-9a-f]+)`)

// withoutRound drops the round from a flow's cookie: each agent start installs every flow again in a round
// of its own (OpenFlow ADD replaces a flow of the same match and priority in place) and then deletes what is
// left of the previous round, so that a fresh start is the same flows in a new round.
func withoutRound(flow string) string {
	m := cookieRE.FindStringSubmatch(flow)
	if m == nil {
		return flow
	}
	v, err := strconv.ParseUint(m[1], 16, 64)
	if err != nil {
		return flow
	}
	return fmt.Sprintf("cookie=0x%x", v&^openflow.RoundMask) + flow[len(m[0]):]
}

// dumpDir is where dumps writes (bin/test-upgrade).
var dumpDir = filepath.Join(framework.RepoRoot(), "bin", "test-upgrade")

// diffLines says which lines only a has (-) and only b has (+), at most 20 of each.
func diffLines(a, b []string) string {
	inA, inB := map[string]int{}, map[string]int{}
	for _, l := range a {
		inA[l]++
	}
	for _, l := range b {
		inB[l]++
	}
	only := func(sign string, lines []string, other map[string]int) []string {
		var d []string
		for _, l := range lines {
			if other[l] == 0 {
				d = append(d, sign+" "+l)
			}
		}
		if len(d) > 20 {
			d = append(d[:20], fmt.Sprintf("%s ... and %d more", sign, len(d)-20))
		}
		return d
	}
	return strings.Join(append(only("-", a, inB), only("+", b, inA)...), "\n")
}

// holdSkew keeps the cluster as it is (two releases side by side) for d, with the phase's probes running, and
// checks what a skew must not do: objects rewritten back and forth (every write to winnet's objects is
// counted), a condition not True, a request refused by the API server in the logs of winnet-controller and the
// agents.
//
// agentsAhead says the agents run a newer release than the chart's objects (the rollback's skew: helm
// rollback put the previous chart's RBAC back before the DaemonSet rolled the agents back). Then the
// renewals of their Egress Lease by agents whose node may hold an Egress are refused (the previous chart has no Role for Leases) and
// the agents hold no egress IP (they fence themselves), which is all the previous release supports:
// those refusals are counted apart (allowed_refusals), every other refusal fails the test.
func (w *world) holdSkew(t *testing.T, label string, d time.Duration, agentsAhead bool) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logf("holding %s for %v", label, d)
	wc, err := client.NewWithWatch(w.c.Config, client.Options{Scheme: w.c.Client.Scheme()})
	must(t, err)
	logs := w.logSizes()
	writes := map[string]int{}
	events := make(chan string, 1024)
	for _, l := range []client.ObjectList{&networkv1alpha1.WindowsNodeNetworkList{}, &networkv1alpha1.RemoteSubnetRouteList{},
		&networkv1alpha1.PodEndpointList{}, &networkv1alpha1.FlannelInteropList{}, &cnpv1beta1.ClusterNetworkPolicyList{}} {
		wi, err := wc.Watch(ctx, l)
		must(t, err)
		defer wi.Stop()
		go func() {
			for ev := range wi.ResultChan() {
				if ev.Type != watch.Modified && ev.Type != watch.Added && ev.Type != watch.Deleted {
					continue
				}
				o, ok := ev.Object.(client.Object)
				if !ok {
					continue
				}
				select {
				case events <- fmt.Sprintf("%T %s/%s", o, o.GetNamespace(), o.GetName()):
				default:
				}
			}
		}()
	}
	// The watches start with an ADDED event of every object: skip them (and check that they came: a watch
	// that sees nothing would count no write).
	time.Sleep(2 * time.Second)
	initial := 0
	for len(events) > 0 {
		<-events
		initial++
	}
	if initial == 0 {
		t.Errorf("%s: the watches of winnet's objects saw none", label)
	}
	end := time.After(d)
	total := 0
loop:
	for {
		select {
		case k := <-events:
			writes[k]++
			total++
		case <-end:
			break loop
		}
	}
	most, mostKey := 0, ""
	for k, v := range writes {
		if v > most {
			most, mostKey = v, k
		}
	}
	w.trace(t, label)
	notTrue := w.conditionsNotTrue(ctx)
	var refused []string
	allowed := 0
	for _, l := range w.refusedSince(logs) {
		if agentsAhead && strings.Contains(l, "Cannot renew the node's Egress Lease") && strings.Contains(l, `resource \"leases\" in API group \"coordination.k8s.io\"`) {
			allowed++
			continue
		}
		refused = append(refused, l)
	}
	fmt.Printf("test-upgrade-skew %s held=%v writes=%d writes_per_min=%.1f max_writes_one_object=%d (%s) conditions_not_true=%d refused_requests=%d allowed_refusals=%d\n",
		strings.ReplaceAll(label, " ", "_"), d, total, float64(total)/d.Minutes(), most, mostKey, len(notTrue), len(refused), allowed)
	for _, c := range notTrue {
		t.Errorf("%s: %s", label, c)
	}
	for _, l := range refused {
		t.Errorf("%s: the API server refused a request: %s", label, l)
	}
	// Each object is written a few times at most while nothing changes: more is a tug of war.
	if most > 3 {
		t.Errorf("%s: %s was written %d times in %v", label, mostKey, most, d)
	}
}

// conditionsNotTrue lists the conditions of winnet's objects that are not True.
func (w *world) conditionsNotTrue(ctx context.Context) []string {
	var out []string
	check := func(what string, conds []metav1.Condition) {
		for _, c := range conds {
			if c.Status != metav1.ConditionTrue {
				out = append(out, fmt.Sprintf("%s: %s=%s %s: %s", what, c.Type, c.Status, c.Reason, c.Message))
			}
		}
	}
	wnns := &networkv1alpha1.WindowsNodeNetworkList{}
	peps := &networkv1alpha1.PodEndpointList{}
	cnps := &cnpv1beta1.ClusterNetworkPolicyList{}
	if err := errors.Join(w.c.Client.List(ctx, wnns), w.c.Client.List(ctx, peps), w.c.Client.List(ctx, cnps)); err != nil {
		return []string{err.Error()}
	}
	for _, o := range wnns.Items {
		check("WindowsNodeNetwork "+o.Name, o.Status.Conditions)
		if meta.FindStatusCondition(o.Status.Conditions, networkv1alpha1.ReadyCondition) == nil {
			out = append(out, "WindowsNodeNetwork "+o.Name+" has no Ready condition")
		}
	}
	for _, o := range peps.Items {
		check("PodEndpoint "+o.Name, o.Status.Conditions)
	}
	for _, o := range cnps.Items {
		check("ClusterNetworkPolicy "+o.Name, o.Status.Conditions)
	}
	return out
}

// logSizes records how long the logs of winnet-controller and the agents are.
func (w *world) logSizes() map[string]int64 {
	sizes := map[string]int64{}
	paths := []string{filepath.Join(w.c.RunDir, "winnet-controller.log")}
	for _, n := range w.c.Nodes() {
		paths = append(paths, n.AgentLog())
	}
	for _, p := range paths {
		if fi, err := os.Stat(p); err == nil {
			sizes[p] = fi.Size()
		}
	}
	return sizes
}

// refusedSince returns the lines the logs gained since sizes that say the API server refused a request
// (admission, RBAC, validation).
func (w *world) refusedSince(sizes map[string]int64) []string {
	var out []string
	for p, size := range sizes {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		_, _ = f.Seek(size, 0)
		b := make([]byte, 4<<20)
		n, _ := f.Read(b)
		f.Close()
		for _, l := range strings.Split(string(b[:n]), "\n") {
			if strings.Contains(l, "is forbidden") || strings.Contains(l, "denied request") || strings.Contains(l, "is invalid") {
				out = append(out, filepath.Base(p)+": "+l)
			}
		}
	}
	return out
}

// trace runs a PacketTrace from client to web-b (TCP echoPort) with the controller and agents of the moment
// on the CRDs of the moment, and fails the test unless it is delivered.
func (w *world) trace(t *testing.T, label string) {
	t.Helper()
	if err := w.traceOnce(context.Background()); err != nil {
		t.Errorf("%s: %v", label, err)
	}
}

// traceOnce runs one PacketTrace from client to web-b and tells why it was not delivered.
func (w *world) traceOnce(ctx context.Context) error {
	w.traced++
	tr := &networkv1alpha1.PacketTrace{
		ObjectMeta: metav1.ObjectMeta{Namespace: appNamespace, Name: fmt.Sprintf("upgrade-%d", w.traced)},
		Spec: networkv1alpha1.PacketTraceSpec{
			Source:         networkv1alpha1.PacketTraceSource{Pod: networkv1alpha1.ObjectReference{Name: "client"}},
			Destination:    networkv1alpha1.PacketTraceDestination{Pod: &networkv1alpha1.ObjectReference{Name: "web-b"}},
			Packet:         networkv1alpha1.PacketTracePacket{Protocol: networkv1alpha1.PacketTraceTCP, DstPort: echoPort},
			TimeoutSeconds: 30,
		},
	}
	if err := w.c.Client.Create(ctx, tr); err != nil {
		return fmt.Errorf("creating PacketTrace %s: %w", tr.Name, err)
	}
	defer func() { _ = w.c.Client.Delete(ctx, tr) }()
	deadline := time.Now().Add(time.Minute)
	for {
		err := w.c.Client.Get(ctx, client.ObjectKeyFromObject(tr), tr)
		if err == nil && (tr.Status.Phase == networkv1alpha1.PacketTraceSucceeded || tr.Status.Phase == networkv1alpha1.PacketTraceFailed) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("PacketTrace %s has not finished in a minute: %v %+v", tr.Name, err, tr.Status)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if tr.Status.Phase != networkv1alpha1.PacketTraceSucceeded || tr.Status.Verdict != networkv1alpha1.PacketTraceDelivered {
		return fmt.Errorf("PacketTrace %s: %s %s %s (%s)", tr.Name, tr.Status.Phase, tr.Status.Verdict, tr.Status.Message, tr.Status.Reason)
	}
	return nil
}
