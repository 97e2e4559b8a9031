//go:build linux && bench

package benchutil

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/winnet-io/winnet/test/simnode"
)

// MonitorFlow runs an OpenFlow flow monitor (ovs-ofctl monitor, one connection kept open, for at
// most 5 minutes) on the node's bridge for flows matching spec and sends the time the first one
// is added, or replaced (an add over an installed flow is reported as ADDED by OVS 3.1, a
// modify_strict as MODIFIED: both count). The monitor is registered with the switch when it
// returns. The agent sends each pass in one bundle, so the first flow of a pass seen means the
// whole pass is in the switch; polling with dump-flows instead would start a process per look and
// cost the agent's cores about 10 ms each time. When the monitor ends without seeing the flow, the
// channel is closed and what ovs-ofctl printed last is written to stdout.
func MonitorFlow(t *testing.T, ctx context.Context, node *simnode.Node, bridge, spec string) <-chan time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	cmd := exec.CommandContext(ctx, "ovs-ofctl", "-O", "OpenFlow15", "monitor", "unix:"+node.OVS.MgmtSocket(bridge), "watch:"+spec)
	cmd.Env = append(os.Environ(), "OVS_RUNDIR="+node.OVS.Dir) // for its control socket
	// It prints the monitor's reply on stdout but the updates on stderr (unbuffered): read both.
	out, w, err := os.Pipe()
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	err = cmd.Start()
	_ = w.Close()
	if err != nil {
		cancel()
		t.Fatalf("starting ovs-ofctl monitor: %v", err)
	}
	t.Cleanup(func() { cancel(); _ = out.Close() })
	lines := bufio.NewScanner(out)
	// The reply to the monitor request (with the matching flows present, none) comes first.
	if !lines.Scan() || !strings.Contains(lines.Text(), "reply") {
		t.Fatalf("ovs-ofctl monitor: unexpected first line %q (%v)", lines.Text(), lines.Err())
	}
	seen := make(chan time.Time, 1)
	started := time.Now()
	go func() {
		defer close(seen)
		var last []string
		for lines.Scan() {
			text := lines.Text()
			if strings.Contains(text, "event=ADDED") || strings.Contains(text, "event=MODIFIED") {
				seen <- time.Now()
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				return
			}
			if last = append(last, text); len(last) > 5 {
				last = last[1:]
			}
		}
		err := cmd.Wait()
		fmt.Printf("ovs-ofctl monitor for %q ended after %v without seeing the flow (%v, context: %v); its last lines: %q\n",
			spec, time.Since(started).Round(time.Millisecond), err, ctx.Err(), last)
	}()
	return seen
}
