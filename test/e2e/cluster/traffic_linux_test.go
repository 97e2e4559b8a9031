//go:build linux

package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// twoHosts builds two namespaces joined by a veth pair (10.199.0.1 and 10.199.0.2) and returns them as places.
func twoHosts(t *testing.T) (a, b Place) {
	t.Helper()
	g := NewWithT(t)
	if err := checkPrerequisites(); err != nil {
		t.Fatalf("%v", err)
	}
	id := make([]byte, 2)
	_, _ = rand.Read(id)
	a = Place{Label: "a", NS: "wntraffic" + hex.EncodeToString(id) + "-a", IP: netip.MustParseAddr("10.199.0.1")}
	b = Place{Label: "b", NS: "wntraffic" + hex.EncodeToString(id) + "-b", IP: netip.MustParseAddr("10.199.0.2")}
	for _, p := range []Place{a, b} {
		g.Expect(addNS(p.NS)).To(Succeed())
		t.Cleanup(func() { _ = deleteNS(p.NS) })
	}
	g.Expect(run(a.NS, []string{"ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", b.NS})).To(Succeed())
	for _, p := range []Place{a, b} {
		g.Expect(run(p.NS, []string{"ip", "addr", "add", p.IP.String() + "/30", "dev", "eth0"},
			[]string{"ip", "link", "set", "eth0", "up"})).To(Succeed())
	}
	// The kernel passes a veth's carrier on with a delay of up to a second (linkwatch), longer under load:
	// the path must work before a test measures it.
	g.Expect(waitFor(10*time.Second, 50*time.Millisecond, func() error {
		if _, received, err := Ping(a, b.IP, 1); err != nil || received != 1 {
			return fmt.Errorf("%s does not reach %s yet (%v)", a, b, err)
		}
		return nil
	})).To(Succeed())
	return a, b
}

// dropInput installs an nftables rule in namespace ns that drops incoming packets matching match (nft syntax).
func dropInput(t *testing.T, ns string, match ...string) {
	t.Helper()
	g := NewWithT(t)
	g.Expect(run(ns,
		[]string{"nft", "add", "table", "inet", "wntest"},
		[]string{"nft", "add", "chain", "inet", "wntest", "in", "{ type filter hook input priority 0; }"},
		append(append([]string{"nft", "add", "rule", "inet", "wntest", "in"}, match...), "drop"),
	)).To(Succeed())
}

// TestSteadyPingCountsTrailingOutage cuts the path for the last 700 ms of a steady ping: every request of the
// outage counts as lost and the longest gap covers it, although no reply came after it.
func TestSteadyPingCountsTrailingOutage(t *testing.T) {
	g := NewWithT(t)
	a, b := twoHosts(t)
	ping, err := StartSteadyPing(a, b.IP, 20*time.Millisecond)
	g.Expect(err).NotTo(HaveOccurred())
	time.Sleep(500 * time.Millisecond)
	dropInput(t, b.NS, "icmp", "type", "echo-request")
	time.Sleep(700 * time.Millisecond)
	stats, err := ping.Stop()
	g.Expect(err).NotTo(HaveOccurred())
	t.Logf("700 ms outage at the end: %v", stats)
	g.Expect(stats.Lost()).To(BeNumerically(">=", 25), "the requests of a 700 ms outage every 20 ms")
	g.Expect(stats.LongestGap).To(BeNumerically(">=", 600*time.Millisecond))
	g.Expect(stats.Received).To(BeNumerically(">=", 15), "the replies before the outage")
}

// TestSteadyPingWithoutLoss: an undisturbed path loses nothing and has no gap worth the name.
func TestSteadyPingWithoutLoss(t *testing.T) {
	g := NewWithT(t)
	a, b := twoHosts(t)
	ping, err := StartSteadyPing(a, b.IP, 20*time.Millisecond)
	g.Expect(err).NotTo(HaveOccurred())
	time.Sleep(time.Second)
	stats, err := ping.Stop()
	g.Expect(err).NotTo(HaveOccurred())
	t.Logf("undisturbed: %v", stats)
	g.Expect(stats.Lost()).To(BeZero())
	// 50 at most in the second; a loaded machine delays the sender, and 20 are enough for "0 lost" to mean something.
	g.Expect(stats.Sent).To(BeNumerically(">=", 20))
	g.Expect(stats.LongestGap).To(BeNumerically("<", 500*time.Millisecond))
}

// TestProbeCountsEveryAttempt drops one echo request in six: with three attempts of two requests each, the
// second attempt loses one, and the check fails although its first attempt passed.
func TestProbeCountsEveryAttempt(t *testing.T) {
	g := NewWithT(t)
	a, b := twoHosts(t)
	dropInput(t, b.NS, "icmp", "type", "echo-request", "numgen", "inc", "mod", "6", "3")
	c := &Cluster{}
	results := c.Probe(context.Background(), []Check{{From: a, To: b, Path: "veth"}}, 3)
	t.Logf("one request in six dropped:\n%s", FormatTable(results))
	r := results[0]
	g.Expect(r.Attempts).To(HaveLen(3), "every attempt is made and reported")
	g.Expect(r.Attempts[0].ICMPReceived).To(Equal(2), "the first attempt passes")
	g.Expect(r.ICMPSent).To(Equal(6))
	g.Expect(r.ICMPReceived).To(Equal(5))
	g.Expect(r.TCPOK()).To(BeTrue())
	g.Expect(r.OK()).To(BeFalse(), "one lost packet in any attempt fails the check")
	g.Expect(FormatTable(results)).To(ContainSubstring("attempt 2 of 3: ICMP 1/2"))
}
