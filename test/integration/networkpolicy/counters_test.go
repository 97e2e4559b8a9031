//go:build linux

package networkpolicy_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	cnpv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/winnet-io/winnet/controllers/networkpolicy"
	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/simnode"
)

// series is one counter series as the metrics page names it: policy_kind, namespace, name, rule,
// direction, action.
type series [6]string

// counterPage is what one scrape of the agent's /metrics endpoint says of the rule counters.
type counterPage map[string]map[series]float64

var counterLine = regexp.MustCompile(`^(winnet_policy_rule_(?:packets|bytes|connections)_total)\{([^}]*)\} (\S+)$`)
var counterLabel = regexp.MustCompile(`(\w+)="([^"]*)"`)

// scrapeCounters scrapes the agent's real metrics endpoint (HTTPS, authorized by the API server).
func scrapeCounters(t *testing.T, reader *framework.MetricsReader, address string) counterPage {
	t.Helper()
	body, err := reader.Scrape(context.Background(), address)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	page := counterPage{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		m := counterLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		labels := map[string]string{}
		for _, l := range counterLabel.FindAllStringSubmatch(m[2], -1) {
			labels[l[1]] = l[2]
		}
		v, err := strconv.ParseFloat(m[3], 64)
		NewWithT(t).Expect(err).NotTo(HaveOccurred())
		if page[m[1]] == nil {
			page[m[1]] = map[series]float64{}
		}
		page[m[1]][series{labels["policy_kind"], labels["namespace"], labels["name"], labels["rule"], labels["direction"], labels["action"]}] = v
	}
	return page
}

// freePort is a free TCP port on the loopback address, for the agent's metrics endpoint.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// talk opens a TCP connection from the namespace to addr, echoes n bytes through it and closes it.
func talk(t *testing.T, nsName string, addr netip.AddrPort, n int) {
	t.Helper()
	c := dial(t, nsName, addr)
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	payload := bytes.Repeat([]byte("x"), n)
	if _, err := c.Write(payload); err != nil {
		t.Fatalf("writing to %s: %v", addr, err)
	}
	if _, err := io.ReadFull(c, make([]byte, n)); err != nil {
		t.Fatalf("reading the echo of %s: %v", addr, err)
	}
	c.Close()
}

// tryEcho opens a TCP connection from the namespace to addr and echoes a line through it.
func tryEcho(nsName string, addr netip.AddrPort) error {
	var c net.Conn
	if err := framework.InNS(nsName, func() error {
		var err error
		c, err = net.DialTimeout("tcp4", addr.String(), 2*time.Second)
		return err
	}); err != nil {
		return err
	}
	defer c.Close()
	return echo(c)
}

// flowPackets are the packet counters of a table's policy counter flows (those matching ct_label),
// by cookie.
func flowPackets(t *testing.T, n *framework.PodNode, table int) map[string]string {
	t.Helper()
	out := n.OVS.MustOfctl(t, "-O", "OpenFlow15", "dump-flows", "br-int", fmt.Sprintf("table=%d", table))
	got := map[string]string{}
	re := regexp.MustCompile(`cookie=(0x[0-9a-f]+),.*n_packets=(\d+)`)
	for _, l := range strings.Split(out, "\n") {
		if m := re.FindStringSubmatch(l); m != nil && strings.Contains(l, "ct_label=") {
			got[m[1]] = m[2]
		}
	}
	return got
}

// TestRuleCounters sends real connections through NetworkPolicy and ClusterNetworkPolicy rules and
// reads the rule counters from the agent's /metrics endpoint: an allow rule's connections move by
// the connections made and its bytes by at least what was echoed; a merged rule counts each Pod's
// connections under the rule that selects it; a refused connection moves its namespace's
// default-deny; a ClusterNetworkPolicy Deny and Accept rule count theirs; an unrelated policy
// change keeps the flows' counters.
func TestRuleCounters(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	u := simnode.NewUnderlay(t, netip.MustParsePrefix("192.168.83.0/24"))
	address := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	a := framework.StartPodNodeWith(t, server, u, "ctr-a", "192.168.83.11/24", "10.244.83.0/24", converge,
		framework.PodNodeOptions{Agent: framework.AgentOptions{MetricsBindAddress: address}})
	a.OVS.ExactMatchDatapath(t)
	reader, err := server.NewMetricsReader(ctx)
	g.Expect(err).NotTo(HaveOccurred())

	for _, name := range []string{"ctr-x", "ctr-y"} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"team": name}}}
		g.Expect(server.Client.Create(ctx, ns)).To(Succeed())
		t.Cleanup(func() { _ = server.Client.Delete(context.Background(), ns) })
	}
	web := a.AddPod(t, "web", framework.TestPodOptions{Namespace: "ctr-x", Labels: map[string]string{"app": "web"}})
	web2 := a.AddPod(t, "web2", framework.TestPodOptions{Namespace: "ctr-x", Labels: map[string]string{"app": "web2"}})
	client := a.AddPod(t, "client", framework.TestPodOptions{Namespace: "ctr-x", Labels: map[string]string{"app": "client"}})
	stranger := a.AddPod(t, "stranger", framework.TestPodOptions{Namespace: "ctr-y", Labels: map[string]string{"app": "stranger"}})
	serveEcho(t, web.NS, echoPort)
	serveEcho(t, web2.NS, echoPort)
	serveEcho(t, web.NS, otherPort)
	framework.Serve(t, client.NS, "client", otherPort)
	webEcho, web2Echo, webOther := netip.AddrPortFrom(web.IP, echoPort), netip.AddrPortFrom(web2.IP, echoPort), netip.AddrPortFrom(web.IP, otherPort)

	// Two policies admit the same peers on the same port to different Pods: one conjunction.
	admitClients := func(name, app string) *networkingv1.NetworkPolicy {
		return &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ctr-x", Name: name},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{
					From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}}}},
					Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(echoPort))}},
				}},
			},
		}
	}
	createPolicy(t, admitClients("web", "web"))
	createPolicy(t, admitClients("web2", "web2"))
	expectRefused(t, stranger.NS, "tcp4", webEcho)
	g.Eventually(func() error { return tryEcho(client.NS, webEcho) }).WithTimeout(converge).Should(Succeed())
	g.Eventually(func() error { return tryEcho(client.NS, web2Echo) }).WithTimeout(converge).Should(Succeed())

	webRule := series{"NetworkPolicy", "ctr-x", "web", "ingress[0]", "ingress", "Allow"}
	web2Rule := series{"NetworkPolicy", "ctr-x", "web2", "ingress[0]", "ingress", "Allow"}
	defaultDeny := series{"NetworkPolicy", "ctr-x", "", networkpolicy.DefaultDenyRule, "ingress", networkpolicy.ActionDrop}
	// The counters are read at most every CounterCacheTTL: each check waits for a fresh read.
	fresh := func() counterPage {
		time.Sleep(networkpolicy.CounterCacheTTL + 500*time.Millisecond)
		return scrapeCounters(t, reader, address)
	}
	before := fresh()
	g.Expect(before["winnet_policy_rule_connections_total"]).To(HaveKey(webRule), "the rule's series exists before it counts")
	g.Expect(before["winnet_policy_rule_connections_total"]).To(HaveKey(web2Rule))

	const conns, size = 5, 3000
	for range conns {
		talk(t, client.NS, webEcho, size)
	}
	after := fresh()
	delta := func(metric string, s series) float64 { return after[metric][s] - before[metric][s] }
	g.Expect(delta("winnet_policy_rule_connections_total", webRule)).To(Equal(float64(conns)), "each connection once")
	g.Expect(delta("winnet_policy_rule_bytes_total", webRule)).To(BeNumerically(">=", 2*conns*size), "both directions of what was echoed")
	g.Expect(delta("winnet_policy_rule_packets_total", webRule)).To(BeNumerically(">=", 2*conns), "every packet, not the first alone")
	g.Expect(delta("winnet_policy_rule_connections_total", web2Rule)).To(BeZero(), "the merged rule's other Pod counted nothing")

	// The merged rule counts web2's connections under web2's rule.
	before = after
	for range 3 {
		talk(t, client.NS, web2Echo, 100)
	}
	after = fresh()
	g.Expect(delta("winnet_policy_rule_connections_total", web2Rule)).To(Equal(3.0))
	g.Expect(delta("winnet_policy_rule_connections_total", webRule)).To(BeZero())

	// A connection to a Service (committed by its DNAT before policy sees it) counts once too, with
	// its packets.
	vip := clusterIPService(t, "ctr-web", web, echoPort)
	g.Eventually(func() error { return tryEcho(client.NS, netip.AddrPortFrom(vip, 80)) }).WithTimeout(converge).Should(Succeed())
	before = fresh()
	talk(t, client.NS, netip.AddrPortFrom(vip, 80), size)
	after = fresh()
	g.Expect(delta("winnet_policy_rule_connections_total", webRule)).To(Equal(1.0))
	g.Expect(delta("winnet_policy_rule_bytes_total", webRule)).To(BeNumerically(">=", 2*size))

	// A refused connection moves its namespace's default-deny, and no allow rule.
	before = after
	_, err = framework.Ask(stranger.NS, "tcp4", webEcho)
	g.Expect(err).To(HaveOccurred())
	after = fresh()
	g.Expect(delta("winnet_policy_rule_connections_total", defaultDeny)).To(BeNumerically(">=", 1))
	g.Expect(delta("winnet_policy_rule_packets_total", defaultDeny)).To(BeNumerically(">=", 1))
	g.Expect(delta("winnet_policy_rule_connections_total", webRule)).To(BeZero())

	// An unrelated policy change (client isolated for ingress, admitted on httpPort from anyone)
	// leaves the counter flows already there alone: they are not re-added, their counters go on.
	flowsBefore := flowPackets(t, a, 102)
	g.Expect(flowsBefore).NotTo(BeEmpty())
	unrelated := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ctr-x", Name: "unrelated"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(httpPort))}},
			}},
		},
	}
	createPolicy(t, unrelated)
	expectRefused(t, stranger.NS, "tcp4", netip.AddrPortFrom(client.IP, otherPort))
	flowsNow := flowPackets(t, a, 102)
	for cookie, n := range flowsBefore {
		g.Expect(flowsNow).To(HaveKeyWithValue(cookie, n), "counter flow %s kept its counter", cookie)
	}

	// ClusterNetworkPolicy: an Admin Deny of team ctr-y to web's other port, an Admin Accept of
	// client to it.
	tcp := func(port int32) []cnpv1beta1.ClusterNetworkPolicyProtocol { return tcpPort(port) }
	admin := &cnpv1beta1.ClusterNetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "ctr-admin"},
		Spec: cnpv1beta1.ClusterNetworkPolicySpec{
			Tier: cnpv1beta1.AdminTier, Priority: 30,
			Subject: cnpv1beta1.ClusterNetworkPolicySubject{Namespaces: teamNamespaces("ctr-x")},
			Ingress: []cnpv1beta1.ClusterNetworkPolicyIngressRule{
				{Name: "accept-clients", Action: cnpv1beta1.ClusterNetworkPolicyRuleActionAccept, Protocols: tcp(otherPort),
					From: []cnpv1beta1.ClusterNetworkPolicyIngressPeer{{Pods: &cnpv1beta1.NamespacedPod{
						PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}}}}}},
				{Name: "deny-y", Action: cnpv1beta1.ClusterNetworkPolicyRuleActionDeny, Protocols: tcp(otherPort),
					From: []cnpv1beta1.ClusterNetworkPolicyIngressPeer{{Namespaces: teamNamespaces("ctr-y")}}},
				{Name: "pass-clients", Action: cnpv1beta1.ClusterNetworkPolicyRuleActionPass, Protocols: tcp(echoPort),
					From: []cnpv1beta1.ClusterNetworkPolicyIngressPeer{{Pods: &cnpv1beta1.NamespacedPod{
						PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}}}}}},
			},
		},
	}
	createCNP(t, admin)
	g.Eventually(func() error { return tryEcho(client.NS, webOther) }).WithTimeout(converge).Should(Succeed())
	before = fresh()
	accept := series{"ClusterNetworkPolicy", "", "ctr-admin", "ingress[0]", "ingress", "Accept"}
	deny := series{"ClusterNetworkPolicy", "", "ctr-admin", "ingress[1]", "ingress", "Deny"}
	for range 2 {
		talk(t, client.NS, webOther, 500)
	}
	_, err = framework.Ask(stranger.NS, "tcp4", webOther)
	g.Expect(err).To(HaveOccurred())
	after = fresh()
	g.Expect(delta("winnet_policy_rule_connections_total", accept)).To(Equal(2.0))
	g.Expect(delta("winnet_policy_rule_bytes_total", accept)).To(BeNumerically(">=", 2*2*500))
	g.Expect(delta("winnet_policy_rule_connections_total", deny)).To(BeNumerically(">=", 1))
	g.Expect(delta("winnet_policy_rule_packets_total", deny)).To(BeNumerically(">=", 1))
	g.Expect(delta("winnet_policy_rule_connections_total", defaultDeny)).To(BeZero(), "the Admin tier decided first")

	// A Pass counts what it passed; NetworkPolicy then admits it, and counts it too.
	pass := series{"ClusterNetworkPolicy", "", "ctr-admin", "ingress[2]", "ingress", "Pass"}
	before = after
	talk(t, client.NS, webEcho, 100)
	after = fresh()
	g.Expect(delta("winnet_policy_rule_connections_total", pass)).To(BeNumerically(">=", 1))
	g.Expect(delta("winnet_policy_rule_connections_total", webRule)).To(Equal(1.0))

	// An egress rule counts the same connections from the client's side: both ids are committed.
	clientOut := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ctr-x", Name: "client-out"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress: []networkingv1.NetworkPolicyEgressRule{{
				To:    []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(echoPort))}},
			}},
		},
	}
	createPolicy(t, clientOut)
	expectRefused(t, client.NS, "tcp4", web2Echo)
	egressRule := series{"NetworkPolicy", "ctr-x", "client-out", "egress[0]", "egress", "Allow"}
	before = fresh()
	for range 2 {
		talk(t, client.NS, webEcho, size)
	}
	after = fresh()
	g.Expect(delta("winnet_policy_rule_connections_total", egressRule)).To(Equal(2.0))
	g.Expect(delta("winnet_policy_rule_bytes_total", egressRule)).To(BeNumerically(">=", 2*2*size))
	g.Expect(delta("winnet_policy_rule_connections_total", webRule)).To(Equal(2.0))
	g.Expect(delta("winnet_policy_rule_bytes_total", webRule)).To(BeNumerically(">=", 2*2*size))

	// A rule's series goes with its rule.
	deleteObject(t, admin)
	g.Eventually(func() map[series]float64 {
		return scrapeCounters(t, reader, address)["winnet_policy_rule_connections_total"]
	}).WithTimeout(converge).ShouldNot(HaveKey(accept))
}
