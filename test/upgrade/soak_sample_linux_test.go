//go:build soak && linux

package upgrade

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	corev1 "k8s.io/api/core/v1"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/test/e2e/cluster"
)

// sample is one quantity of one node ("cluster" for the API server and the host) at one moment.
type sample struct {
	at       time.Duration // since the sampler started
	node     string
	quantity string
	value    float64
}

// sampler measures, every interval, what could grow on each winnet node: the agent's heap after a GC,
// RSS, goroutines and descriptors; ovs-vswitchd's RSS; flows per table, groups, conntrack entries per
// zone, OVS ports, HNS endpoints, PodEndpoints, IPAM files, the audit log's size; and for the cluster
// the API server's watches and requests and the host's load.
type sampler struct {
	w       *world
	pprof   map[string]string // node -> the agent's profiler address
	start   time.Time
	samples []sample
	// requests is the API server's request count at the last sample (for the rate).
	requests   float64
	requestsAt time.Time
}

func newSampler(w *world, pprof map[string]string) *sampler {
	return &sampler{w: w, pprof: pprof, start: time.Now()}
}

// every samples at once and then every interval until ctx ends.
func (s *sampler) every(ctx context.Context, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		s.sampleOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (s *sampler) add(node, quantity string, v float64) {
	s.samples = append(s.samples, sample{at: time.Since(s.start), node: node, quantity: quantity, value: v})
}

// addCounts adds, for every window of the run so far, how many of times fell into it (lost pings,
// say), as a quantity of node.
func (s *sampler) addCounts(node, quantity string, times []time.Time, window time.Duration) {
	counts := make([]int, int(time.Since(s.start)/window)+1)
	for _, at := range times {
		if i := int(at.Sub(s.start) / window); i >= 0 && i < len(counts) {
			counts[i]++
		}
	}
	for i, n := range counts {
		s.samples = append(s.samples, sample{at: time.Duration(i) * window, node: node, quantity: quantity, value: float64(n)})
	}
}

func (s *sampler) sampleOnce(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
	defer cancel()
	peps := &networkv1alpha1.PodEndpointList{}
	_ = s.w.c.Client.List(ctx, peps)
	for _, n := range s.w.c.Nodes() {
		if addr := s.pprof[n.Name]; addr != "" {
			// The heap after a GC, and what the Go runtime holds from the system (Sys less the heap
			// given back): when RSS grows, this says whether the runtime holds it.
			if v, err := profileValues(addr, "heap?debug=1&gc=1", heapAllocRE, goSysRE, heapReleasedRE); err == nil {
				s.add(n.Name, "agent_heap_mb", v[0]/(1<<20))
				s.add(n.Name, "agent_go_held_mb", (v[1]-v[2])/(1<<20))
			} else {
				logf("  sample: %s's heap: %v", n.Name, err)
			}
			if v, err := profileValues(addr, "goroutine?debug=1", goroutinesRE); err == nil {
				s.add(n.Name, "agent_goroutines", v[0])
			} else {
				logf("  sample: %s's goroutines: %v", n.Name, err)
			}
		}
		if pid := n.AgentPID(); pid > 0 {
			if m, err := cluster.ReadProcMemory(pid); err == nil {
				s.add(n.Name, "agent_rss_mb", m.RSS)
				s.add(n.Name, "agent_rss_anon_mb", m.Anon)
				s.add(n.Name, "agent_rss_file_mb", m.File)
				s.add(n.Name, "agent_threads", float64(m.Threads))
			}
			if fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
				s.add(n.Name, "agent_fds", float64(len(fds)))
			}
		}
		if pid := n.OVS.VswitchdPid(); pid > 0 {
			if m, err := cluster.ReadProcMemory(pid); err == nil {
				s.add(n.Name, "vswitchd_rss_mb", m.RSS)
			}
		}
		if flows, err := n.OVS.DumpFlows(cluster.BridgeName); err == nil {
			perTable := map[string]int{}
			for _, f := range flows {
				if m := tableRE.FindStringSubmatch(f); m != nil {
					perTable[m[1]]++
				}
			}
			s.add(n.Name, "flows", float64(len(flows)))
			for table, count := range perTable {
				s.add(n.Name, "flows_table_"+table, float64(count))
			}
		}
		if groups, err := n.OVS.DumpGroups(cluster.BridgeName); err == nil {
			s.add(n.Name, "groups", float64(len(groups)))
		}
		if zones, err := conntrackZones(n); err == nil {
			total := 0
			for zone, entries := range zones {
				total += len(entries)
				s.add(n.Name, "ct_zone_"+zone, float64(len(entries)))
			}
			s.add(n.Name, "ct_entries", float64(total))
		}
		if out, err := n.OVS.Vsctl("list-ports", cluster.BridgeName); err == nil {
			s.add(n.Name, "ovs_ports", float64(len(strings.Fields(out))))
		}
		var sim struct {
			Endpoints []json.RawMessage `json:"endpoints"`
		}
		if b, err := os.ReadFile(filepath.Join(n.StateDir, cluster.HNSStateFile)); err == nil && json.Unmarshal(b, &sim) == nil {
			s.add(n.Name, "hns_endpoints", float64(len(sim.Endpoints)))
		}
		mine := 0
		for _, p := range peps.Items {
			if p.Spec.NodeName == n.Name {
				mine++
			}
		}
		s.add(n.Name, "podendpoints", float64(mine))
		ipam, _ := filepath.Glob(filepath.Join(n.StateDir, "ipam", "*", "*"))
		s.add(n.Name, "ipam_files", float64(len(ipam)))
		s.add(n.Name, "audit_log_kb", float64(dirSize(n.AuditLogDir))/1024)
	}
	if out, err := s.w.c.RunKubectl("", "get", "--raw", "/metrics"); err == nil {
		watches, requests := apiServerCounts(out)
		s.add("cluster", "apiserver_watches", watches)
		now := time.Now()
		if !s.requestsAt.IsZero() {
			s.add("cluster", "apiserver_requests_per_min", (requests-s.requests)/now.Sub(s.requestsAt).Minutes())
		}
		s.requests, s.requestsAt = requests, now
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			v, _ := strconv.ParseFloat(f[0], 64)
			s.add("cluster", "host_load1", v)
		}
	}
}

var (
	goroutinesRE = regexp.MustCompile(`(?m)^goroutine profile: total (\d+)`)
	tableRE      = regexp.MustCompile(`\btable=(\d+)`)
	zoneRE       = regexp.MustCompile(`\bzone=(\d+)`)
	timeoutRE    = regexp.MustCompile(`\btimeout=(\d+)`)
	ctAddrRE     = regexp.MustCompile(`\b(?:src|dst)=(\d+\.\d+\.\d+\.\d+)`)
	heapAllocRE  = regexp.MustCompile(`(?m)^# HeapAlloc = (\d+)`)
	// goSysRE and heapReleasedRE: the runtime's MemStats Sys and HeapReleased, in the heap profile.
	goSysRE        = regexp.MustCompile(`(?m)^# Sys = (\d+)`)
	heapReleasedRE = regexp.MustCompile(`(?m)^# HeapReleased = (\d+)`)
)

// profileValues fetches one of the agent's profiles (its loopback-only pprof endpoint) and reads
// the number each of res finds in it.
func profileValues(addr, profile string, res ...*regexp.Regexp) ([]float64, error) {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + addr + "/debug/pprof/" + profile)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	// The whole profile: the heap's statistics (HeapAlloc) come after its stacks.
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, err
	}
	out := make([]float64, len(res))
	for i, re := range res {
		m := re.FindSubmatch(body)
		if m == nil {
			return nil, fmt.Errorf("%s: no %s in the profile (%s)", profile, re, resp.Status)
		}
		if out[i], err = strconv.ParseFloat(string(m[1]), 64); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// conntrackZones returns the node's userspace conntrack entries by zone ("0" for the default), each
// with its statistics (-s: the seconds until it expires, timeout=).
func conntrackZones(n *cluster.Node) (map[string][]string, error) {
	out, err := n.OVS.Appctl("dpctl/dump-conntrack", "-s")
	if err != nil {
		return nil, err
	}
	zones := map[string][]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l == "" {
			continue
		}
		zone := "0"
		if m := zoneRE.FindStringSubmatch(l); m != nil {
			zone = m[1]
		}
		zones[zone] = append(zones[zone], l)
	}
	return zones, nil
}

// staleConntrack counts, on every winnet node, the conntrack entries with an address in a node's Pod
// CIDR that is no live Pod's and no gateway's: what a deleted Pod left behind (logged by zone); and
// of those, the ones that expire in more than 5 minutes (the userspace conntrack shows no age: an
// entry expiring later is one a timeout of hours keeps, such as an established TCP connection's).
func (s *sampler) staleConntrack(ctx context.Context) (stale, long int) {
	pods := &corev1.PodList{}
	if err := s.w.c.Client.List(ctx, pods); err != nil {
		logf("  conntrack: listing Pods: %v", err)
		return -1, -1
	}
	live := map[netip.Addr]bool{}
	for _, p := range pods.Items {
		if ip, err := netip.ParseAddr(p.Status.PodIP); err == nil && p.DeletionTimestamp == nil {
			live[ip] = true
		}
	}
	var cidrs []netip.Prefix
	for _, n := range s.w.c.Nodes() {
		cidrs = append(cidrs, n.PodCIDR)
		live[n.Gateway] = true
	}
	cidrs = append(cidrs, linuxA.PodCIDR)
	for _, n := range s.w.c.Nodes() {
		zones, err := conntrackZones(n)
		if err != nil {
			logf("  conntrack of %s: %v", n.Name, err)
			continue
		}
		for zone, entries := range zones {
			count, longer := 0, 0
			for _, e := range entries {
				for _, m := range ctAddrRE.FindAllStringSubmatch(e, -1) {
					ip := netip.MustParseAddr(m[1])
					if !live[ip] && slices.ContainsFunc(cidrs, func(p netip.Prefix) bool { return p.Contains(ip) }) {
						count++
						if t := timeoutRE.FindStringSubmatch(e); t != nil {
							if secs, _ := strconv.Atoi(t[1]); secs > 300 {
								longer++
								logf("  conntrack of %s, zone %s, a dead Pod's entry expiring in %d s: %s", n.Name, zone, secs, e)
							}
						}
						break
					}
				}
			}
			if count > 0 {
				logf("  conntrack of %s, zone %s: %d entries of addresses no live Pod has, %d expiring in more than 5 minutes", n.Name, zone, count, longer)
			}
			stale, long = stale+count, long+longer
		}
	}
	return stale, long
}

// apiServerCounts reads the API server's open watches and its requests so far from its metrics.
func apiServerCounts(metrics string) (watches, requests float64) {
	for _, l := range strings.Split(metrics, "\n") {
		name, rest, ok := strings.Cut(l, "{")
		if !ok {
			continue
		}
		f := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		switch {
		case name == "apiserver_longrunning_requests" && strings.Contains(rest, `verb="WATCH"`):
			watches += v
		case name == "apiserver_request_total":
			requests += v
		}
	}
	return watches, requests
}

func dirSize(dir string) int64 {
	var total int64
	_ = filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				total += info.Size()
			}
		}
		return nil
	})
	return total
}

// write writes bin/soak/samples.csv (minutes, node, quantity, value) and one picture per quantity
// (bin/soak/<quantity>.png, a line per node); the per-table flows and per-zone conntrack entries go
// into two pictures, a line per node and table or zone.
func (s *sampler) write() error {
	f, err := os.Create(filepath.Join(soakDir, "samples.csv"))
	if err != nil {
		return err
	}
	cw := csv.NewWriter(f)
	_ = cw.Write([]string{"minutes", "node", "quantity", "value"})
	series := map[string]map[string]plotter.XYs{} // picture -> line -> points
	for _, sm := range s.samples {
		min := sm.at.Minutes()
		_ = cw.Write([]string{strconv.FormatFloat(min, 'f', 2, 64), sm.node, sm.quantity, strconv.FormatFloat(sm.value, 'f', -1, 64)})
		picture, line := sm.quantity, sm.node
		for _, prefix := range []string{"flows_table_", "ct_zone_"} {
			if rest, ok := strings.CutPrefix(sm.quantity, prefix); ok {
				picture, line = strings.TrimSuffix(prefix, "_"), sm.node+" "+rest
			}
		}
		if series[picture] == nil {
			series[picture] = map[string]plotter.XYs{}
		}
		series[picture][line] = append(series[picture][line], plotter.XY{X: min, Y: sm.value})
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	for picture, lines := range series {
		p := plot.New()
		p.Title.Text = picture
		p.X.Label.Text = "minutes"
		p.Legend.Top = true
		var args []any
		for _, name := range slices.Sorted(func(yield func(string) bool) {
			for k := range lines {
				if !yield(k) {
					return
				}
			}
		}) {
			args = append(args, name, lines[name])
		}
		if err := plotutil.AddLinePoints(p, args...); err != nil {
			return fmt.Errorf("%s: %w", picture, err)
		}
		if err := p.Save(10*vg.Inch, 5*vg.Inch, filepath.Join(soakDir, picture+".png")); err != nil {
			return fmt.Errorf("%s: %w", picture, err)
		}
	}
	return nil
}

// slope is the least-squares slope of ys over xs (per hour), 0 with fewer than two points.
func slope(xs, ys []float64) float64 {
	n := float64(len(xs))
	if n < 2 {
		return 0
	}
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx, sy, sxx, sxy = sx+xs[i], sy+ys[i], sxx+xs[i]*xs[i], sxy+xs[i]*ys[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / d
}

// summary gives, for the agent whose heap grew fastest over the second half of the churn, its heap
// first and last (during the churn), the slopes per hour of heap, RSS and ovs-vswitchd's RSS over
// the second half, and its goroutines and descriptors first and last; and the largest slopes of
// goroutines and descriptors of any agent.
func (s *sampler) summary(churnStart, churnEnd time.Time) string {
	begin, end := churnStart.Sub(s.start), churnEnd.Sub(s.start)
	half := begin + (end-begin)/2
	// Slopes and first and last values over the churn only: the last row is sampled after every
	// agent restarted (freshFlows).
	sl := func(node, q string) float64 {
		var xs, ys []float64
		for _, sm := range s.samplesOf(node, q) {
			if sm.at >= half && sm.at <= end {
				xs, ys = append(xs, sm.at.Hours()), append(ys, sm.value)
			}
		}
		return slope(xs, ys)
	}
	firstLast := func(node, q string) (first, last float64) {
		var during []float64
		for _, sm := range s.samplesOf(node, q) {
			if sm.at >= begin && sm.at <= end {
				during = append(during, sm.value)
			}
		}
		if len(during) == 0 {
			return 0, 0
		}
		return during[0], during[len(during)-1]
	}
	var worst string
	worstSlope := -1e18
	for _, n := range s.w.c.Nodes() {
		if v := sl(n.Name, "agent_heap_mb"); v > worstSlope {
			worst, worstSlope = n.Name, v
		}
	}
	hf, hl := firstLast(worst, "agent_heap_mb")
	gf, gl := firstLast(worst, "agent_goroutines")
	ff, fl := firstLast(worst, "agent_fds")
	var maxG, maxF float64
	// The RSS of an agent whose heap is flat can still grow (the 120-minute run of 29 Nov 2026: the
	// churned nodes' agents, not the one whose heap grew fastest): the largest RSS slope, and whose.
	maxR, maxRNode := -1e18, ""
	for _, n := range s.w.c.Nodes() {
		maxG, maxF = max(maxG, sl(n.Name, "agent_goroutines")), max(maxF, sl(n.Name, "agent_fds"))
		if v := sl(n.Name, "agent_rss_mb"); v > maxR {
			maxR, maxRNode = v, n.Name
		}
	}
	return fmt.Sprintf("agent=%s heap_mb_first=%.1f heap_mb_last=%.1f heap_slope_mb_per_h=%.2f rss_slope_mb_per_h=%.2f rss_anon_slope_mb_per_h=%.2f go_held_slope_mb_per_h=%.2f vswitchd_rss_slope_mb_per_h=%.2f goroutines_first=%.0f goroutines_last=%.0f goroutines_slope_per_h_max=%.1f fds_first=%.0f fds_last=%.0f fds_slope_per_h_max=%.1f rss_slope_mb_per_h_max=%.2f rss_slope_max_agent=%s",
		worst, hf, hl, sl(worst, "agent_heap_mb"), sl(worst, "agent_rss_mb"), sl(worst, "agent_rss_anon_mb"), sl(worst, "agent_go_held_mb"), sl(worst, "vswitchd_rss_mb"), gf, gl, maxG, ff, fl, maxF, maxR, maxRNode)
}

func (s *sampler) samplesOf(node, quantity string) []sample {
	var out []sample
	for _, sm := range s.samples {
		if sm.node == node && sm.quantity == quantity {
			out = append(out, sm)
		}
	}
	return out
}

// meanLoad is the host's mean 1-minute load over the run.
func (s *sampler) meanLoad() float64 {
	var sum float64
	ss := s.samplesOf("cluster", "host_load1")
	for _, sm := range ss {
		sum += sm.value
	}
	if len(ss) == 0 {
		return 0
	}
	return sum / float64(len(ss))
}
