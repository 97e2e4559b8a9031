package kubectlwinnet

import (
	"bytes"
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/winnet-io/winnet"
	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
)

// TestVersion: --version prints the plugin's build without a kubeconfig.
func TestVersion(t *testing.T) {
	g := NewWithT(t)
	var out bytes.Buffer
	g.Expect(Run(context.Background(), []string{"--version"}, &out)).To(Succeed())
	g.Expect(out.String()).To(Equal(winnet.Build().String("kubectl-winnet") + "\n"))
	g.Expect(out.String()).To(HavePrefix("kubectl-winnet " + winnet.Version + " (revision "))
}

// TestNewTrace: the destination is a Pod, svc/NAME or an IPv4 address; a port is needed but for ICMP;
// bad input is refused with what to fix.
func TestNewTrace(t *testing.T) {
	g := NewWithT(t)
	tr, err := newTrace("ns", "a", "svc/web", "tcp", 80, 10*time.Second)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(tr.Spec.Destination.Service).To(Equal(&networkv1alpha1.ObjectReference{Name: "web"}))
	g.Expect(tr.Spec.Packet).To(Equal(networkv1alpha1.PacketTracePacket{Protocol: networkv1alpha1.PacketTraceTCP, DstPort: 80}))
	g.Expect(tr.Spec.TimeoutSeconds).To(Equal(int32(10)))
	tr, err = newTrace("ns", "a", "10.0.0.9", "icmp", 0, time.Hour)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(tr.Spec.Destination.IP).To(Equal(networkv1alpha1.IPv4Address("10.0.0.9")))
	g.Expect(tr.Spec.TimeoutSeconds).To(Equal(int32(300)), "capped at the API's maximum")
	tr, err = newTrace("ns", "a", "pod/b", "udp", 53, time.Second)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(tr.Spec.Destination.Pod).To(Equal(&networkv1alpha1.ObjectReference{Name: "b"}))
	_, err = newTrace("ns", "a", "b", "tcp", 0, time.Second)
	g.Expect(err).To(MatchError(ContainSubstring("--port is needed for tcp")))
	_, err = newTrace("ns", "a", "fd00::1", "tcp", 80, time.Second)
	g.Expect(err).To(MatchError(ContainSubstring("only IPv4")))
}

// TestPrintTrace: hops are printed from the source node along the nodes it forwarded to; nodes that
// observed nothing are left out.
func TestPrintTrace(t *testing.T) {
	g := NewWithT(t)
	o := func(c, a, d string) networkv1alpha1.PacketTraceObservation {
		return networkv1alpha1.PacketTraceObservation{Component: c, Action: a, Detail: d}
	}
	tr := &networkv1alpha1.PacketTrace{Status: networkv1alpha1.PacketTraceStatus{
		Phase: networkv1alpha1.PacketTraceSucceeded, Verdict: networkv1alpha1.PacketTraceDropped, SourceNode: "b",
		DroppedBy: &networkv1alpha1.PolicyRuleReference{Kind: "NetworkPolicy", Namespace: "ns", Name: "deny", Rule: "default deny"},
		Hops: []networkv1alpha1.PacketTraceHop{
			{Node: "a", Observations: []networkv1alpha1.PacketTraceObservation{o("NetworkPolicy", "Dropped", "no rule admits it")}},
			{Node: "c"},
			{Node: "b", Observations: []networkv1alpha1.PacketTraceObservation{o("Source", "Injected", "TCP"), o("Forwarding", "Forwarded", "tunnel to 192.0.2.1 (node a)")}},
		}}}
	var out bytes.Buffer
	PrintTrace(&out, tr)
	g.Expect(out.String()).To(Equal("Phase: Succeeded  Verdict: Dropped  Dropped by: NetworkPolicy ns/deny default deny\n" +
		"NODE  COMPONENT      ACTION     DETAIL\n" +
		"b     Source         Injected   TCP\n" +
		"b     Forwarding     Forwarded  tunnel to 192.0.2.1 (node a)\n" +
		"a     NetworkPolicy  Dropped    no rule admits it\n"))

	// A ClusterNetworkPolicy has no namespace.
	tr.Status.DroppedBy = &networkv1alpha1.PolicyRuleReference{Kind: "ClusterNetworkPolicy", Name: "no-metadata", Rule: "egress[0]"}
	out.Reset()
	PrintTrace(&out, tr)
	g.Expect(out.String()).To(HavePrefix("Phase: Succeeded  Verdict: Dropped  Dropped by: ClusterNetworkPolicy no-metadata egress[0]\n"))
}

// TestPrintTraceStripsControlCharacters: what agents, controllers or anyone who could write a trace's
// status put there reaches the terminal without control characters (no escape sequence runs).
func TestPrintTraceStripsControlCharacters(t *testing.T) {
	g := NewWithT(t)
	tr := &networkv1alpha1.PacketTrace{Status: networkv1alpha1.PacketTraceStatus{
		Phase: networkv1alpha1.PacketTraceFailed, Reason: "Timeout", Message: "no end\x1b]0;owned\x07", SourceNode: "a",
		Hops: []networkv1alpha1.PacketTraceHop{{Node: "a", Observations: []networkv1alpha1.PacketTraceObservation{
			{Component: "Source", Action: "Injected", Detail: "TCP\x1b[2J\x1b[1A\rhidden\u009b31m"}}}}}}
	var out bytes.Buffer
	PrintTrace(&out, tr)
	g.Expect(out.String()).NotTo(ContainSubstring("\x1b"))
	g.Expect(out.String()).NotTo(ContainSubstring("\r"))
	g.Expect(out.String()).NotTo(ContainSubstring("\u009b"))
	g.Expect(out.String()).To(ContainSubstring("Reason: Timeout: no end?]0;owned?\n"))
	g.Expect(out.String()).To(ContainSubstring("TCP?[2J?[1A?hidden?31m\n"))

	// A policy the trace's disclosure does not name.
	tr.Status = networkv1alpha1.PacketTraceStatus{Phase: networkv1alpha1.PacketTraceSucceeded, Verdict: networkv1alpha1.PacketTraceDropped,
		DroppedBy: &networkv1alpha1.PolicyRuleReference{Kind: "NetworkPolicy", Namespace: "shared", Rule: "default deny"}}
	out.Reset()
	PrintTrace(&out, tr)
	g.Expect(out.String()).To(HavePrefix("Phase: Succeeded  Verdict: Dropped  Dropped by: a NetworkPolicy of namespace shared default deny\n"))
}

// TestTraceNamespaceFromContext: without -n, a trace goes into the namespace of the kubeconfig's
// current context, as kubectl's commands do; "default" when the context names none.
func TestTraceNamespaceFromContext(t *testing.T) {
	g := NewWithT(t)
	kubeconfig := func(ns string) clientcmd.ClientConfig {
		cfg := clientcmdapi.NewConfig()
		cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1"}
		cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "t"}
		cfg.Contexts["x"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u", Namespace: ns}
		cfg.CurrentContext = "x"
		return clientcmd.NewNonInteractiveClientConfig(*cfg, "", &clientcmd.ConfigOverrides{}, nil)
	}
	ns, err := contextNamespace(kubeconfig("tenant-x"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ns).To(Equal("tenant-x"))
	ns, err = contextNamespace(kubeconfig(""))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ns).To(Equal("default"))
}

// TestPrintStatusNamesAFailedPreflight: a node whose preflight failed is listed under the last
// errors with the checks that failed; a preflight with warnings is not.
func TestPrintStatusNamesAFailedPreflight(t *testing.T) {
	g := NewWithT(t)
	n := networkv1alpha1.WindowsNodeNetwork{}
	n.Name = "win-1"
	n.Status.Conditions = []metav1.Condition{
		{Type: networkv1alpha1.ReadyCondition, Status: metav1.ConditionTrue, Reason: "Ready"},
		{Type: networkv1alpha1.PreflightCondition, Status: metav1.ConditionFalse, Reason: networkv1alpha1.PreflightFailedReason,
			Message: "FAIL kube-proxy: kube-proxy serves this node"},
	}
	var out bytes.Buffer
	PrintStatus(&out, []networkv1alpha1.WindowsNodeNetwork{n})
	g.Expect(out.String()).To(ContainSubstring("Ready=True,Preflight=False"))
	g.Expect(out.String()).To(ContainSubstring("win-1: Preflight=False PreflightFailed: FAIL kube-proxy: kube-proxy serves this node"))

	n.Status.Conditions[1].Status, n.Status.Conditions[1].Reason = metav1.ConditionTrue, networkv1alpha1.PreflightWarningsReason
	out.Reset()
	PrintStatus(&out, []networkv1alpha1.WindowsNodeNetwork{n})
	g.Expect(out.String()).NotTo(ContainSubstring("Last errors"))
}
