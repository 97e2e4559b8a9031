//go:build linux && bench

package benchutil

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/winnet-io/winnet/test/hostcmd"
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
	cmd := hostcmd.CommandContext(ctx, "ovs-ofctl", "-O", "OpenFlow15", "monitor", "unix:"+node.OVS.MgmtSocket(bridge), "watch:"+spec)
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

// SwitchEcho is the median of five OpenFlow echo round trips to the node's bridge on a connection
// of its own: how long ovs-vswitchd takes to answer anything at that moment (its main loop answers
// echoes, flow_mods and bundle requests alike), beside which the agent's flow changes are judged.
func SwitchEcho(t *testing.T, node *simnode.Node, bridge string) time.Duration {
	t.Helper()
	conn, err := net.Dial("unix", node.OVS.MgmtSocket(bridge))
	if err != nil {
		t.Fatalf("connecting to %s: %v", bridge, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	const version, hello, echoRequest, echoReply = 6, 0, 2, 3 // OpenFlow 1.5
	send := func(typ byte, xid uint32) {
		msg := []byte{version, typ, 0, 8, 0, 0, 0, 0}
		binary.BigEndian.PutUint32(msg[4:], xid)
		if _, err := conn.Write(msg); err != nil {
			t.Fatalf("writing to %s: %v", bridge, err)
		}
	}
	r := bufio.NewReader(conn)
	awaitReply := func(xid uint32) {
		hdr := make([]byte, 8)
		for {
			if _, err := io.ReadFull(r, hdr); err != nil {
				t.Fatalf("reading from %s: %v", bridge, err)
			}
			if _, err := io.CopyN(io.Discard, r, int64(binary.BigEndian.Uint16(hdr[2:4]))-8); err != nil {
				t.Fatalf("reading from %s: %v", bridge, err)
			}
			if hdr[1] == echoReply && binary.BigEndian.Uint32(hdr[4:]) == xid {
				return
			}
		}
	}
	send(hello, 1)
	var rtts []time.Duration
	for xid := uint32(2); xid < 7; xid++ {
		start := time.Now()
		send(echoRequest, xid)
		awaitReply(xid)
		rtts = append(rtts, time.Since(start))
	}
	slices.Sort(rtts)
	return rtts[len(rtts)/2]
}
