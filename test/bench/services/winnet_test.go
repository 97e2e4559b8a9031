//go:build linux && bench

package services

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/pipeline"
	"github.com/winnet-io/winnet/test/bench/benchutil"
	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/simnode"
)

// winnetRun is winnet-agent running on a simulated node.
type winnetRun struct {
	node     *simnode.Node
	agent    *benchutil.Agent
	start    time.Time
	vswitchd int
	// vswitchdStart is ovs-vswitchd's CPU time when the agent started.
	vswitchdStart time.Duration
	pprof         string
	name          string
	// coldProfile is closed once the CPU profile of the cold start is saved (profiling only).
	coldProfile <-chan struct{}
}

// startWinnet creates a simulated node with its own OVS, its Node and WindowsNodeNetwork, and
// starts the agent binary on it.
func startWinnet(t *testing.T, s *framework.APIServer, bin string, u *simnode.Underlay, name string, ip netip.Prefix, profile bool) *winnetRun {
	t.Helper()
	node := u.AddNode(t, name, ip, simnode.NodeOptions{StartOVS: true})
	ctx := context.Background()
	podCIDR := "10.244.9.0/24"
	if err := s.Client.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{PodCIDR: podCIDR, PodCIDRs: []string{podCIDR}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Client.Create(ctx, &networkv1alpha1.WindowsNodeNetwork{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: networkv1alpha1.WindowsNodeNetworkSpec{
			PodCIDRs: []networkv1alpha1.CIDR{networkv1alpha1.CIDR(podCIDR)}, NodeIP: networkv1alpha1.IPv4Address(ip.Addr().String()),
			Bridge:       networkv1alpha1.BridgeSpec{DatapathType: networkv1alpha1.DatapathTypeNetdev},
			ServiceCIDRs: []networkv1alpha1.CIDR{"10.96.0.0/12"},
		},
	}); err != nil {
		t.Fatal(err)
	}
	r := &winnetRun{node: node, name: name, vswitchd: benchutil.VswitchdPID(t, node)}
	r.vswitchdStart = benchutil.CPUTime(t, r.vswitchd, false)
	var args []string
	if profile {
		r.pprof = framework.FreeAddress(t)
		args = append(args, "--pprof-bind-address", r.pprof)
	}
	if level, err := strconv.Atoi(os.Getenv("BENCH_AGENT_LOG_LEVEL")); err != nil || level < 2 {
		// The commits of the Services' bundles are logged at V(1) (commitLog). Level 2: below it,
		// controller-runtime's logger samples (the first 100 lines of a message a second, then one
		// in 100), which would drop commits.
		args = append(args, "--zap-log-level", "2")
	}
	logFile := filepath.Join(framework.RepoRoot(), "bin", "bench-services-"+name+".log")
	r.agent = benchutil.StartAgent(t, bin, s.KubeconfigPath, node, logFile, nil, args...)
	r.start = time.Now()
	if profile {
		seconds := 20
		if v, err := strconv.Atoi(os.Getenv("BENCH_SERVICES_PROFILE_SECONDS")); err == nil {
			seconds = v
		}
		r.coldProfile = benchutil.FetchProfile(t, r.pprof, fmt.Sprintf("profile?seconds=%d", seconds),
			filepath.Join(framework.RepoRoot(), "bin", "bench-services-"+name+"-cold.cpu.pprof"))
	}
	return r
}

func (r *winnetRun) agentCPU(t *testing.T) time.Duration {
	return benchutil.CPUTime(t, r.agent.Cmd.Process.Pid, false)
}

func (r *winnetRun) vswitchdCPU(t *testing.T) time.Duration {
	return benchutil.CPUTime(t, r.vswitchd, false) - r.vswitchdStart
}

var flowCountRE = regexp.MustCompile(`flow_count=(\d+)`)

// waitCold returns the time from the agent's start until every Service of the scenario is
// programmed in the switch: its DNAT flow there (counted with dump-aggregate every 100 ms) and,
// checked then, its group with every endpoint. The agent installs a pass's groups before its flows.
func (r *winnetRun) waitCold(t *testing.T, objs *scenario) time.Duration {
	t.Helper()
	deadline := r.start.Add(15 * time.Minute)
	want := len(objs.services)
	spec := fmt.Sprintf("table=%d,tcp,tp_dst=%d", pipeline.DNATTable, servicePort)
	var took time.Duration
	for {
		select {
		case <-r.agent.Exited:
			out, _ := os.ReadFile(r.agent.Log)
			t.Fatalf("winnet-agent exited: %s", out)
		default:
		}
		out, err := r.node.OVS.Ofctl("dump-aggregate", "br-int", spec)
		now := time.Now()
		if err == nil { // before the bridge exists, there is nothing to count
			m := flowCountRE.FindStringSubmatch(out)
			if m == nil {
				t.Fatalf("dump-aggregate: unexpected output %q", out)
			}
			n, _ := strconv.Atoi(m[1])
			if n == want {
				took = now.Sub(r.start)
				break
			}
			if n > want {
				t.Fatalf("%d Service flows in table %d for %d Services", n, pipeline.DNATTable, want)
			}
		}
		if now.After(deadline) {
			t.Fatalf("winnet did not program %d Services within 15 minutes", want)
		}
		time.Sleep(100 * time.Millisecond)
	}
	groups, err := r.node.OVS.DumpGroups("br-int")
	if err != nil {
		t.Fatal(err)
	}
	full := 0
	suffix := fmt.Sprintf(":%d)", targetPort)
	for _, g := range groups {
		if strings.Count(g, suffix) == objs.scale.endpoints {
			full++
		}
	}
	if full < want {
		t.Fatalf("the Service flows are in the switch but only %d of %d groups have their %d endpoints", full, want, objs.scale.endpoints)
	}
	return took
}

// switchLog reads ovs-vswitchd's log of the OpenFlow messages it receives and sends (vconn at
// debug level): which endpoints each committed bundle carried, and how many flow and group
// messages came.
type switchLog struct {
	r      *winnetRun
	f      *os.File
	rd     *bufio.Reader
	cur    []string                // the entry being read
	bundle map[string][]netip.Addr // endpoints in the group_mods of each open bundle, by connection and id
	// programmed holds when the switch committed each endpoint address first.
	programmed          map[netip.Addr]time.Time
	flowMods, groupMods int
}

// watchSwitch turns on the switch's message log and reads it from now on.
func (r *winnetRun) watchSwitch(t *testing.T) *switchLog {
	t.Helper()
	file := filepath.Join(r.node.OVS.Dir, "ovs-vswitchd.log")
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		t.Fatal(err)
	}
	// Every message: vconn's debug messages are otherwise rate-limited (200 a minute).
	for _, args := range [][]string{{"vlog/set", "vconn:file:dbg"}, {"vlog/disable-rate-limit", "vconn"}} {
		if _, err := r.node.OVS.Appctl(args...); err != nil {
			t.Fatalf("logging ovs-vswitchd's OpenFlow messages: %v", err)
		}
	}
	t.Cleanup(func() { _ = f.Close() })
	return &switchLog{r: r, f: f, rd: bufio.NewReaderSize(f, 1<<20), bundle: map[string][]netip.Addr{}, programmed: map[netip.Addr]time.Time{}}
}

// stop turns the message log off.
func (l *switchLog) stop(t *testing.T) {
	for _, args := range [][]string{{"vlog/set", "vconn:file:info"}, {"vlog/enable-rate-limit", "vconn"}} {
		if _, err := l.r.node.OVS.Appctl(args...); err != nil {
			t.Fatalf("turning ovs-vswitchd's message log off: %v", err)
		}
	}
}

var (
	logEntryRE = regexp.MustCompile(`^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)\|\d+\|vconn\|DBG\|(unix#\d+): (.*)`)
	bundleIDRE = regexp.MustCompile(`bundle_id=(0x[0-9a-f]+|\d+)`)
	natDstRE   = regexp.MustCompile(`nat\(dst=(\d+\.\d+\.\d+\.\d+):` + strconv.Itoa(targetPort) + `\)`)
)

// read consumes what the log holds so far.
func (l *switchLog) read(t *testing.T) {
	t.Helper()
	for {
		line, err := l.rd.ReadString('\n')
		if err == io.EOF {
			// A partial line stays for the next read.
			if line != "" {
				if _, err := l.f.Seek(-int64(len(line)), io.SeekCurrent); err != nil {
					t.Fatal(err)
				}
				l.rd.Reset(l.f)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		line = strings.TrimSuffix(line, "\n")
		if len(line) > 0 && line[0] >= '0' && line[0] <= '9' && strings.Contains(line, "|") {
			l.entry(t)
			l.cur = []string{line}
			continue
		}
		l.cur = append(l.cur, line)
	}
}

// entry interprets the complete entry in l.cur.
func (l *switchLog) entry(t *testing.T) {
	if len(l.cur) == 0 {
		return
	}
	m := logEntryRE.FindStringSubmatch(l.cur[0])
	if m == nil {
		return
	}
	ts, err := time.Parse("2006-01-02T15:04:05.000Z", m[1])
	if err != nil {
		t.Fatal(err)
	}
	conn, what := m[2], m[3]
	text := strings.Join(l.cur, "\n")
	switch {
	case strings.HasPrefix(what, "received:"):
		l.flowMods += strings.Count(text, "OFPT_FLOW_MOD")
		l.groupMods += strings.Count(text, "OFPT_GROUP_MOD")
		id := bundleIDRE.FindStringSubmatch(text)
		if id == nil || !strings.Contains(text, "OFPT_GROUP_MOD") {
			return
		}
		key := conn + "/" + id[1]
		for _, a := range natDstRE.FindAllStringSubmatch(text, -1) {
			l.bundle[key] = append(l.bundle[key], netip.MustParseAddr(a[1]))
		}
	case strings.HasPrefix(what, "sent") && strings.Contains(text, "type=COMMIT_REPLY"):
		id := bundleIDRE.FindStringSubmatch(text)
		if id == nil {
			return
		}
		key := conn + "/" + id[1]
		for _, a := range l.bundle[key] {
			if _, ok := l.programmed[a]; !ok {
				l.programmed[a] = ts
			}
		}
		delete(l.bundle, key)
	}
}

// flush interprets the last entry read.
func (l *switchLog) flush(t *testing.T) {
	l.entry(t)
	l.cur = nil
}

// waitProgrammed reads the log until every address is programmed or the timeout passes.
func (l *switchLog) waitProgrammed(t *testing.T, addrs func() []netip.Addr, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		l.read(t)
		l.flush(t)
		all := true
		for _, a := range addrs() {
			if _, ok := l.programmed[a]; !ok {
				all = false
				break
			}
		}
		if all || time.Now().After(deadline) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// commitLog reads the agent's log of the Services' bundles the switch committed: the agent logs
// "Committed Service flows" (V(1)) with the Service and EndpointSlice versions a pass computed as
// soon as the switch replied to the commit of the pass's bundle. A change is programmed at the
// first such line that carries its slice's version or a later one: the span is the same as the
// switch's own COMMIT_REPLY in its message log (EndpointSlice write -> data path), read on the
// agent's side of the connection. The switch's message log (vconn at debug level) is not used for
// the churn: it makes ovs-vswitchd format every message it sends, the node network's periodic
// dump of 20,000+ flows included (140 ms of its CPU against 40 ms without), and so slowed the
// commits it timed.
type commitLog struct {
	f    *os.File
	rest []byte // a partial last line, for the next read
	// commits holds, by EndpointSlice, the versions of it that committed bundles carried, in
	// the log's order, with when.
	commits map[types.UID][]commit
}

type commit struct {
	rv uint64
	at time.Time
}

// watchCommits reads the agent's log from now on.
func (r *winnetRun) watchCommits(t *testing.T) *commitLog {
	t.Helper()
	f, err := os.Open(r.agent.Log)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return &commitLog{f: f, commits: map[types.UID][]commit{}}
}

// read consumes what the log holds so far.
func (l *commitLog) read(t *testing.T) {
	t.Helper()
	data, err := io.ReadAll(l.f)
	if err != nil {
		t.Fatal(err)
	}
	data = append(l.rest, data...)
	last := bytes.LastIndexByte(data, '\n')
	l.rest = slices.Clone(data[last+1:])
	for line := range bytes.Lines(data[:last+1]) {
		if !bytes.Contains(line, []byte(`"Committed Service flows"`)) {
			continue
		}
		var e struct {
			TS     time.Time `json:"ts"`
			Inputs string    `json:"inputs"`
		}
		if err := json.Unmarshal(line, &e); err != nil {
			t.Fatalf("reading the agent's log line %q: %v", line, err)
		}
		for v := range strings.SplitSeq(e.Inputs, ",") {
			uid, rv, ok := strings.Cut(v, "/")
			n, err := strconv.ParseUint(rv, 10, 64)
			if !ok || err != nil {
				t.Fatalf("the agent's log line %q: inputs %q: want <uid>/<resourceVersion>,...", line, e.Inputs)
			}
			l.commits[types.UID(uid)] = append(l.commits[types.UID(uid)], commit{rv: n, at: e.TS})
		}
	}
}

// programmed returns when the switch committed the version v of a slice, or a later one.
func (l *commitLog) programmed(v sliceVersion) (time.Time, bool) {
	for _, c := range l.commits[v.uid] {
		if c.rv >= v.rv {
			return c.at, true
		}
	}
	return time.Time{}, false
}

// waitProgrammed reads the log until every change of written that no later change superseded is
// programmed, or the timeout passes, and returns when each change was programmed.
func (l *commitLog) waitProgrammed(t *testing.T, written churnWritten, timeout time.Duration) map[netip.Addr]time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		l.read(t)
		programmed := map[netip.Addr]time.Time{}
		all := true
		for addr, v := range written.version {
			if at, ok := l.programmed(v); ok {
				programmed[addr] = at
			} else if !written.superseded[addr] {
				all = false
			}
		}
		if all || time.Now().After(deadline) {
			return programmed
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// addEndpoint adds one endpoint to the Service in the middle of the scenario and measures the time
// to the switch's commit of its group (commitLog), and the messages the switch received for it (its
// message log, in the second after, so that a late extra message is counted).
func (r *winnetRun) addEndpoint(t *testing.T, ctx context.Context, w *writer, objs *scenario) increment {
	t.Helper()
	l := r.watchSwitch(t)
	defer l.stop(t)
	commits := r.watchCommits(t)
	addr, v, done, took, err := w.addEndpoint(ctx, objs, len(objs.slices)/2)
	if err != nil {
		t.Fatal(err)
	}
	written := churnWritten{version: map[netip.Addr]sliceVersion{addr: v}}
	at, ok := commits.waitProgrammed(t, written, time.Minute)[addr]
	if !ok {
		t.Fatalf("winnet did not program the added endpoint %s within a minute", addr)
	}
	l.waitProgrammed(t, func() []netip.Addr { return []netip.Addr{addr} }, time.Minute)
	if _, ok := l.programmed[addr]; !ok {
		t.Fatalf("the switch's message log shows no commit of the added endpoint %s within a minute", addr)
	}
	time.Sleep(time.Second)
	l.read(t)
	l.flush(t)
	return increment{took: max(0, at.Sub(done)), write: took, flowMods: l.flowMods, groupMods: l.groupMods}
}

// churn runs the churn and measures each change from its write to the switch's commit (commitLog).
func (r *winnetRun) churn(t *testing.T, ctx context.Context, w *writer, objs *scenario, d time.Duration, profile bool) churnResult {
	t.Helper()
	l := r.watchCommits(t)
	if profile {
		<-r.coldProfile // one CPU profile at a time
		go benchutil.FetchProfile(t, r.pprof, fmt.Sprintf("profile?seconds=%d", int(d.Seconds())),
			filepath.Join(framework.RepoRoot(), "bin", "bench-services-"+r.name+"-churn.cpu.pprof"))
	}
	agent0, switch0 := r.agentCPU(t), r.vswitchdCPU(t)
	// The log is read once the writes are done: its lines carry their own times.
	written := churnWrites(t, ctx, w, objs, d)
	programmed := l.waitProgrammed(t, written, 30*time.Second)
	l.explainMissing(t, r, written, programmed)
	res := churnResult{cpu: r.agentCPU(t) - agent0, cpuSwitch: r.vswitchdCPU(t) - switch0}
	res.p50, res.p99, res.max = percentiles(latencies(t, "winnet", written, programmed))
	res.changes = len(written.done)
	return res
}

// explainMissing logs, for the changes never programmed, what the agent's log and the switch hold.
func (l *commitLog) explainMissing(t *testing.T, r *winnetRun, written churnWritten, programmed map[netip.Addr]time.Time) {
	var groups string
	n := 0
	for addr, v := range written.version {
		if _, ok := programmed[addr]; ok || written.superseded[addr] {
			continue
		}
		if groups == "" {
			g, err := r.node.OVS.DumpGroups("br-int")
			if err != nil {
				t.Fatal(err)
			}
			groups = strings.Join(g, "\n")
		}
		if n++; n <= 5 {
			t.Logf("not programmed: %s in slice %s version %s/%d, written %s; commits of the slice: %v; in the switch's groups: %v",
				addr, written.slice[addr], v.uid, v.rv, written.done[addr].Format(time.RFC3339Nano), l.commits[v.uid], strings.Contains(groups, "nat(dst="+addr.String()+":"))
		}
	}
}
