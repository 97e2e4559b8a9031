// Command ovs benchmarks installing flows through openflow.Sync against
// `ovs-ofctl --bundle add-flows` of the same flows on a private userspace OVS.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/winnet-io/winnet/internal/ovs/openflow"
	"github.com/winnet-io/winnet/internal/ovs/ovsdb"
	"github.com/winnet-io/winnet/internal/ovs/ovstest"
)

const category = 1

func main() {
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of our Syncs to this file")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench-ovs: %v\n", err)
			os.Exit(1)
		}
		_ = pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "bench-ovs: %v\n", err)
		os.Exit(1)
	}
}

func flows(n int) []openflow.Flow {
	vmac, _ := net.ParseMAC("aa:bb:cc:dd:ee:ff")
	out := make([]openflow.Flow, n)
	for i := range out {
		dst := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		out[i] = openflow.Flow{
			Table: 70, Priority: 200, Cookie: uint64(i + 1),
			Match: []openflow.MatchField{openflow.IPv4(), openflow.NwDst(netip.PrefixFrom(dst, 32))},
			Actions: []openflow.Action{
				openflow.SetEthDst(vmac),
				openflow.SetTunDst(netip.AddrFrom4([4]byte{192, 168, byte(i >> 8), byte(i)})),
				openflow.GotoTable(80),
			},
		}
	}
	return out
}

type result struct {
	n             int
	ours, ofctl   time.Duration
	incrMods      int
	incr          time.Duration
	oursBr, ofBr  string
	oursBridgeRef *openflow.Bridge
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
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

	var last result
	for i, n := range []int{20000, 100000} {
		r, err := measure(ctx, o, db, n, uint64(0x100+i))
		if err != nil {
			return err
		}
		if n == 100000 {
			// Change one flow among 100,000.
			desired := flows(n)
			desired[n/2].Actions = []openflow.Action{openflow.Output(7)}
			start := time.Now()
			res, err := r.oursBridgeRef.Sync(ctx, category, desired)
			if err != nil {
				return fmt.Errorf("incremental sync: %w", err)
			}
			r.incr = time.Since(start)
			r.incrMods = res.Mods()
			fmt.Printf("bench-ovs flows=%d ours_ms=%d ofctl_ms=%d ratio=%.2f incr_mods=%d incr_ms=%d\n",
				n, r.ours.Milliseconds(), r.ofctl.Milliseconds(), ratio(r), r.incrMods, r.incr.Milliseconds())
		} else {
			fmt.Printf("bench-ovs flows=%d ours_ms=%d ofctl_ms=%d ratio=%.2f\n", n, r.ours.Milliseconds(), r.ofctl.Milliseconds(), ratio(r))
		}
		if last.oursBridgeRef != nil {
			last.oursBridgeRef.Close()
		}
		last = r
	}
	if last.oursBridgeRef != nil {
		last.oursBridgeRef.Close()
	}
	return nil
}

func ratio(r result) float64 { return float64(r.ours) / float64(r.ofctl) }

func measure(ctx context.Context, o *ovstest.OVS, db *ovsdb.Client, n int, dpid uint64) (result, error) {
	r := result{n: n, oursBr: fmt.Sprintf("bo%d", n), ofBr: fmt.Sprintf("bc%d", n)}
	for j, name := range []string{r.oursBr, r.ofBr} {
		if _, err := db.EnsureBridge(ctx, ovsdb.BridgeSpec{Name: name, DatapathType: ovsdb.DatapathNetdev, DatapathID: dpid<<4 | uint64(j)}); err != nil {
			return r, err
		}
	}
	br, err := openflow.Connect(ctx, openflow.Options{Bridge: r.oursBr, Address: o.MgmtSocket(r.oursBr), Rounds: db})
	if err != nil {
		return r, err
	}
	r.oursBridgeRef = br
	desired := flows(n)

	start := time.Now()
	res, err := br.Sync(ctx, category, desired)
	if err != nil {
		return r, fmt.Errorf("sync of %d flows: %w", n, err)
	}
	r.ours = time.Since(start)
	if res.Added != n {
		return r, fmt.Errorf("sync added %d flows, want %d", res.Added, n)
	}

	// The same flows, as text, through ovs-ofctl in one bundle.
	var b strings.Builder
	for _, f := range br.Installed(category) {
		b.WriteString(f.String())
		b.WriteByte('\n')
	}
	file := filepath.Join(o.Dir, fmt.Sprintf("flows-%d.txt", n))
	if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
		return r, err
	}
	start = time.Now()
	if _, err := o.Ofctl("--bundle", "add-flows", r.ofBr, file); err != nil {
		return r, err
	}
	r.ofctl = time.Since(start)

	for _, name := range []string{r.oursBr, r.ofBr} {
		out, err := o.Ofctl("dump-aggregate", name)
		if err != nil {
			return r, err
		}
		if !strings.Contains(out, fmt.Sprintf("flow_count=%d", n)) {
			return r, fmt.Errorf("bridge %s: %s", name, strings.TrimSpace(out))
		}
	}
	return r, nil
}
