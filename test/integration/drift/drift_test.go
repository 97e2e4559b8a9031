//go:build linux

package drift_test

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/simnode"
)

var server *framework.APIServer

func TestMain(m *testing.M) {
	framework.Main(m, "drift integration tests", &server, framework.MainOptions{})
}

const (
	converge = 30 * time.Second
	// resync is the agents' periodic drift check: far beyond the test, so that only events repair.
	resync = 30 * time.Minute
	// repairBound fails the test; the goal is under a second, and the times are printed.
	repairBound = 5 * time.Second
	bridge      = "br-int"
)

// TestDriftIsRepairedFromEvents takes, one at a time, a flow, every flow, the tunnel port, the route
// to the other node's Pods and the gateway's address from node a, and measures how long the agent
// takes to put each back while its periodic checks wait for half an hour. A Pod on a still reaches
// a Pod on b afterwards.
func TestDriftIsRepairedFromEvents(t *testing.T) {
	u := simnode.NewUnderlay(t, netip.MustParsePrefix("192.168.71.0/24"))
	opts := framework.AgentOptions{ResyncPeriod: resync}
	a := framework.StartPodNodeWith(t, server, u, "drift-a", "192.168.71.11/24", "10.244.71.0/24", converge, framework.PodNodeOptions{Agent: opts})
	b := framework.StartPodNodeWith(t, server, u, "drift-b", "192.168.71.12/24", "10.244.72.0/24", converge, framework.PodNodeOptions{Agent: opts})
	a.Route(t)
	b.Route(t)
	podA := a.AddPod(t, "drift-pod-a", framework.TestPodOptions{})
	podB := b.AddPod(t, "drift-pod-b", framework.TestPodOptions{})

	g := NewWithT(t)
	reaches := func(g Gomega) {
		_, received, err := simnode.Ping(podA.NS, podB.IP, 1)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(received).To(Equal(1), "%s reaches %s on the other node", podA.Name, podB.Name)
	}
	g.Eventually(reaches).WithTimeout(converge).Should(Succeed())

	flows := func(g Gomega) []string {
		lines, err := a.OVS.DumpFlows(bridge)
		g.Expect(err).NotTo(HaveOccurred())
		return lines
	}
	remoteRoute := func(g Gomega) string {
		out, err := a.Exec("ip", "-4", "route", "show", b.PodCIDR.String())
		g.Expect(err).NotTo(HaveOccurred())
		return strings.TrimSpace(out)
	}
	gatewayAddr := netip.PrefixFrom(a.PodCIDR.Addr().Next(), a.PodCIDR.Bits())
	gatewayAddrs := func(g Gomega) string {
		out, err := a.Exec("ip", "-4", "-o", "addr", "show", "dev", networkv1alpha1.DefaultGatewayName)
		g.Expect(err).NotTo(HaveOccurred())
		return out
	}
	tunnelOFPort := func(g Gomega) string {
		out, err := a.OVS.Vsctl("--if-exists", "get", "interface", networkv1alpha1.DefaultTunnelPortName, "ofport")
		g.Expect(err).NotTo(HaveOccurred())
		return strings.TrimSpace(out)
	}

	// The node is converged: its flows stay put while nothing changes.
	var before []string
	g.Eventually(func(g Gomega) {
		first := flows(g)
		time.Sleep(200 * time.Millisecond)
		g.Expect(flows(g)).To(Equal(first))
		before = first
	}).WithTimeout(converge).Should(Succeed())
	g.Expect(remoteRoute(g)).NotTo(BeEmpty())
	g.Expect(gatewayAddrs(g)).To(ContainSubstring(gatewayAddr.String()))
	ofport := tunnelOFPort(g)
	g.Expect(ofport).To(MatchRegexp(`^[1-9][0-9]*$`))

	// oneFlow is a flow of a table other than 0 as `ovs-ofctl --strict del-flows` names it.
	var oneFlow string
	for _, l := range before {
		if strings.Contains(l, "table=") && strings.Contains(l, podA.IP.String()) {
			match, _, _ := strings.Cut(l, " actions=")
			_, match, _ = strings.Cut(match, ", ") // the cookie
			oneFlow = strings.ReplaceAll(match, " ", "")
			break
		}
	}
	g.Expect(oneFlow).NotTo(BeEmpty(), "a flow of %s among %v", podA.IP, before)

	cases := []struct {
		drift    string
		do       []string
		repaired func(g Gomega)
	}{
		{"one flow deleted (" + oneFlow + ")", []string{"ovs-ofctl", "-O", "OpenFlow15", "--strict", "del-flows", bridge, oneFlow},
			func(g Gomega) { g.Expect(flows(g)).To(Equal(before)) }},
		{fmt.Sprintf("every flow deleted (%d)", len(before)), []string{"ovs-ofctl", "-O", "OpenFlow15", "del-flows", bridge},
			func(g Gomega) { g.Expect(flows(g)).To(Equal(before)) }},
		{"tunnel port deleted", []string{"ovs-vsctl", "del-port", bridge, networkv1alpha1.DefaultTunnelPortName},
			func(g Gomega) {
				g.Expect(tunnelOFPort(g)).To(Equal(ofport))
				g.Expect(flows(g)).To(Equal(before))
			}},
		{"route to " + b.PodCIDR.String() + " deleted", []string{"ip", "route", "del", b.PodCIDR.String()},
			func(g Gomega) { g.Expect(remoteRoute(g)).NotTo(BeEmpty()) }},
		{"gateway address " + gatewayAddr.String() + " deleted", []string{"ip", "addr", "del", gatewayAddr.String(), "dev", networkv1alpha1.DefaultGatewayName},
			func(g Gomega) { g.Expect(gatewayAddrs(g)).To(ContainSubstring(gatewayAddr.String())) }},
	}
	var report []string
	for _, c := range cases {
		t.Run(c.drift, func(t *testing.T) {
			g := NewWithT(t)
			args := c.do
			switch args[0] {
			case "ovs-ofctl":
				out, err := a.OVS.Ofctl(args[1:]...)
				g.Expect(err).NotTo(HaveOccurred(), out)
			case "ovs-vsctl":
				out, err := a.OVS.Vsctl(args[1:]...)
				g.Expect(err).NotTo(HaveOccurred(), out)
			default:
				a.MustExec(t, args...)
			}
			start := time.Now()
			g.Eventually(c.repaired).WithTimeout(repairBound).WithPolling(10*time.Millisecond).Should(Succeed(), "repaired")
			took := time.Since(start)
			report = append(report, fmt.Sprintf("%-60s repaired in %v", c.drift, took.Round(time.Millisecond)))
			g.Eventually(reaches).WithTimeout(converge).Should(Succeed(), "traffic after the repair")
		})
	}
	slices.Sort(report)
	t.Logf("drift repaired from events (periodic checks every %v):\n%s", resync, strings.Join(report, "\n"))
}
