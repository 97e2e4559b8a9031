//go:build !windows

package api

import (
	"context"
	"regexp"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"

	"github.com/winnet-io/winnet/test/hostcmd"
)

// TestKubectlGetShowsColumns runs the real kubectl against the test server and reads the columns a
// user sees for each kind, and the `winnet` category that lists all three.
func TestKubectlGetShowsColumns(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	c := server.Client

	wnn := &networkv1alpha1.WindowsNodeNetwork{
		ObjectMeta: metav1.ObjectMeta{Name: "kubectl-node"},
		Spec: networkv1alpha1.WindowsNodeNetworkSpec{
			PodCIDRs: []networkv1alpha1.CIDR{"10.244.11.0/24"}, NodeIP: "192.168.10.41",
			Encapsulation: networkv1alpha1.EncapsulationSpec{Mode: networkv1alpha1.EncapsulationModeHybrid, TunnelType: networkv1alpha1.TunnelTypeGeneve},
		},
	}
	rsr := &networkv1alpha1.RemoteSubnetRoute{
		ObjectMeta: metav1.ObjectMeta{Name: "kubectl-route"},
		Spec: networkv1alpha1.RemoteSubnetRouteSpec{
			NodeName: "linux-node-7", PodCIDRs: []networkv1alpha1.CIDR{"10.244.12.0/24"}, NodeIP: "192.168.10.42",
			Mode: networkv1alpha1.RouteModeTunnel,
		},
	}
	pep := &networkv1alpha1.PodEndpoint{
		ObjectMeta: metav1.ObjectMeta{Name: "kubectl-node.0d1e2f3a-4b5c-4d6e-8f70-8192a3b4c5d6", Namespace: "default"},
		Spec: networkv1alpha1.PodEndpointSpec{
			PodName: "kubectl-pod", PodUID: "0d1e2f3a-4b5c-4d6e-8f70-8192a3b4c5d6", NodeName: "kubectl-node",
			SandboxID: "abc123", IPs: []networkv1alpha1.InterfaceAddress{"10.244.11.5/24"}, MAC: "02:42:0a:f4:0b:05",
		},
	}
	for _, obj := range []client.Object{wnn, rsr, pep} {
		g.Expect(c.Create(ctx, obj)).To(Succeed())
		t.Cleanup(func() { _ = c.Delete(context.Background(), obj) })
	}
	ready := func(conds *[]metav1.Condition, typ string, status metav1.ConditionStatus, reason string) {
		meta.SetStatusCondition(conds, metav1.Condition{Type: typ, Status: status, Reason: reason})
	}
	ready(&wnn.Status.Conditions, networkv1alpha1.ReadyCondition, metav1.ConditionTrue, networkv1alpha1.ReadyReason)
	wnn.Status.RemoteRoutes = networkv1alpha1.RemoteRoutesStatus{Desired: 3, Installed: 3}
	wnn.Status.FlowCount, wnn.Status.MTU = 57, 1392
	ready(&rsr.Status.Conditions, networkv1alpha1.AcceptedCondition, metav1.ConditionTrue, networkv1alpha1.AcceptedReason)
	ready(&rsr.Status.Conditions, networkv1alpha1.ConflictCondition, metav1.ConditionFalse, networkv1alpha1.NoConflictReason)
	ready(&pep.Status.Conditions, networkv1alpha1.ReadyCondition, metav1.ConditionTrue, networkv1alpha1.ReadyReason)
	pep.Status.OVSPort, pep.Status.OFPort = "kubectl-p-abc1", 9
	for _, obj := range []client.Object{wnn, rsr, pep} {
		g.Expect(c.Status().Update(ctx, obj)).To(Succeed())
	}

	header, row := kubectlTable(t, "get", "wnn", "kubectl-node")
	g.Expect(header).To(Equal([]string{"NAME", "POD CIDRS", "NODE IP", "MODE", "TUNNEL", "ROUTES", "READY", "AGE"}))
	g.Expect(row[:7]).To(Equal([]string{"kubectl-node", `["10.244.11.0/24"]`, "192.168.10.41", "Hybrid", "geneve", "3", "True"}))

	header, row = kubectlTable(t, "get", "wnn", "kubectl-node", "-o", "wide")
	g.Expect(header).To(Equal([]string{"NAME", "POD CIDRS", "NODE IP", "MODE", "TUNNEL", "ROUTES", "READY", "REASON", "BRIDGE", "FLOWS", "MTU", "AGE"}))
	g.Expect(row[7:11]).To(Equal([]string{"Ready", "br-int", "57", "1392"}))

	header, row = kubectlTable(t, "get", "rsr", "kubectl-route")
	g.Expect(header).To(Equal([]string{"NAME", "NODE", "POD CIDRS", "NODE IP", "MODE", "ACCEPTED", "CONFLICT", "AGE"}))
	g.Expect(row[:7]).To(Equal([]string{"kubectl-route", "linux-node-7", `["10.244.12.0/24"]`, "192.168.10.42", "Tunnel", "True", "False"}))

	// A PodEndpoint's name is "<node>.<Pod UID>": the Pod column says whose it is.
	header, row = kubectlTable(t, "get", "pep", pep.Name, "-n", "default")
	g.Expect(header).To(Equal([]string{"NAME", "POD", "NODE", "IPS", "MAC", "PORT", "OFPORT", "READY", "AGE"}))
	g.Expect(row[:8]).To(Equal([]string{pep.Name, "kubectl-pod", "kubectl-node", `["10.244.11.5/24"]`, "02:42:0a:f4:0b:05", "kubectl-p-abc1", "9", "True"}))

	// The category lists all three kinds.
	out := kubectl(t, "get", "winnet", "-A")
	for _, want := range []string{
		"windowsnodenetwork.network.winnet.io/kubectl-node",
		"remotesubnetroute.network.winnet.io/kubectl-route",
		"podendpoint.network.winnet.io/" + pep.Name,
	} {
		g.Expect(out).To(ContainSubstring(want))
	}
}

func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	cmd := hostcmd.Command(server.Kubectl, append([]string{"--kubeconfig", server.KubeconfigPath}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

var columnGap = regexp.MustCompile(`\s{2,}`)

// kubectlTable runs kubectl and returns the header and the single row it prints, split into columns.
func kubectlTable(t *testing.T, args ...string) (header, row []string) {
	t.Helper()
	out := kubectl(t, args...)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("kubectl %s: want a header and one row, got:\n%s", strings.Join(args, " "), out)
	}
	return columnGap.Split(strings.TrimSpace(lines[0]), -1), columnGap.Split(strings.TrimSpace(lines[1]), -1)
}
