//go:build linux

package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/test/e2e/cluster"
	"github.com/winnet-io/winnet/test/hostcmd"
)

// A planted service-account-like token and private key: neither may appear in a support bundle.
const (
	plantedToken     = "eyJhbGciOiJSUzI1NiIsImtpZCI6InBsYW50ZWQifQ.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6cGxhbnRlZCJ9.UGxhbnRlZFNpZ25hdHVyZU9mQVRva2Vu"
	plantedTokenPart = "UGxhbnRlZFNpZ25hdHVyZU9mQVRva2Vu"
	plantedKeyPart   = "MIIEvQIBADANplantedKEYmaterial"
	plantedKey       = "-----BEGIN PRIVATE KEY-----\n" + plantedKeyPart + "0123456789abcdef\nQmFzZTY0S2V5TWF0ZXJpYWw=\n-----END PRIVATE KEY-----"
)

// bundleMembers reads a .tar.gz into member name -> content.
func bundleMembers(t *testing.T, path string) map[string]string {
	t.Helper()
	g := NewWithT(t)
	f, err := os.Open(path)
	g.Expect(err).NotTo(HaveOccurred())
	defer f.Close()
	gz, err := gzip.NewReader(f)
	g.Expect(err).NotTo(HaveOccurred())
	tr := tar.NewReader(gz)
	out := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		g.Expect(err).NotTo(HaveOccurred())
		b, err := io.ReadAll(tr)
		g.Expect(err).NotTo(HaveOccurred())
		out[h.Name] = string(b)
	}
	return out
}

// TestSupportBundle runs the real `winnet-agent support-bundle` on node-a beside its agent, with the agent's
// own credentials, after planting a token and a private key in every source it collects that can hold text
// (the agent's log, a state file's name, an OVSDB interface's external IDs, the HNS simulator's state, the
// node's WindowsNodeNetwork, a PodEndpoint and a RemoteSubnetRoute; flows, groups, addresses and routes hold
// none): the archive holds every member, each planted source redacted, neither secret anywhere; the file is
// owner-only; an existing file or a link at -o is refused and left alone; the agent's network still works.
func TestSupportBundle(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	a := node("node-a")
	secret := plantedToken + " " + plantedKey

	// The agent's log.
	logf, err := os.OpenFile(a.AgentLog(), os.O_WRONLY|os.O_APPEND, 0)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = logf.WriteString(`{"level":"info","msg":"planted","token":"` + plantedToken + `","authorization":"Bearer ` + plantedToken + `"}` + "\n" + plantedKey + "\n")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(logf.Close()).To(Succeed())
	// A file of the state directory whose name is the token (the listing holds names, not contents).
	stateFile := filepath.Join(a.StateDir, "planted-"+plantedToken)
	g.Expect(os.WriteFile(stateFile, []byte(plantedKey), 0o600)).To(Succeed())
	t.Cleanup(func() { _ = os.Remove(stateFile) })
	// OVSDB: the gateway interface's external IDs.
	ifaces, err := a.OVS.Vsctl("--bare", "--columns=name", "find", "Interface", "type=internal")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.Fields(ifaces)).NotTo(BeEmpty())
	iface := strings.Fields(ifaces)[0]
	_, err = a.OVS.Vsctl("set", "Interface", iface, `external_ids:planted="`+strings.ReplaceAll(secret, "\n", `\n`)+`"`)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _, _ = a.OVS.Vsctl("remove", "Interface", iface, "external_ids", "planted") })
	// The HNS simulator's state file (the agent only writes it; restored afterwards).
	simState := filepath.Join(a.StateDir, "hns-sim.json")
	orig, err := os.ReadFile(simState)
	g.Expect(err).NotTo(HaveOccurred())
	planted, err := json.Marshal(secret)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(bytes.HasPrefix(orig, []byte("{"))).To(BeTrue())
	g.Expect(os.WriteFile(simState, append([]byte(`{"planted":`+string(planted)+`,`), orig[1:]...), 0o600)).To(Succeed())
	t.Cleanup(func() { _ = os.WriteFile(simState, orig, 0o600) })
	// The node's winnet objects.
	annotate := func(obj client.Object) {
		patch := []byte(`{"metadata":{"annotations":{"planted":` + string(planted) + `}}}`)
		g.Expect(c.Client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch))).To(Succeed())
		t.Cleanup(func() {
			_ = c.Client.Patch(context.Background(), obj, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"planted":null}}}`)))
		})
	}
	annotate(&networkv1alpha1.WindowsNodeNetwork{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}})
	peps := &networkv1alpha1.PodEndpointList{}
	g.Expect(c.Client.List(ctx, peps)).To(Succeed())
	var pep *networkv1alpha1.PodEndpoint
	for i := range peps.Items {
		if peps.Items[i].Spec.NodeName == "node-a" {
			pep = &peps.Items[i]
		}
	}
	g.Expect(pep).NotTo(BeNil(), "a PodEndpoint of node-a")
	annotate(pep)
	routes := &networkv1alpha1.RemoteSubnetRouteList{}
	g.Expect(c.Client.List(ctx, routes)).To(Succeed())
	g.Expect(routes.Items).NotTo(BeEmpty())
	annotate(&routes.Items[0])

	out := filepath.Join(t.TempDir(), "bundle.tar.gz")
	run := func(o string) (string, error) {
		b, err := hostcmd.Command(filepath.Join(c.BinDir, "winnet-agent"), "support-bundle", "-o", o,
			"--node-name", "node-a", "--kubeconfig", a.AgentKubeconfig(), "--ovsdb", a.OVS.DBSocket(), "--ovs-rundir", a.OVS.Dir,
			"--netns", a.NSPath, "--state-dir", a.StateDir, "--cni-conf-dir", a.CNIConfDir, "--audit-log-dir", a.AuditLogDir,
			"--log", a.AgentLog()).CombinedOutput()
		return string(b), err
	}
	stdout, err := run(out)
	g.Expect(err).NotTo(HaveOccurred(), stdout)
	fi, err := os.Lstat(out)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fi.Mode().Perm()).To(Equal(os.FileMode(0o600)), "owner-only")

	m := bundleMembers(t, out)
	names := make([]string, 0, len(m))
	for n, content := range m {
		names = append(names, n)
		t.Logf("member %s: %d bytes", n, len(content))
	}
	if flows := strings.SplitN(m["ovs/openflow.txt"], "\n", 12); len(flows) > 0 {
		t.Logf("ovs/openflow.txt begins:\n%s", strings.Join(flows[:len(flows)-1], "\n"))
	}
	g.Expect(names).To(ConsistOf("README.txt", "ovs/openflow.txt", "ovs/ovsdb.json", "hns/simulator-state.json", "host/network.json",
		"state/listing.txt", "preflight.txt", "logs/0-winnet-agent.log", "objects/windowsnodenetwork.json", "objects/podendpoints.json",
		"objects/remotesubnetroutes.json"), "every member and no errors.txt: %s", m["errors.txt"])
	g.Expect(m["ovs/openflow.txt"]).To(And(ContainSubstring("table=0 "), ContainSubstring("group_id="), ContainSubstring("table=105 ")), "flows and groups")
	g.Expect(m["ovs/ovsdb.json"]).To(And(ContainSubstring(`"br-int"`), ContainSubstring(iface)))
	g.Expect(m["hns/simulator-state.json"]).To(ContainSubstring(pods["pod-a1"].IP.String()), "the simulator's endpoints")
	g.Expect(m["host/network.json"]).To(And(ContainSubstring(a.IP.String()), ContainSubstring(node("node-b").PodCIDR.String())), "addresses and routes")
	g.Expect(m["state/listing.txt"]).To(And(ContainSubstring("ipam"), ContainSubstring("planted-")))
	g.Expect(m["logs/0-winnet-agent.log"]).To(ContainSubstring("Starting winnet-agent"))
	g.Expect(m["preflight.txt"]).To(And(ContainSubstring("winnet preflight of node node-a"),
		MatchRegexp(`PASS  hns +HNS 9\.2 answered; winnet's network "winnet" on adapter "uplink0" \[HNS simulator\]`),
		ContainSubstring("PASS  uplink"), ContainSubstring("not checked on this platform")), "the preflight's report")
	g.Expect(m["objects/windowsnodenetwork.json"]).To(And(ContainSubstring(`"name": "node-a"`), ContainSubstring(`"status"`), Not(ContainSubstring("managedFields"))))
	g.Expect(m["objects/podendpoints.json"]).To(ContainSubstring(pep.Name))
	for _, name := range []string{"logs/0-winnet-agent.log", "ovs/ovsdb.json", "hns/simulator-state.json", "state/listing.txt",
		"objects/windowsnodenetwork.json", "objects/podendpoints.json", "objects/remotesubnetroutes.json"} {
		g.Expect(m[name]).To(ContainSubstring("[REDACTED"), "%s held a planted secret: redacted", name)
	}
	for name, content := range m {
		for _, s := range []string{plantedTokenPart, plantedKeyPart, "eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6cGxhbnRlZCJ9", "QmFzZTY0S2V5TWF0ZXJpYWw"} {
			g.Expect(content).NotTo(ContainSubstring(s), "%s leaks a planted secret", name)
		}
	}

	// -o never overwrites nor follows a link.
	before, err := os.ReadFile(out)
	g.Expect(err).NotTo(HaveOccurred())
	stdout, err = run(out)
	g.Expect(err).To(HaveOccurred(), "an existing file: %s", stdout)
	g.Expect(stdout).To(ContainSubstring("file exists"))
	g.Expect(os.ReadFile(out)).To(Equal(before), "left alone")
	target := filepath.Join(t.TempDir(), "target")
	link := filepath.Join(t.TempDir(), "link.tar.gz")
	g.Expect(os.Symlink(target, link)).To(Succeed())
	stdout, err = run(link)
	g.Expect(err).To(HaveOccurred(), "a dangling link: %s", stdout)
	g.Expect(target).NotTo(BeAnExistingFile(), "nothing written through the link")

	// The agent's flows are left alone (the bundle's OpenFlow connection neither advances the round nor
	// replays): its Pods still reach another node's.
	s, err := cluster.ServeEcho(pods["pod-b1"].NSPath, 8080)
	g.Expect(err).NotTo(HaveOccurred())
	defer s.Close()
	cluster.ExpectConnection(t, pods["pod-a1"], pods["pod-b1"], 8080, true, converge)
}
