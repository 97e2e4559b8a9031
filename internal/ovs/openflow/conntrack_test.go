package openflow_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// TestFlushConntrackZone: a flush deletes every connection of its zone, and only of its zone; a flush
// of zone 0 (every zone, on Windows) is refused. The connections are committed by real packets.
func TestFlushConntrackZone(t *testing.T) {
	g := NewWithT(t)
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Two UDP connections in each of zones 61440 and 61441, committed by packets the switch runs
	// ct(commit) on.
	for _, zone := range []int{61440, 61441} {
		for _, sport := range []string{"d431", "d432"} {
			frame := "aabbccddeeff0a580a000005" + "0800" + "45000020000040004011265f0a0000050a60000a" + sport + "0035000c0000" + "6869217e"
			e.ovs.MustOfctl(t, "-O", "OpenFlow15", "packet-out", bridge,
				fmt.Sprintf("in_port=LOCAL,packet=%s,actions=ct(commit,zone=%d)", frame, zone))
		}
	}
	g.Expect(conntrackZone(t, e, 61440)).To(HaveLen(2))
	g.Expect(conntrackZone(t, e, 61441)).To(HaveLen(2))

	start := time.Now()
	g.Expect(e.br.FlushConntrackZone(ctx, 61440)).To(Succeed())
	t.Logf("flushing a zone of 2 connections took %v", time.Since(start))
	g.Expect(conntrackZone(t, e, 61440)).To(BeEmpty(), "the flushed zone is empty when the flush returns")
	g.Expect(conntrackZone(t, e, 61441)).To(HaveLen(2), "another zone keeps its connections")

	g.Expect(e.br.FlushConntrackZone(ctx, 0)).To(MatchError(ContainSubstring("zone 0")))
	g.Expect(conntrackZone(t, e, 61441)).To(HaveLen(2))
	// The connection is usable again after the refusal.
	g.Expect(e.br.FlushConntrackZone(ctx, 61441)).To(Succeed())
	g.Expect(conntrackZone(t, e, 61441)).To(BeEmpty())
}

// conntrackZone lists the datapath's conntrack entries of a zone.
func conntrackZone(t *testing.T, e *env, zone int) []string {
	t.Helper()
	out, err := e.ovs.Appctl("dpctl/dump-conntrack", fmt.Sprintf("zone=%d", zone))
	if err != nil {
		t.Fatalf("dumping conntrack: %v", err)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.Contains(l, fmt.Sprintf("zone=%d", zone)) {
			lines = append(lines, l)
		}
	}
	return lines
}
