//go:build linux && bench

package services

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/winnet-io/winnet/test/bench/benchutil"
	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/simnode"
)

// TestBenchServices runs the real winnet-agent binary on a simulated node (real OVS) and the real
// kube-proxy in nftables mode in a namespace of its own, one after the other, against the same
// Services and EndpointSlices in one real API server, and prints the comparison; its last line is
// the summary `make bench-services` prints.
func TestBenchServices(t *testing.T) {
	ctx := context.Background()
	mainScale := envScale(t, "BENCH_SERVICES_SCALE", "10000x5")
	extraScale := envScale(t, "BENCH_SERVICES_EXTRA", "1000x100")
	churnFor := 30 * time.Second
	if v := os.Getenv("BENCH_SERVICES_CHURN_SECONDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("BENCH_SERVICES_CHURN_SECONDS=%q: want a positive number of seconds", v)
		}
		churnFor = time.Duration(n) * time.Second
	}
	profile := os.Getenv("BENCH_SERVICES_PROFILE") != ""

	if err := simnode.CheckPrerequisites(); err != nil {
		t.Fatalf("bench-services needs simulated nodes: %v", err)
	}
	kubeProxyBin := kubeProxyBinary(t)
	server, err := framework.StartAPIServerWith(framework.APIServerOptions{Args: map[string]string{
		// Room for the ClusterIPs the benchmark gives its Services (envtest's default is a /24).
		"service-cluster-ip-range": "10.96.0.0/12",
	}})
	if err != nil {
		t.Fatalf("bench-services needs a real kube-apiserver: %v", err)
	}
	defer func() { _ = server.Stop() }()
	writer := newWriter(t, server)
	bin := benchutil.BuildAgent(t, "")
	underlay := simnode.NewUnderlay(t, netip.MustParsePrefix("192.168.41.0/24"))
	kp := newKubeProxyHost(t, server, underlay, kubeProxyBin, netip.MustParsePrefix("192.168.41.20/24"))
	fmt.Printf("bench-services load before: %s\n", benchutil.LoadAverage())

	if extraScale.services > 0 {
		objs := writer.createScenario(t, extraScale, netip.MustParseAddr("10.104.0.0"))
		ours := startWinnet(t, server, bin, underlay, "svc-x", netip.MustParsePrefix("192.168.41.11/24"), profile)
		oursCold := ours.waitCold(t, objs)
		ours.agent.Stop()
		load := benchutil.LoadAverage()
		kpCold := kp.start(t, "x").waitCold(t, objs)
		kp.stop()
		fmt.Printf("bench-services cold services=%d endpoints=%d ours_ms=%d kubeproxy_ms=%d ratio=%.2f (load %s)\n",
			extraScale.services, extraScale.services*extraScale.endpoints, oursCold.Milliseconds(), kpCold.Milliseconds(),
			ratio(oursCold, kpCold), load)
		writer.deleteScenario(t, objs)
	}

	objs := writer.createScenario(t, mainScale, netip.MustParseAddr("10.100.0.0"))
	// winnet: cold start, one endpoint added, churn.
	ours := startWinnet(t, server, bin, underlay, "svc-m", netip.MustParsePrefix("192.168.41.12/24"), profile)
	oursCold := ours.waitCold(t, objs)
	rss := benchutil.RSSMB(t, ours.agent.Cmd.Process.Pid)
	if profile {
		<-benchutil.FetchProfile(t, ours.pprof, "heap", filepath.Join(framework.RepoRoot(), "bin", "bench-services-heap.pprof"))
	}
	fmt.Printf("bench-services winnet cold: %d ms, agent RSS %d MiB, CPU agent %d ms, ovs-vswitchd %d ms (load %s)\n",
		oursCold.Milliseconds(), rss, ours.agentCPU(t).Milliseconds(), ours.vswitchdCPU(t).Milliseconds(), benchutil.LoadAverage())
	settle()
	oursIncr := ours.addEndpoint(t, ctx, writer, objs)
	fmt.Printf("bench-services winnet one endpoint added: %.1f ms (write took %.1f ms), %d flow and %d group messages\n",
		benchutil.MS(oursIncr.took), benchutil.MS(oursIncr.write), oursIncr.flowMods, oursIncr.groupMods)
	settle()
	oursChurn := ours.churn(t, ctx, writer, objs, churnFor, profile)
	fmt.Printf("bench-services winnet churn: %d changes in %s, p50 %.1f ms p99 %.1f ms max %.1f ms, CPU agent %d ms + ovs-vswitchd %d ms (load %s)\n",
		oursChurn.changes, churnFor, benchutil.MS(oursChurn.p50), benchutil.MS(oursChurn.p99), benchutil.MS(oursChurn.max), oursChurn.cpu.Milliseconds(), oursChurn.cpuSwitch.Milliseconds(), benchutil.LoadAverage())
	ours.agent.Stop()

	// kube-proxy: the same, on the same objects.
	kpRun := kp.start(t, "m")
	kpCold := kpRun.waitCold(t, objs)
	fmt.Printf("bench-services kube-proxy cold: %d ms, RSS %d MiB, CPU %d ms (load %s)\n",
		kpCold.Milliseconds(), benchutil.RSSMB(t, kpRun.pid), kpRun.cpu(t).Milliseconds(), benchutil.LoadAverage())
	monitor := kpRun.monitor(t)
	defer monitor.stop()
	settle()
	kpIncr := kpRun.addEndpoint(t, ctx, writer, objs, monitor)
	fmt.Printf("bench-services kube-proxy one endpoint added: %.1f ms (write took %.1f ms)\n", benchutil.MS(kpIncr.took), benchutil.MS(kpIncr.write))
	settle()
	kpChurn := kpRun.churn(t, ctx, writer, objs, churnFor, monitor)
	fmt.Printf("bench-services kube-proxy churn: %d changes in %s, p50 %.1f ms p99 %.1f ms max %.1f ms, CPU %d ms (load %s)\n",
		kpChurn.changes, churnFor, benchutil.MS(kpChurn.p50), benchutil.MS(kpChurn.p99), benchutil.MS(kpChurn.max), kpChurn.cpu.Milliseconds(), benchutil.LoadAverage())
	kp.stop()

	fmt.Printf("bench-services services=%d endpoints=%d ours_ms=%d kubeproxy_ms=%d ratio=%.2f incr_ms=%d kp_incr_ms=%d incr_msgs=%d churn_p99_ms=%d rss_mb=%d\n",
		mainScale.services, mainScale.services*mainScale.endpoints, oursCold.Milliseconds(), kpCold.Milliseconds(), ratio(oursCold, kpCold),
		roundMs(oursIncr.took), roundMs(kpIncr.took), oursIncr.flowMods+oursIncr.groupMods, roundMs(oursChurn.p99), rss)
}

// scale is a scenario's size: Services, and endpoints per Service.
type scale struct{ services, endpoints int }

// envScale reads "<services>x<endpoints>" from the environment variable, or def when it is unset;
// set and empty means none.
func envScale(t *testing.T, name, def string) scale {
	t.Helper()
	v, ok := os.LookupEnv(name)
	if !ok {
		v = def
	}
	if v == "" {
		return scale{}
	}
	s, e, found := strings.Cut(v, "x")
	services, err1 := strconv.Atoi(s)
	endpoints, err2 := strconv.Atoi(e)
	if !found || err1 != nil || err2 != nil || services <= 0 || endpoints <= 0 || services > 60000 {
		t.Fatalf("%s=%q: want <services>x<endpoints>, such as 10000x5 (at most 60000 Services)", name, v)
	}
	return scale{services, endpoints}
}

// settle lets both proxies finish what a previous step started (kube-proxy syncs at most once a
// second by default) before the next measurement; the same for both.
func settle() { time.Sleep(3 * time.Second) }

func ratio(ours, ref time.Duration) float64 {
	if ref <= 0 {
		return 0
	}
	return float64(ours) / float64(ref)
}

func roundMs(d time.Duration) int64 { return (d + 500*time.Microsecond).Milliseconds() }

// percentiles returns the p50, p99 and maximum of the latencies.
func percentiles(lat []time.Duration) (p50, p99, maxLat time.Duration) {
	if len(lat) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	at := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return at(0.50), at(0.99), s[len(s)-1]
}

// churnResult is what a churn cost a proxy.
type churnResult struct {
	changes       int
	p50, p99, max time.Duration
	// cpu is the proxy's CPU time during the churn (kube-proxy: with the nft processes it ran);
	// cpuSwitch is ovs-vswitchd's for winnet.
	cpu, cpuSwitch time.Duration
}

// increment is what adding one endpoint cost a proxy.
type increment struct {
	// took is the time from the write's completion to the endpoint in the data path; write is how
	// long the write took.
	took, write time.Duration
	// flowMods and groupMods are the messages the switch received for it (winnet).
	flowMods, groupMods int
}

// churnWritten is what a churn wrote.
type churnWritten struct {
	// done holds when each write completed, by the address it added.
	done map[netip.Addr]time.Time
	// superseded holds the added addresses a later change of the churn replaced: a proxy that saw
	// both changes at once rightly never programs them. Only scenarios with fewer Services than
	// changes have any.
	superseded map[netip.Addr]bool
	// slice names the EndpointSlice each address was written to, version is the slice's version
	// the write made.
	slice   map[netip.Addr]string
	version map[netip.Addr]sliceVersion
}

// current are the addresses the churn added that it did not replace.
func (c churnWritten) current() []netip.Addr {
	var out []netip.Addr
	for a := range c.done {
		if !c.superseded[a] {
			out = append(out, a)
		}
	}
	return out
}

// churnWrites writes 100 endpoint changes a second for the duration, each replacing one endpoint
// of another Service with a new address.
func churnWrites(t *testing.T, ctx context.Context, w *writer, objs *scenario, d time.Duration) churnWritten {
	t.Helper()
	var mu sync.Mutex
	written := churnWritten{done: map[netip.Addr]time.Time{}, superseded: map[netip.Addr]bool{}, slice: map[netip.Addr]string{}, version: map[netip.Addr]sliceVersion{}}
	var wg sync.WaitGroup
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	end := time.Now().Add(d)
	errs := make(chan error, 1)
	for k := 0; time.Now().Before(end); k++ {
		<-tick.C
		// 7919 is prime: consecutive changes go to Services far apart, each Service once before
		// any is changed again.
		i := (k * 7919) % len(objs.slices)
		wg.Add(1)
		go func() {
			defer wg.Done()
			addr, old, v, done, err := w.replaceEndpoint(ctx, objs, i, k)
			if err != nil {
				select {
				case errs <- err:
				default:
				}
				return
			}
			objs.mu[i].Lock()
			slice := objs.slices[i].Name
			objs.mu[i].Unlock()
			mu.Lock()
			written.done[addr] = done
			written.superseded[old] = true
			written.slice[addr] = slice
			written.version[addr] = v
			mu.Unlock()
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatalf("churn: %v", err)
	default:
	}
	return written
}

// latencies matches each written address with the time the proxy programmed it; an address never
// programmed that no later change replaced fails the benchmark. Each change's times are written to
// bin/bench-services-churn-<who>.tsv (slice, address, write done, programmed, latency in ms), to
// lay the slow ones beside the proxy's log.
func latencies(t *testing.T, who string, written churnWritten, programmed map[netip.Addr]time.Time) []time.Duration {
	t.Helper()
	var tsv strings.Builder
	tsv.WriteString("slice\taddress\twritten\tprogrammed\tms\n")
	for addr, w := range written.done {
		if p, ok := programmed[addr]; ok {
			fmt.Fprintf(&tsv, "%s\t%s\t%s\t%s\t%.1f\n", written.slice[addr], addr, w.UTC().Format(time.RFC3339Nano), p.UTC().Format(time.RFC3339Nano), benchutil.MS(p.Sub(w)))
		}
	}
	if err := os.WriteFile(filepath.Join(framework.RepoRoot(), "bin", "bench-services-churn-"+who+".tsv"), []byte(tsv.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	var out []time.Duration
	var missing []string
	for addr, w := range written.done {
		p, ok := programmed[addr]
		if !ok && written.superseded[addr] {
			continue
		}
		if !ok {
			missing = append(missing, addr.String())
			continue
		}
		out = append(out, max(0, p.Sub(w)))
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		t.Fatalf("%s never programmed %d of the %d endpoints the churn wrote, such as %s", who, len(missing), len(written.done), missing[0])
	}
	return out
}
