// Command ovs benchmarks installing flows through openflow.Sync against
// `ovs-ofctl --bundle add-flows` of the same flows on a private userspace OVS.
//
// Each size is measured in several runs; each run installs the flows on two fresh bridges, one per
// side, in alternating order, then (for the largest size) changes one flow through Sync. The
// summary lines report medians, so that a run disturbed by other load on the machine does not
// decide the result. The last line is
//
//	bench-ovs flows=100000 ours_ms=N ofctl_ms=N ratio=R incr_mods=N incr_ms=N
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/internal/ovs/ovsdb"
	"github.com/winnet-io/winnet/internal/ovs/ovstest"
	"github.com/winnet-io/winnet/test/bench/benchutil"
)

const (
	category = 1
	// settle is the pause after deleting a run's bridges.
	settle = 300 * time.Millisecond
)

var sizes = []int{20000, 100000}

func main() {
	runs := flag.Int("runs", 5, "runs per size; summary lines report medians")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole benchmark to this file")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench-ovs: %v\n", err)
			os.Exit(1)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(os.Stderr, "bench-ovs: %v\n", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	if err := run(*runs); err != nil {
		fmt.Fprintf(os.Stderr, "bench-ovs: %v\n", err)
		os.Exit(1)
	}
}

// flows returns n route-like flows: one destination each, a tunnel destination, a goto.
func flows(n int) []openflow.Flow {
	vmac, _ := net.ParseMAC("aa:bb:cc:dd:ee:ff")
	out := make([]openflow.Flow, n)
	for i := range out {
		out[i] = openflow.Flow{
			Table: 70, Priority: 200, Cookie: uint64(i + 1),
			Match: []openflow.MatchField{openflow.IPv4(), openflow.NwDst(netip.PrefixFrom(dst(i), 32))},
			Actions: []openflow.Action{
				openflow.SetEthDst(vmac),
				openflow.SetTunDst(netip.AddrFrom4([4]byte{192, 168, byte(i >> 8), byte(i)})),
				openflow.GotoTable(80),
			},
		}
	}
	return out
}

func dst(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}) }

// sample is one run of one size.
type sample struct {
	ours, ofctl time.Duration
	incrMods    int
	incr        time.Duration
	// The largest size's read-back of the n flows: Verify (counted from the reply's bytes), the
	// bridge's FlowStats (every flow decoded by libOpenflow, as Verify read them before), and
	// `ovs-ofctl dump-flows --no-stats`; the bytes Verify and FlowStats allocated.
	verify, decode, ofctlDump time.Duration
	verifyAlloc, decodeAlloc  uint64
}

func (s sample) ratio() float64 { return float64(s.ours) / float64(s.ofctl) }

type bench struct {
	ovs   *ovstest.OVS
	db    *ovsdb.Client
	dpids uint64 // ofctrl keys switches by datapath ID process-wide: never reuse one
}

func run(runs int) error {
	if runs < 1 {
		return fmt.Errorf("-runs must be at least 1")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	o, err := ovstest.New(ovstest.Options{})
	if err != nil {
		return err
	}
	defer o.Stop()
	db, err := ovsdb.New(ctx, ovsdb.Options{Address: o.DBSocket()})
	if err != nil {
		return err
	}
	defer db.Close()
	b := &bench{ovs: o, db: db, dpids: 0x100}

	for _, n := range sizes {
		incremental := n == sizes[len(sizes)-1]
		var samples []sample
		for r := range runs {
			s, err := b.measure(ctx, n, r, incremental)
			if err != nil {
				return fmt.Errorf("%d flows, run %d: %w", n, r+1, err)
			}
			samples = append(samples, s)
			line := fmt.Sprintf("bench-ovs run=%d flows=%d ours_ms=%d ofctl_ms=%d ratio=%.2f", r+1, n, s.ours.Milliseconds(), s.ofctl.Milliseconds(), s.ratio())
			if incremental {
				line += fmt.Sprintf(" incr_mods=%d incr_ms=%d verify_ms=%d decode_ms=%d ofctl_dump_ms=%d verify_alloc_mb=%.1f decode_alloc_mb=%.1f",
					s.incrMods, s.incr.Milliseconds(), s.verify.Milliseconds(), s.decode.Milliseconds(), s.ofctlDump.Milliseconds(),
					float64(s.verifyAlloc)/(1<<20), float64(s.decodeAlloc)/(1<<20))
			}
			fmt.Println(line)
		}
		ours := median(samples, func(s sample) float64 { return float64(s.ours) })
		ofctl := median(samples, func(s sample) float64 { return float64(s.ofctl) })
		ratio := median(samples, sample.ratio)
		if !incremental {
			fmt.Printf("bench-ovs flows=%d ours_ms=%d ofctl_ms=%d ratio=%.2f\n", n, msOf(ours), msOf(ofctl), ratio)
			continue
		}
		// The most flow_mods any run sent for the one changed flow.
		mods := slices.Max(collect(samples, func(s sample) float64 { return float64(s.incrMods) }))
		incr := median(samples, func(s sample) float64 { return float64(s.incr) })
		fmt.Printf("bench-ovs: medians of %d runs (ratio: median of per-run ratios; incr_mods: the most any run sent); load average at the end: %s\n", runs, benchutil.LoadAverage())
		fmt.Printf("bench-ovs flows=%d ours_ms=%d ofctl_ms=%d ratio=%.2f incr_mods=%d incr_ms=%d\n", n, msOf(ours), msOf(ofctl), ratio, int(mods), msOf(incr))
		verify := median(samples, func(s sample) float64 { return float64(s.verify) })
		decode := median(samples, func(s sample) float64 { return float64(s.decode) })
		dump := median(samples, func(s sample) float64 { return float64(s.ofctlDump) })
		fmt.Printf("bench-ovs-verify flows=%d verify_ms=%d decode_ms=%d ofctl_dump_ms=%d verify_over_ofctl=%.2f verify_alloc_mb=%.1f decode_alloc_mb=%.1f\n",
			n, msOf(verify), msOf(decode), msOf(dump), verify/dump,
			median(samples, func(s sample) float64 { return float64(s.verifyAlloc) })/(1<<20),
			median(samples, func(s sample) float64 { return float64(s.decodeAlloc) })/(1<<20))
	}
	return nil
}

// measure installs n flows through Sync and through ovs-ofctl on two fresh bridges, ours first in
// even runs and ovs-ofctl first in odd ones, then optionally changes one flow through Sync. Both
// bridges are deleted afterwards.
func (b *bench) measure(ctx context.Context, n, r int, incremental bool) (sample, error) {
	var s sample
	ours, theirs := fmt.Sprintf("bo%d-%d", n, r), fmt.Sprintf("bc%d-%d", n, r)
	for _, name := range []string{ours, theirs} {
		b.dpids++
		if _, err := b.db.EnsureBridge(ctx, ovsdb.BridgeSpec{Name: name, DatapathType: ovsdb.DatapathNetdev, DatapathID: b.dpids}); err != nil {
			return s, err
		}
	}
	defer b.deleteBridges(ours, theirs)
	br, err := openflow.Connect(ctx, openflow.Options{Bridge: ours, Address: b.ovs.MgmtSocket(ours), Rounds: b.db})
	if err != nil {
		return s, err
	}
	defer br.Close()
	if _, err := b.ovs.Ofctl("show", theirs); err != nil { // the bridge is up for ovs-ofctl too
		return s, err
	}
	desired := flows(n)
	file, err := b.writeText(n, br.Round(), desired)
	if err != nil {
		return s, err
	}

	installOurs := func() error {
		runtime.GC()
		start := time.Now()
		res, err := br.Sync(ctx, category, desired)
		s.ours = time.Since(start)
		if err != nil {
			return fmt.Errorf("sync of %d flows: %w", n, err)
		}
		if res.Added != n {
			return fmt.Errorf("sync added %d flows, want %d", res.Added, n)
		}
		return nil
	}
	installTheirs := func() error {
		start := time.Now()
		_, err := b.ovs.Ofctl("--bundle", "add-flows", theirs, file)
		s.ofctl = time.Since(start)
		return err
	}
	steps := []func() error{installOurs, installTheirs}
	if r%2 == 1 {
		slices.Reverse(steps)
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return s, err
		}
	}
	for _, name := range []string{ours, theirs} {
		if err := b.expectFlowCount(name, n); err != nil {
			return s, err
		}
	}
	if !incremental {
		return s, nil
	}
	if err := b.readBack(ctx, br, ours, n, &s); err != nil {
		return s, err
	}

	// Change one flow among n.
	changed := n/2 + r
	desired[changed].Actions = []openflow.Action{openflow.Output(7)}
	runtime.GC()
	start := time.Now()
	res, err := br.Sync(ctx, category, desired)
	s.incr = time.Since(start)
	if err != nil {
		return s, fmt.Errorf("incremental sync: %w", err)
	}
	s.incrMods = res.Mods()
	out, err := b.ovs.Ofctl("dump-flows", "--no-stats", ours, "table=70,ip,nw_dst="+dst(changed).String())
	if err != nil {
		return s, err
	}
	if !strings.Contains(out, "actions=output:7") {
		return s, fmt.Errorf("changed flow not installed: %s", strings.TrimSpace(out))
	}
	return s, b.expectFlowCount(ours, n)
}

// readBack reads the n flows back from the switch three ways, each timed: the bridge's Verify
// (which must find no difference), its FlowStats of the flows' table (libOpenflow decodes every
// flow) and ovs-ofctl dump-flows; Verify's and FlowStats' allocations are counted too.
func (b *bench) readBack(ctx context.Context, br *openflow.Bridge, bridge string, n int, s *sample) error {
	allocated := func(f func() error) (time.Duration, uint64, error) {
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		start := time.Now()
		err := f()
		took := time.Since(start)
		runtime.ReadMemStats(&m1)
		return took, m1.TotalAlloc - m0.TotalAlloc, err
	}
	var err error
	s.verify, s.verifyAlloc, err = allocated(func() error {
		diffs, err := br.Verify(ctx)
		if err == nil && len(diffs) > 0 {
			err = fmt.Errorf("verify of %d flows found %d differences, first %v", n, len(diffs), diffs[0])
		}
		return err
	})
	if err != nil {
		return err
	}
	s.decode, s.decodeAlloc, err = allocated(func() error {
		stats, err := br.FlowStats(ctx, 70, 0, 0)
		if err == nil && len(stats) != n {
			err = fmt.Errorf("flow stats of table 70: %d flows, want %d", len(stats), n)
		}
		return err
	})
	if err != nil {
		return err
	}
	start := time.Now()
	out, err := b.ovs.Ofctl("dump-flows", "--no-stats", bridge)
	s.ofctlDump = time.Since(start)
	if err != nil {
		return err
	}
	if got := strings.Count(out, "actions="); got != n {
		return fmt.Errorf("ovs-ofctl dump-flows showed %d flows, want %d", got, n)
	}
	return nil
}

// deleteBridges deletes the bridges and waits until ovs-vswitchd has destroyed them and their
// flows, plus a pause for its deferred frees, so that the next run starts on a quiet switch.
func (b *bench) deleteBridges(names ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, name := range names {
		if _, err := b.db.DeleteBridge(ctx, name); err != nil {
			fmt.Fprintf(os.Stderr, "bench-ovs: deleting bridge %s: %v\n", name, err)
		}
	}
	for _, name := range names {
		for ctx.Err() == nil {
			if _, err := os.Stat(b.ovs.MgmtSocket(name)); os.IsNotExist(err) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	time.Sleep(settle)
}

// writeText renders the flows, with the cookies Sync stamps, as ovs-ofctl reads them.
func (b *bench) writeText(n int, round uint16, desired []openflow.Flow) (string, error) {
	var sb strings.Builder
	for _, f := range desired {
		f.Cookie = openflow.MakeCookie(round, category, f.Cookie)
		sb.WriteString(f.String())
		sb.WriteByte('\n')
	}
	file := filepath.Join(b.ovs.Dir, fmt.Sprintf("flows-%d.txt", n))
	return file, os.WriteFile(file, []byte(sb.String()), 0o600)
}

func (b *bench) expectFlowCount(bridge string, n int) error {
	out, err := b.ovs.Ofctl("dump-aggregate", bridge)
	if err != nil {
		return err
	}
	if !strings.Contains(out, fmt.Sprintf("flow_count=%d", n)) {
		return fmt.Errorf("bridge %s: want %d flows: %s", bridge, n, strings.TrimSpace(out))
	}
	return nil
}

func collect(samples []sample, f func(sample) float64) []float64 {
	out := make([]float64, len(samples))
	for i, s := range samples {
		out[i] = f(s)
	}
	return out
}

// median of an odd count is the middle value; of an even count, the mean of the middle two.
func median(samples []sample, f func(sample) float64) float64 {
	v := collect(samples, f)
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func msOf(d float64) int64 { return time.Duration(d).Milliseconds() }
