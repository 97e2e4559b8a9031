//go:build linux && bench

package services

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
	logFile := filepath.Join(framework.RepoRoot(), "bin", "bench-services-"+name+".log")
	r.agent = benchutil.StartAgent(t, bin, s.KubeconfigPath, node, logFile, nil, args...)
	r.start = time.Now()
	if profile {
		seconds := 20
		if v, err := strconv.Atoi(os.Getenv("BENCH_SERVICES_PROFILE_SECONDS")); err == nil {
			seconds = v
		}
		go benchutil.FetchProfile(t, r.pprof, fmt.Sprintf("profile?seconds=%d", seconds),
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

// addEndpoint adds one endpoint to the Service in the middle of the scenario and measures the time
// to the switch's commit of its group, and the messages the switch received for it (in the second
// after, so that a late extra message is counted).
func (r *winnetRun) addEndpoint(t *testing.T, ctx context.Context, w *writer, objs *scenario) increment {
	t.Helper()
	l := r.watchSwitch(t)
	defer l.stop(t)
	addr, done, took, err := w.addEndpoint(ctx, objs, len(objs.slices)/2)
	if err != nil {
		t.Fatal(err)
	}
	l.waitProgrammed(t, func() []netip.Addr { return []netip.Addr{addr} }, time.Minute)
	at, ok := l.programmed[addr]
	if !ok {
		t.Fatalf("winnet did not program the added endpoint %s within a minute", addr)
	}
	time.Sleep(time.Second)
	l.read(t)
	l.flush(t)
	return increment{took: max(0, at.Sub(done)), write: took, flowMods: l.flowMods, groupMods: l.groupMods}
}

// churn runs the churn and measures each change from its write to the switch's commit.
func (r *winnetRun) churn(t *testing.T, ctx context.Context, w *writer, objs *scenario, d time.Duration, profile bool) churnResult {
	t.Helper()
	l := r.watchSwitch(t)
	defer l.stop(t)
	if profile {
		go benchutil.FetchProfile(t, r.pprof, fmt.Sprintf("profile?seconds=%d", int(d.Seconds())),
			filepath.Join(framework.RepoRoot(), "bin", "bench-services-"+r.name+"-churn.cpu.pprof"))
	}
	agent0, switch0 := r.agentCPU(t), r.vswitchdCPU(t)
	// The log is read once the writes are done: its entries carry their own times.
	written := churnWrites(t, ctx, w, objs, d)
	addrs := written.current()
	l.waitProgrammed(t, func() []netip.Addr { return addrs }, 30*time.Second)
	res := churnResult{cpu: r.agentCPU(t) - agent0, cpuSwitch: r.vswitchdCPU(t) - switch0}
	res.p50, res.p99, res.max = percentiles(latencies(t, "winnet", written, l.programmed))
	res.changes = len(written.done)
	return res
}
