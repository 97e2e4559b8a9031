//go:build linux

package networkpolicy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	. "github.com/onsi/gomega/gstruct"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	cnpv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/controllers/networkpolicy"
	"github.com/winnet-io/winnet/internal/auditlog"
	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/simnode"
)

// auditWindow is the agent's deduplication window in this test: long enough that a refused
// connection's first SYN and its retransmission (1 s later on Linux) fall in one window.
const auditWindow = 3 * time.Second

// auditLines reads the agent's audit log.
func auditLines(t *testing.T, path string) []auditlog.Record {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []auditlog.Record
	s := bufio.NewScanner(f)
	for s.Scan() {
		var r auditlog.Record
		if err := json.Unmarshal(s.Bytes(), &r); err != nil {
			t.Fatalf("audit log line %q is no JSON record: %v", s.Text(), err)
		}
		out = append(out, r)
	}
	return out
}

// linesOf are the records of one 5-tuple.
func linesOf(records []auditlog.Record, proto string, src netip.AddrPort, dst netip.AddrPort) []auditlog.Record {
	var out []auditlog.Record
	for _, r := range records {
		if r.Protocol == proto && r.SrcIP == src.Addr().String() && r.SrcPort == src.Port() && r.DstIP == dst.Addr().String() && r.DstPort == dst.Port() {
			out = append(out, r)
		}
	}
	return out
}

// askFrom connects over TCP from the namespace's Pod, from a source port of its own, and returns
// the Serve server's answer; timeout bounds the connection attempt.
func askFrom(nsName string, src netip.AddrPort, dst netip.AddrPort, timeout time.Duration) (string, error) {
	var c net.Conn
	err := framework.InNS(nsName, func() error {
		d := net.Dialer{Timeout: timeout, LocalAddr: net.TCPAddrFromAddrPort(src)}
		var err error
		c, err = d.Dial("tcp4", dst.String())
		return err
	})
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	b := make([]byte, 256)
	n, err := c.Read(b)
	return string(b[:n]), err
}

// sourcePort is the port a Serve answer ("name addr:port") names.
func sourcePort(t *testing.T, answer string) uint16 {
	t.Helper()
	_, addr, ok := strings.Cut(answer, " ")
	ap, err := netip.ParseAddrPort(addr)
	if !ok || err != nil {
		t.Fatalf("answer %q names no address: %v", answer, err)
	}
	return ap.Port()
}

func annotate(t *testing.T, obj client.Object, value string) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	g.Expect(server.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
	before := obj.DeepCopyObject().(client.Object)
	a := obj.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	if value == "" {
		delete(a, networkv1alpha1.AuditLogAnnotation)
	} else {
		a[networkv1alpha1.AuditLogAnnotation] = value
	}
	obj.SetAnnotations(a)
	g.Expect(server.Client.Patch(ctx, obj, client.MergeFrom(before))).To(Succeed())
}

// controllerFlows are the node's policy flows that send packets to the agent.
func controllerFlows(t *testing.T, n *framework.PodNode) []string {
	t.Helper()
	flows, err := n.OVS.DumpFlows("br-int", "-O", "OpenFlow15")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range flows {
		if strings.Contains(f, "CONTROLLER:128") { // pipeline.AuditMaxLen
			out = append(out, f)
		}
	}
	return out
}

// TestAuditLog plays the audit log with real packets through a real agent and OVS: web (team x,
// audited), client-x (team x) and client-y (team y), all on one node, whose agent decides both
// the ingress to web and the egress of the clients. Each step says what it proves.
func TestAuditLog(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	u := simnode.NewUnderlay(t, netip.MustParsePrefix("192.168.79.0/24"))
	a := framework.StartPodNodeWith(t, server, u, "audit-a", "192.168.79.11/24", "10.244.79.0/24", converge,
		framework.PodNodeOptions{Agent: framework.AgentOptions{AuditLog: auditlog.Options{Window: auditWindow}}})
	a.OVS.ExactMatchDatapath(t)
	g.Expect(a.Agent.AuditLog).NotTo(BeNil())
	logPath := a.Agent.AuditLog.Path()

	nsX := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "audit-x", Labels: map[string]string{"team": "x"}}}
	nsY := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "audit-y", Labels: map[string]string{"team": "y"}}}
	for _, ns := range []*corev1.Namespace{nsX, nsY} {
		g.Expect(server.Client.Create(ctx, ns)).To(Succeed())
		t.Cleanup(func() { _ = server.Client.Delete(context.Background(), ns) })
	}
	web := a.AddPod(t, "web", framework.TestPodOptions{Namespace: "audit-x", Labels: map[string]string{"app": "web"}, Ports: httpPorts})
	clientX := a.AddPod(t, "client-x", framework.TestPodOptions{Namespace: "audit-x", Labels: map[string]string{"app": "client"}})
	clientY := a.AddPod(t, "client-y", framework.TestPodOptions{Namespace: "audit-y", Labels: map[string]string{"app": "client"}})
	framework.Serve(t, web.NS, "web", httpPort)
	framework.Serve(t, web.NS, "web", otherPort)
	webHTTP, webOther := netip.AddrPortFrom(web.IP, httpPort), netip.AddrPortFrom(web.IP, otherPort)

	// Off: a policy that admits client-x and drops client-y, no annotation. Connections both
	// ways are decided, and no flow sends anything to the agent: no packet-in at all.
	allowClient := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "audit-x", Name: "allow-client"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}}}}}},
		},
	}
	createPolicy(t, allowClient)
	expectAllowed(t, clientX.NS, "tcp4", webHTTP, "web")
	expectRefused(t, clientY.NS, "tcp4", webHTTP)
	g.Expect(controllerFlows(t, a)).To(BeEmpty(), "logging off changes no flow")
	g.Expect(a.Agent.AuditLog.Stats().PacketIns).To(BeZero(), "logging off costs no packet-in")

	// On: the namespace's rule and its isolated Pod's default drop send their decisions.
	annotate(t, nsX, "true")
	g.Eventually(func() []string { return controllerFlows(t, a) }).WithTimeout(converge).Should(HaveLen(2), "the rule's conj_id flow and web's default drop")
	answer, err := framework.Ask(clientX.NS, "tcp4", webHTTP)
	g.Expect(err).NotTo(HaveOccurred())
	admitted := netip.AddrPortFrom(clientX.IP, sourcePort(t, answer))
	// One SYN and its retransmission 1 s later (Linux), within one window: one line, count 2.
	dropped := netip.AddrPortFrom(clientY.IP, 45001)
	_, err = askFrom(clientY.NS, dropped, webHTTP, 1500*time.Millisecond)
	g.Expect(err).To(HaveOccurred())
	g.Eventually(func() []auditlog.Record { return linesOf(auditLines(t, logPath), "TCP", admitted, webHTTP) }).
		WithTimeout(auditWindow + 5*time.Second).Should(HaveLen(1))
	g.Eventually(func() []auditlog.Record { return linesOf(auditLines(t, logPath), "TCP", dropped, webHTTP) }).
		WithTimeout(auditWindow + 5*time.Second).Should(HaveLen(1))
	lines := auditLines(t, logPath)
	allowed := linesOf(lines, "TCP", admitted, webHTTP)[0]
	g.Expect(allowed).To(MatchFields(IgnoreExtras, Fields{"PolicyKind": Equal("NetworkPolicy"), "Namespace": Equal("audit-x"), "Name": Equal("allow-client"),
		"Rule": Equal("ingress[0]"), "Direction": Equal("ingress"), "Action": Equal("Allow"), "Node": Equal("audit-a"), "Count": Equal(1)}))
	g.Expect(time.Since(allowed.Time)).To(BeNumerically("<", time.Minute))
	deny := linesOf(lines, "TCP", dropped, webHTTP)[0]
	g.Expect(deny).To(MatchFields(IgnoreExtras, Fields{"PolicyKind": Equal("NetworkPolicy"), "Namespace": Equal("audit-x"), "Name": Equal(""),
		"Rule": Equal("default-deny"), "Direction": Equal("ingress"), "Action": Equal("Drop"), "IsolatedBy": Equal([]string{"allow-client"}),
		"Count": Equal(2)}), "the SYN and its retransmission")

	// An established connection is not logged again: many round trips, no new line.
	before := a.Agent.AuditLog.Stats().PacketIns
	serveEcho(t, web.NS, echoPort)
	conn := dial(t, clientX.NS, netip.AddrPortFrom(web.IP, echoPort))
	for range 20 {
		g.Expect(echo(conn)).To(Succeed())
	}
	g.Expect(a.Agent.AuditLog.Stats().PacketIns).To(Equal(before+1), "one packet-in: the connection's first packet")

	// ClusterNetworkPolicies, annotated: an Admin Accept (which skips NetworkPolicy: client-y
	// gets in) and an Admin Deny, each decision logged with its tier.
	accept := &cnpv1beta1.ClusterNetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "audit-accept", Annotations: map[string]string{networkv1alpha1.AuditLogAnnotation: "true"}},
		Spec: cnpv1beta1.ClusterNetworkPolicySpec{Tier: cnpv1beta1.AdminTier, Priority: 5,
			Subject: cnpv1beta1.ClusterNetworkPolicySubject{Namespaces: teamNamespaces("x")},
			Ingress: []cnpv1beta1.ClusterNetworkPolicyIngressRule{{Action: cnpv1beta1.ClusterNetworkPolicyRuleActionAccept,
				From: []cnpv1beta1.ClusterNetworkPolicyIngressPeer{{Namespaces: teamNamespaces("y")}}, Protocols: tcpPort(httpPort)}}},
	}
	denyOther := &cnpv1beta1.ClusterNetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "audit-deny", Annotations: map[string]string{networkv1alpha1.AuditLogAnnotation: "true"}},
		Spec: cnpv1beta1.ClusterNetworkPolicySpec{Tier: cnpv1beta1.AdminTier, Priority: 6,
			Subject: cnpv1beta1.ClusterNetworkPolicySubject{Namespaces: teamNamespaces("x")},
			Ingress: []cnpv1beta1.ClusterNetworkPolicyIngressRule{{Action: cnpv1beta1.ClusterNetworkPolicyRuleActionDeny,
				From: []cnpv1beta1.ClusterNetworkPolicyIngressPeer{{Namespaces: teamNamespaces("")}}, Protocols: tcpPort(otherPort)}}},
	}
	createCNP(t, accept)
	createCNP(t, denyOther)
	expectAllowed(t, clientY.NS, "tcp4", webHTTP, "web")
	expectRefused(t, clientX.NS, "tcp4", webOther)
	answer, err = framework.Ask(clientY.NS, "tcp4", webHTTP)
	g.Expect(err).NotTo(HaveOccurred())
	accepted := netip.AddrPortFrom(clientY.IP, sourcePort(t, answer))
	denied := netip.AddrPortFrom(clientX.IP, 45002)
	_, err = askFrom(clientX.NS, denied, webOther, 500*time.Millisecond)
	g.Expect(err).To(HaveOccurred())
	wantAccept := MatchFields(IgnoreExtras, Fields{"PolicyKind": Equal("ClusterNetworkPolicy"), "Namespace": Equal(""), "Name": Equal("audit-accept"),
		"Tier": Equal("Admin"), "Rule": Equal("ingress[0]"), "Direction": Equal("ingress"), "Action": Equal("Accept"), "Count": Equal(1)})
	wantDeny := MatchFields(IgnoreExtras, Fields{"PolicyKind": Equal("ClusterNetworkPolicy"), "Name": Equal("audit-deny"),
		"Tier": Equal("Admin"), "Rule": Equal("ingress[0]"), "Direction": Equal("ingress"), "Action": Equal("Deny"), "Count": Equal(1)})
	g.Eventually(func() []auditlog.Record { return linesOf(auditLines(t, logPath), "TCP", accepted, webHTTP) }).
		WithTimeout(auditWindow + 5*time.Second).Should(ConsistOf(wantAccept))
	g.Eventually(func() []auditlog.Record { return linesOf(auditLines(t, logPath), "TCP", denied, webOther) }).
		WithTimeout(auditWindow + 5*time.Second).Should(ConsistOf(wantDeny))

	// Off again, by "false" on the namespace, no annotation or a junk value on the policies and a
	// junk value on the other namespace (a Warning Event on each junk one says what is accepted):
	// no flow sends to the agent, no packet-in comes.
	annotate(t, nsX, "false")
	annotate(t, nsY, "True")
	annotate(t, accept, "yes")
	annotate(t, denyOther, "")
	g.Eventually(func() []string { return controllerFlows(t, a) }).WithTimeout(converge).Should(BeEmpty())
	for _, name := range []string{"audit-accept", "audit-y"} {
		g.Eventually(func() ([]string, error) { return server.WarningReasons(ctx, "default", name) }).WithTimeout(converge).
			Should(ContainElement(networkv1alpha1.AuditLogValueReason), name)
	}
	before = a.Agent.AuditLog.Stats().PacketIns
	expectAllowed(t, clientY.NS, "tcp4", webHTTP, "web")
	expectAllowed(t, clientX.NS, "tcp4", webHTTP, "web")
	expectRefused(t, clientX.NS, "tcp4", webOther)
	expectRefused(t, clientY.NS, "tcp4", webOther)
	g.Expect(a.Agent.AuditLog.Stats().PacketIns).To(Equal(before), "no packet-in once off")
	s := a.Agent.AuditLog.Stats()
	t.Logf("audit log: %d packet-ins, %d lines, dropped: rate %d queue %d unnamed %d write %d", s.PacketIns, s.Lines, s.DroppedRate, s.DroppedQueue, s.DroppedUnnamed, s.DroppedWrite)
	g.Expect(s.DroppedUnnamed+s.DroppedQueue+s.DroppedWrite+s.DroppedRate).To(BeZero(), "every decision named and written")
}

// auditSummaries reads the summary lines of the agent's audit log.
func auditSummaries(t *testing.T, path string) []auditlog.Summary {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []auditlog.Summary
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if !strings.Contains(line, `"rule":"`+auditlog.NotLoggedRule+`"`) {
			continue
		}
		var s auditlog.Summary
		if err := json.Unmarshal([]byte(line), &s); err != nil {
			t.Fatalf("audit log line %q is no summary: %v", line, err)
		}
		out = append(out, s)
	}
	return out
}

// flowKeys are the tables and matches of dumped flows (without their counters and actions).
func flowKeys(flows []string) map[string]bool {
	re := regexp.MustCompile(`table=\d+|priority=\S+`)
	out := map[string]bool{}
	for _, f := range flows {
		out[strings.Join(re.FindAllString(f, -1), " ")] = true
	}
	return out
}

// TestAuditLogSuspends: a flood of new connections in one audited namespace (audit-s), beyond its
// rate and sustained, takes the packet-ins out of that namespace's audited flows only, for the
// cooldown (an Event on the node's WindowsNodeNetwork): the other audited namespace on the node
// (audit-t) keeps its packet-ins and its decisions are written meanwhile. Then audit-s's flows
// send again, and a summary line says what of audit-s's was not written.
func TestAuditLogSuspends(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	u := simnode.NewUnderlay(t, netip.MustParsePrefix("192.168.78.0/24"))
	a := framework.StartPodNodeWith(t, server, u, "audit-s", "192.168.78.11/24", "10.244.78.0/24", converge,
		framework.PodNodeOptions{Agent: framework.AgentOptions{AuditLog: auditlog.Options{Rate: 5, Burst: 5, Window: 500 * time.Millisecond,
			SuspendAfter: 2 * time.Second, Cooldown: 10 * time.Second}}})
	a.OVS.ExactMatchDatapath(t)
	log := a.Agent.AuditLog
	flooder := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "audit-s", Annotations: map[string]string{networkv1alpha1.AuditLogAnnotation: "true"}}}
	other := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "audit-t"}}
	type tenant struct {
		web, client *framework.TestPod
		webHTTP     netip.AddrPort
	}
	tenants := map[string]*tenant{}
	for _, ns := range []*corev1.Namespace{flooder, other} {
		g.Expect(server.Client.Create(ctx, ns)).To(Succeed())
		t.Cleanup(func() { _ = server.Client.Delete(context.Background(), ns) })
		web := a.AddPod(t, "web", framework.TestPodOptions{Namespace: ns.Name, Labels: map[string]string{"app": "web"}})
		clientPod := a.AddPod(t, "client", framework.TestPodOptions{Namespace: ns.Name, Labels: map[string]string{"app": "client"}})
		framework.Serve(t, web.NS, "web", httpPort)
		createPolicy(t, &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "allow-client"},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{
					From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}}}}}},
			},
		})
		tenants[ns.Name] = &tenant{web: web, client: clientPod, webHTTP: netip.AddrPortFrom(web.IP, httpPort)}
	}
	s, t2 := tenants["audit-s"], tenants["audit-t"]
	expectAllowed(t, s.client.NS, "tcp4", s.webHTTP, "web")
	expectAllowed(t, t2.client.NS, "tcp4", t2.webHTTP, "web")
	// audit-s's audited flows (its rule's conj_id flow and its web's default drop), then
	// audit-t's too.
	g.Eventually(func() []string { return controllerFlows(t, a) }).WithTimeout(converge).Should(HaveLen(2))
	flooderFlows := flowKeys(controllerFlows(t, a))
	annotate(t, other, "true")
	g.Eventually(func() []string { return controllerFlows(t, a) }).WithTimeout(converge).Should(HaveLen(4))

	// About 50 new connections a second for 4 s in audit-s against its 5 lines a second: dropped
	// beyond its rate for the 2 s the agent tolerates, then audit-s alone is suspended.
	stop := time.Now().Add(4 * time.Second)
	for time.Now().Before(stop) {
		_, _ = framework.Ask(s.client.NS, "tcp4", s.webHTTP)
		time.Sleep(20 * time.Millisecond)
	}
	sus := log.Suspensions()
	g.Expect(sus.All).To(BeNil())
	g.Expect(sus.Owners).To(HaveLen(1), "%+v", log.Stats())
	suspension, ok := sus.Owners[auditlog.NamespaceOwner("audit-s")]
	g.Expect(ok).To(BeTrue(), "%+v", sus.Owners)
	g.Expect(suspension.Dropped).To(BeNumerically(">", 50))
	g.Eventually(func() []string { return controllerFlows(t, a) }).WithTimeout(converge).Should(HaveLen(2), "audit-t's audited flows only")
	for k := range flowKeys(controllerFlows(t, a)) {
		g.Expect(flooderFlows).NotTo(HaveKey(k), "audit-s's flows send nothing while suspended")
	}
	g.Eventually(func() ([]string, error) { return server.WarningReasons(ctx, "default", "audit-s") }).WithTimeout(converge).
		Should(ContainElement(networkpolicy.AuditLogSuspendedReason))
	// While audit-s is suspended, its connections send nothing to the agent and audit-t's are
	// written, one packet-in and one line each.
	before := log.Stats().PacketIns
	for range 10 {
		expectAllowed(t, s.client.NS, "tcp4", s.webHTTP, "web")
	}
	var written []netip.AddrPort
	for range 3 {
		answer, err := framework.Ask(t2.client.NS, "tcp4", t2.webHTTP)
		g.Expect(err).NotTo(HaveOccurred())
		written = append(written, netip.AddrPortFrom(t2.client.IP, sourcePort(t, answer)))
	}
	if log.Suspensions().Suspended(auditlog.NamespaceOwner("audit-s")) {
		g.Expect(log.Stats().PacketIns).To(Equal(before+3), "audit-t's 3 connections, none of audit-s's")
	}
	for _, src := range written {
		g.Eventually(func() []auditlog.Record { return linesOf(auditLines(t, log.Path()), "TCP", src, t2.webHTTP) }).
			WithTimeout(5 * time.Second).Should(ConsistOf(MatchFields(IgnoreExtras, Fields{"Namespace": Equal("audit-t"), "Name": Equal("allow-client")})))
	}

	// After the cooldown audit-s's flows send again, a summary line says what of audit-s's was
	// not written, and a new connection is logged.
	g.Eventually(func() []string { return controllerFlows(t, a) }).WithTimeout(time.Until(suspension.Until) + converge).Should(HaveLen(4))
	g.Eventually(func() []auditlog.Summary { return auditSummaries(t, log.Path()) }).WithTimeout(5*time.Second).Should(ConsistOf(
		MatchFields(IgnoreExtras, Fields{"PolicyKind": Equal("NetworkPolicy"), "Namespace": Equal("audit-s"), "Rule": Equal(auditlog.NotLoggedRule),
			"Count": BeNumerically(">=", suspension.Dropped), "SuspendedAt": BeTemporally("==", suspension.At), "SuspendedUntil": BeTemporally("==", suspension.Until),
			"Until": BeTemporally(">=", suspension.Until)})), "one summary, audit-s's: audit-t had everything written")
	answer, err := framework.Ask(s.client.NS, "tcp4", s.webHTTP)
	g.Expect(err).NotTo(HaveOccurred())
	src := netip.AddrPortFrom(s.client.IP, sourcePort(t, answer))
	g.Eventually(func() []auditlog.Record { return linesOf(auditLines(t, log.Path()), "TCP", src, s.webHTTP) }).
		WithTimeout(5 * time.Second).Should(HaveLen(1))
}
