//go:build linux

package cni_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/invoke"
	cnitypes "github.com/containernetworking/cni/pkg/types"
	. "github.com/onsi/gomega"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/winnet-io/winnet/internal/cni"
	"github.com/winnet-io/winnet/test/framework"
)

// shimCall is one run of the shim binary as a runtime would make it, with every CNI_* variable and
// the network configuration set explicitly, so that malformed calls can be made.
type shimCall struct {
	command, containerID, netns, ifName, args string
	stdin                                     []byte
}

func (n *testNode) conf(extra map[string]any) []byte {
	conf := map[string]any{"cniVersion": "1.1.0", "name": "winnet", "type": cni.PluginType, "agentSocket": n.Agent.CNISocket}
	for k, v := range extra {
		if v == nil {
			delete(conf, k)
			continue
		}
		conf[k] = v
	}
	b, err := json.Marshal(conf)
	if err != nil {
		panic(err)
	}
	return b
}

// run executes the shim and returns its CNI error (nil on success).
func (c shimCall) run(t *testing.T) *cnitypes.Error {
	t.Helper()
	env := []string{"CNI_COMMAND=" + c.command, "CNI_PATH=" + framework.BuildShim(t)}
	for k, v := range map[string]string{"CNI_CONTAINERID": c.containerID, "CNI_NETNS": c.netns, "CNI_IFNAME": c.ifName, "CNI_ARGS": c.args} {
		if v != "" {
			env = append(env, k+"="+v)
		}
	}
	_, err := (&invoke.RawExec{Stderr: os.Stderr}).ExecPlugin(context.Background(), filepath.Join(framework.BuildShim(t), cni.PluginType), c.stdin, env)
	if err == nil {
		return nil
	}
	e, ok := err.(*cnitypes.Error)
	if !ok {
		t.Fatalf("the shim's error is not a CNI error: %T %v", err, err)
	}
	return e
}

// TestErrors makes malformed and impossible CNI calls against a node with a small Pod CIDR: each
// returns the CNI error code that says what is wrong, with a readable message, and none leaves an
// address, endpoint, port, flow or attachment behind.
func TestErrors(t *testing.T) {
	n := newNode(t, "cni-err", "192.168.21.11/24", "10.244.9.0/29")
	good := n.newPod(t, "err-good", true)
	ns := good.rt.NetNS
	podArgs := func(name string) string {
		return "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + name
	}

	t.Run("node network not Ready: ADD says try again later, STATUS not available, no conflist", func(t *testing.T) {
		g := NewWithT(t)
		e := shimCall{command: "ADD", containerID: "early", netns: ns, ifName: "eth0", args: podArgs("early"), stdin: n.conf(nil)}.run(t)
		g.Expect(e).NotTo(BeNil())
		g.Expect(e.Code).To(BeEquivalentTo(cnitypes.ErrTryAgainLater))
		g.Expect(e.Msg).To(ContainSubstring("network of node cni-err is not ready"))
		e = shimCall{command: "STATUS", stdin: n.conf(nil)}.run(t)
		g.Expect(e).NotTo(BeNil())
		g.Expect(e.Code).To(BeEquivalentTo(cnitypes.ErrPluginNotAvailable))
		_, err := os.Stat(filepath.Join(n.Agent.CNIConfDir, cni.ConfListName))
		g.Expect(err).To(MatchError(os.ErrNotExist))
	})
	n.CreateNetwork(t, converge, nil)
	NewWithT(t).Expect(shimCall{command: "STATUS", stdin: n.conf(nil)}.run(t)).To(BeNil(), "STATUS once Ready")
	add := func(id string, mutate func(c *shimCall)) shimCall {
		c := shimCall{command: "ADD", containerID: id, netns: ns, ifName: "eth0", args: podArgs("err-" + id), stdin: n.conf(nil)}
		if mutate != nil {
			mutate(&c)
		}
		return c
	}
	// The Pod CIDR /29 has 5 addresses to give; 4 are taken, the last one right before the case
	// that finds the range exhausted.
	var fill []shimCall
	for i := range 5 {
		if i == 4 {
			break
		}
		p := n.newPod(t, fmt.Sprintf("err-fill-%d", i), false)
		c := shimCall{command: "ADD", containerID: fmt.Sprintf("fill%d", i), netns: p.rt.NetNS, ifName: "eth0", args: podArgs(p.name), stdin: n.conf(nil)}
		if e := c.run(t); e != nil {
			t.Fatalf("filling the Pod CIDR: %v", e)
		}
		fill = append(fill, c)
	}
	takeLast := func(t *testing.T) {
		p := n.newPod(t, "err-fill-4", false)
		c := shimCall{command: "ADD", containerID: "fill4", netns: p.rt.NetNS, ifName: "eth0", args: podArgs(p.name), stdin: n.conf(nil)}
		if e := c.run(t); e != nil {
			t.Fatalf("taking the last address: %v", e)
		}
		fill = append(fill, c)
	}

	cases := []struct {
		name string
		call shimCall
		code uint
		msg  string
	}{
		{"configuration is not JSON", add("c1", func(c *shimCall) { c.stdin = []byte("{not json") }), cnitypes.ErrDecodingFailure, "network config"},
		{"configuration is a JSON array", add("c2", func(c *shimCall) { c.stdin = []byte(`[1,2]`) }), cnitypes.ErrDecodingFailure, "cannot unmarshal"},
		{"unknown cniVersion", add("c3", func(c *shimCall) { c.stdin = n.conf(map[string]any{"cniVersion": "9.9.9"}) }), cnitypes.ErrIncompatibleCNIVersion, "incompatible CNI versions"},
		{"cniVersion older than 0.3.0", add("c4", func(c *shimCall) { c.stdin = n.conf(map[string]any{"cniVersion": "0.2.0"}) }), cnitypes.ErrIncompatibleCNIVersion, "incompatible CNI versions"},
		{"no network name", add("c5", func(c *shimCall) { c.stdin = n.conf(map[string]any{"name": nil}) }), cnitypes.ErrInvalidNetworkConfig, "missing network name"},
		{"missing CNI_CONTAINERID", add("", nil), cnitypes.ErrInvalidEnvironmentVariables, "CNI_CONTAINERID"},
		{"missing CNI_NETNS", add("c7", func(c *shimCall) { c.netns = "" }), cnitypes.ErrInvalidEnvironmentVariables, "CNI_NETNS"},
		{"missing CNI_IFNAME", add("c8", func(c *shimCall) { c.ifName = "" }), cnitypes.ErrInvalidEnvironmentVariables, "CNI_IFNAME"},
		{"invalid CNI_CONTAINERID", add("bad/id", nil), cnitypes.ErrInvalidEnvironmentVariables, "invalid characters in containerID"},
		{"CNI_IFNAME too long", add("c10", func(c *shimCall) { c.ifName = "eth0123456789abcdef" }), cnitypes.ErrInvalidEnvironmentVariables, "interface name is too long"},
		{"unknown CNI_COMMAND", add("c11", func(c *shimCall) { c.command = "FROB" }), cnitypes.ErrInvalidEnvironmentVariables, "unknown CNI_COMMAND"},
		{"network namespace does not exist", add("c12", func(c *shimCall) { c.netns = "/run/netns/winnet-no-such-ns" }), cnitypes.ErrInvalidNetNS, "does not exist"},
		{"CNI_ARGS without the Pod", add("c13", func(c *shimCall) { c.args = "IgnoreUnknown=1" }), cnitypes.ErrInvalidEnvironmentVariables, "K8S_POD_NAMESPACE and K8S_POD_NAME"},
		{"CNI_ARGS not KEY=VALUE", add("c14", func(c *shimCall) { c.args = "K8S_POD_NAMESPACE=default;K8S_POD_NAME" }), cnitypes.ErrInvalidEnvironmentVariables, "is not KEY=VALUE"},
		{"invalid K8S_POD_INFRA_CONTAINER_ID", add("c15", func(c *shimCall) { c.args = podArgs("x") + ";K8S_POD_INFRA_CONTAINER_ID=../x" }), cnitypes.ErrInvalidEnvironmentVariables, "K8S_POD_INFRA_CONTAINER_ID"},
		{"DNS server is not an address", add("c16", func(c *shimCall) {
			c.stdin = n.conf(map[string]any{"runtimeConfig": map[string]any{"dns": map[string]any{"servers": []string{"not-an-ip"}}}})
		}), cnitypes.ErrInvalidNetworkConfig, "runtimeConfig.dns.servers"},
		{"runtimeConfig.dns is not an object", add("c17", func(c *shimCall) {
			c.stdin = n.conf(map[string]any{"runtimeConfig": map[string]any{"dns": 5}})
		}), cnitypes.ErrDecodingFailure, "decoding the network configuration"},
		{"workload container of an unknown sandbox", add("c18", func(c *shimCall) { c.args = podArgs("x") + ";K8S_POD_INFRA_CONTAINER_ID=nosuchsandbox" }), cnitypes.ErrUnknownContainer, "has no network"},
		{"second interface for a sandbox", add("fill0", func(c *shimCall) { c.ifName = "eth1"; c.args = podArgs("err-fill-0") }), cnitypes.ErrInvalidEnvironmentVariables, "one interface"},
		{"Pod CIDR exhausted", add("c20", nil), cnitypes.ErrInternal, "no IP addresses available"},
		{"agent down", add("c21", func(c *shimCall) {
			c.stdin = n.conf(map[string]any{"agentSocket": filepath.Join(t.TempDir(), "nobody.sock")})
		}), cnitypes.ErrTryAgainLater, "is winnet-agent running"},
		{"CHECK of an unknown container", add("c22", func(c *shimCall) {
			c.command = "CHECK"
			c.stdin = n.conf(map[string]any{"prevResult": map[string]any{"cniVersion": "1.1.0", "ips": []any{}}})
		}), cnitypes.ErrUnknownContainer, "no network attachment"},
		{"CHECK with a prevResult that is not a result", add("fill1", func(c *shimCall) {
			c.command, c.args = "CHECK", podArgs("err-fill-1")
			c.stdin = n.conf(map[string]any{"prevResult": map[string]any{"cniVersion": "1.1.0", "ips": "nope"}})
		}), cnitypes.ErrDecodingFailure, "prevResult"},
		{"CHECK with another address in prevResult", add("fill1", func(c *shimCall) {
			c.command, c.args = "CHECK", podArgs("err-fill-1")
			c.stdin = n.conf(map[string]any{"prevResult": map[string]any{"cniVersion": "1.1.0", "ips": []any{map[string]any{"address": "10.9.9.9/24"}}}})
		}), cnitypes.ErrInternal, "prevResult does not hold"},
		{"DEL with a configuration that is not JSON", add("c25", func(c *shimCall) { c.command, c.stdin = "DEL", []byte("}") }), cnitypes.ErrDecodingFailure, "network config"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			if tc.name == "Pod CIDR exhausted" {
				takeLast(t)
			}
			before := n.leftovers(g)
			e := tc.call.run(t)
			g.Expect(e).NotTo(BeNil(), "the call fails")
			g.Expect(e.Code).To(Equal(tc.code), "code of %q", e.Error())
			g.Expect(e.Msg).To(ContainSubstring(tc.msg))
			g.Expect(strings.TrimSpace(e.Msg)).NotTo(BeEmpty())
			g.Expect(n.leftovers(g)).To(ConsistOf(before), "nothing left behind")
		})
	}

	for _, c := range fill {
		c.command = "DEL"
		if e := c.run(t); e != nil {
			t.Fatalf("DEL of %s: %v", c.containerID, e)
		}
	}
	NewWithT(t).Expect(n.leftovers(NewWithT(t))).To(BeEmpty())

	t.Run("the agent's metrics count the calls by command and result, and time each step", func(t *testing.T) {
		g := NewWithT(t)
		families, err := ctrlmetrics.Registry.Gather()
		g.Expect(err).NotTo(HaveOccurred())
		counts := map[string]uint64{}
		for _, f := range families {
			for _, m := range f.GetMetric() {
				key := f.GetName()
				for _, l := range m.GetLabel() {
					key += " " + l.GetName() + "=" + l.GetValue()
				}
				counts[key] = m.GetHistogram().GetSampleCount()
			}
		}
		g.Expect(counts).To(HaveKeyWithValue("winnet_cni_request_duration_seconds command=ADD result=success", BeNumerically(">", 0)))
		g.Expect(counts).To(HaveKeyWithValue("winnet_cni_request_duration_seconds command=DEL result=success", BeNumerically(">", 0)))
		g.Expect(counts).To(HaveKeyWithValue(fmt.Sprintf("winnet_cni_request_duration_seconds command=ADD result=error-%d", cnitypes.ErrInvalidNetNS), BeNumerically(">", 0)))
		for _, step := range []string{"ipam", "endpoint", "attach", "port", "flows", "store"} {
			g.Expect(counts).To(HaveKeyWithValue("winnet_cni_step_duration_seconds command=ADD step="+step, BeNumerically(">", 0)))
		}
		for _, step := range []string{"flows+port", "endpoint", "ipam", "store"} {
			g.Expect(counts).To(HaveKeyWithValue("winnet_cni_step_duration_seconds command=DEL step="+step, BeNumerically(">", 0)))
		}
	})
}
