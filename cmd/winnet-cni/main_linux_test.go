package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	. "github.com/onsi/gomega"

	"github.com/winnet-io/winnet"
	"github.com/winnet-io/winnet/internal/cni"
	"github.com/winnet-io/winnet/test/hostcmd"
)

// These tests build the real winnet-cni binary and drive it through libcni, the CNI library
// container runtimes use, against an agent-side cni.Serve with a small test Handler.

const pluginName = "winnet-cni"

// shimDir is the directory holding the freshly built binary (the CNI plugin path).
var shimDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "winnet-cni-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "creating temp dir:", err)
		os.Exit(1)
	}
	cmd := hostcmd.Command("go", "build", "-o", filepath.Join(dir, pluginName), ".")
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local")
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building %s: %v\n%s", pluginName, err, out)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	shimDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// fakeAgent is the test Handler: it records requests, answers ADD with a 1.0.0 result, and fails
// commands listed in errs with the given CNI error.
type fakeAgent struct {
	mu       sync.Mutex
	requests []cni.Request
	errs     map[cni.Command]*types.Error
	// addResult, if set, replaces the normal ADD result.
	addResult json.RawMessage
}

func (a *fakeAgent) Handle(_ context.Context, req cni.Request) cni.Response {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.requests = append(a.requests, req)
	if e := a.errs[req.Command]; e != nil {
		return cni.Response{Error: e}
	}
	if req.Command != cni.CommandAdd {
		return cni.Response{}
	}
	if a.addResult != nil {
		return cni.Response{Result: a.addResult}
	}
	return cni.Response{Result: json.RawMessage(fmt.Sprintf(`{
		"cniVersion": "1.0.0",
		"interfaces": [{"name": %q, "mac": "aa:bb:cc:00:00:05", "sandbox": %q}],
		"ips": [{"interface": 0, "address": "10.244.1.5/24", "gateway": "10.244.1.1"}],
		"routes": [{"dst": "0.0.0.0/0", "gw": "10.244.1.1"}],
		"dns": {"nameservers": ["10.96.0.10"]}
	}`, req.IfName, req.Netns))}
}

func (a *fakeAgent) Requests() []cni.Request {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]cni.Request(nil), a.requests...)
}

func (a *fakeAgent) Commands() []cni.Command {
	var cmds []cni.Command
	for _, r := range a.Requests() {
		cmds = append(cmds, r.Command)
	}
	return cmds
}

// startAgent serves a on a fresh unix socket and returns its path.
func startAgent(t *testing.T, a *fakeAgent) string {
	t.Helper()
	address := filepath.Join(t.TempDir(), "agent", "cni.sock")
	ctx, cancel := context.WithCancel(context.Background())
	l, err := cni.Listen(ctx, address)
	if err != nil {
		cancel()
		t.Fatalf("Listen(%q): %v", address, err)
	}
	done := make(chan error, 1)
	go func() { done <- cni.Serve(ctx, l, a) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return address
}

func pluginConf(t *testing.T, cniVersion, address string) *libcni.PluginConfig {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"cniVersion": cniVersion, "name": "winnet", "type": pluginName, "agentSocket": address,
	})
	if err != nil {
		t.Fatal(err)
	}
	conf, err := libcni.NetworkPluginConfFromBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	return conf
}

func confList(t *testing.T, cniVersion, address string) *libcni.NetworkConfigList {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"cniVersion": cniVersion, "name": "winnet",
		"plugins": []any{map[string]any{"type": pluginName, "agentSocket": address}},
	})
	if err != nil {
		t.Fatal(err)
	}
	list, err := libcni.NetworkConfFromBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	return list
}

func newCNIConfig(t *testing.T) *libcni.CNIConfig {
	return libcni.NewCNIConfigWithCacheDir([]string{shimDir}, t.TempDir(), nil)
}

func runtimeConf(containerID string) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{
		ContainerID: containerID,
		// The shim never enters the namespace; the path only has to be passed through.
		NetNS:  "/var/run/netns/winnet-test-" + containerID,
		IfName: "eth0",
		Args:   [][2]string{{"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", "web-0"}},
	}
}

func TestLibcniAddCheckDel(t *testing.T) {
	for _, cniVersion := range []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
		t.Run(cniVersion, func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			agent := &fakeAgent{}
			address := startAgent(t, agent)
			conf := pluginConf(t, cniVersion, address)
			cfg := newCNIConfig(t)
			rt := runtimeConf("pod-" + strings.ReplaceAll(cniVersion, ".", ""))

			// ADD: libcni parses the shim's stdout in the configuration's version.
			res, err := cfg.AddNetwork(ctx, conf, rt)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(res.Version()).To(Equal(cniVersion))
			cur, err := types100.NewResultFromResult(res)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(cur.IPs).To(HaveLen(1))
			g.Expect(cur.IPs[0].Address.String()).To(Equal("10.244.1.5/24"))
			g.Expect(cur.IPs[0].Gateway.String()).To(Equal("10.244.1.1"))
			g.Expect(cur.Interfaces).To(HaveLen(1))
			g.Expect(cur.Interfaces[0].Sandbox).To(Equal(rt.NetNS))
			g.Expect(cur.Routes).To(HaveLen(1))
			g.Expect(cur.Routes[0].Dst.String()).To(Equal("0.0.0.0/0"))

			add := agent.Requests()[0]
			g.Expect(add.Command).To(Equal(cni.CommandAdd))
			g.Expect(add.ContainerID).To(Equal(rt.ContainerID))
			g.Expect(add.Netns).To(Equal(rt.NetNS))
			g.Expect(add.IfName).To(Equal("eth0"))
			g.Expect(add.Args).To(Equal("K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0"))
			g.Expect(add.Path).To(Equal(shimDir))
			g.Expect(add.StdinData).To(MatchJSON(conf.Bytes), "the agent gets the configuration unchanged")

			// CHECK: only from 0.4.0 on; the agent gets the cached ADD result as prevResult.
			err = cfg.CheckNetwork(ctx, conf, rt)
			wantCommands := []cni.Command{cni.CommandAdd, cni.CommandDel}
			if cniVersion == "0.3.0" || cniVersion == "0.3.1" {
				g.Expect(err).To(MatchError(libcni.ErrorCheckNotSupp))
			} else {
				g.Expect(err).NotTo(HaveOccurred())
				check := agent.Requests()[1]
				g.Expect(check.Command).To(Equal(cni.CommandCheck))
				g.Expect(check.ContainerID).To(Equal(rt.ContainerID))
				var stdin struct {
					PrevResult struct {
						IPs []struct {
							Address string `json:"address"`
						} `json:"ips"`
					} `json:"prevResult"`
				}
				g.Expect(json.Unmarshal(check.StdinData, &stdin)).To(Succeed())
				g.Expect(stdin.PrevResult.IPs).To(HaveLen(1))
				g.Expect(stdin.PrevResult.IPs[0].Address).To(Equal("10.244.1.5/24"))
				wantCommands = []cni.Command{cni.CommandAdd, cni.CommandCheck, cni.CommandDel}
			}

			// DEL
			g.Expect(cfg.DelNetwork(ctx, conf, rt)).To(Succeed())
			reqs := agent.Requests()
			del := reqs[len(reqs)-1]
			g.Expect(del.Command).To(Equal(cni.CommandDel))
			g.Expect(del.ContainerID).To(Equal(rt.ContainerID))
			g.Expect(del.IfName).To(Equal("eth0"))
			g.Expect(agent.Commands()).To(Equal(wantCommands))
		})
	}
}

func TestLibcniStatusAndGC(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	agent := &fakeAgent{}
	address := startAgent(t, agent)
	list := confList(t, "1.1.0", address)
	cfg := newCNIConfig(t)

	g.Expect(cfg.GetStatusNetworkList(ctx, list)).To(Succeed())
	g.Expect(agent.Commands()).To(Equal([]cni.Command{cni.CommandStatus}))
	status := agent.Requests()[0]
	g.Expect(status.ContainerID).To(BeEmpty())
	g.Expect(status.StdinData).To(MatchJSON(fmt.Sprintf(
		`{"cniVersion":"1.1.0","name":"winnet","type":%q,"agentSocket":%q}`, pluginName, address)))

	// Two attachments, one of them no longer valid: libcni deletes it, then the plugin GCs.
	keep, stale := runtimeConf("keep"), runtimeConf("stale")
	_, err := cfg.AddNetworkList(ctx, list, keep)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = cfg.AddNetworkList(ctx, list, stale)
	g.Expect(err).NotTo(HaveOccurred())

	valid := []types.GCAttachment{{ContainerID: keep.ContainerID, IfName: keep.IfName}}
	g.Expect(cfg.GCNetworkList(ctx, list, &libcni.GCArgs{ValidAttachments: valid})).To(Succeed())

	reqs := agent.Requests()
	g.Expect(agent.Commands()).To(Equal([]cni.Command{
		cni.CommandStatus, cni.CommandAdd, cni.CommandAdd, cni.CommandDel, cni.CommandGC,
	}))
	g.Expect(reqs[3].ContainerID).To(Equal("stale"))
	var gc struct {
		Valid []types.GCAttachment `json:"cni.dev/valid-attachments"`
	}
	g.Expect(json.Unmarshal(reqs[4].StdinData, &gc)).To(Succeed())
	g.Expect(gc.Valid).To(Equal(valid))
}

func TestLibcniVersion(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	cfg := newCNIConfig(t)

	// No agent at all: VERSION is answered by the shim.
	info, err := cfg.GetVersionInfo(ctx, pluginName)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(info.SupportedVersions()).To(Equal([]string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}))

	for _, v := range []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
		_, err := cfg.ValidateNetwork(ctx, pluginConf(t, v, "/nonexistent/cni.sock"))
		g.Expect(err).NotTo(HaveOccurred(), "version %s", v)
	}
	_, err = cfg.ValidateNetwork(ctx, pluginConf(t, "0.2.0", "/nonexistent/cni.sock"))
	g.Expect(err).To(MatchError(ContainSubstring(`does not support config version "0.2.0"`)))
}

func TestLibcniAgentUnreachable(t *testing.T) {
	missing := func(t *testing.T) string { return filepath.Join(t.TempDir(), "cni.sock") }
	stale := func(t *testing.T) string {
		address := filepath.Join(t.TempDir(), "cni.sock")
		l, err := net.Listen("unix", address)
		if err != nil {
			t.Fatal(err)
		}
		l.(*net.UnixListener).SetUnlinkOnClose(false)
		_ = l.Close() // the socket file stays, nobody listens: connection refused
		return address
	}
	tests := []struct {
		name    string
		address func(t *testing.T) string
		call    func(ctx context.Context, cfg *libcni.CNIConfig, address string) error
	}{
		{"ADD, no socket", missing, func(ctx context.Context, cfg *libcni.CNIConfig, address string) error {
			_, err := cfg.AddNetwork(ctx, pluginConf(t, "1.1.0", address), runtimeConf("c1"))
			return err
		}},
		{"ADD, stale socket", stale, func(ctx context.Context, cfg *libcni.CNIConfig, address string) error {
			_, err := cfg.AddNetwork(ctx, pluginConf(t, "1.1.0", address), runtimeConf("c1"))
			return err
		}},
		{"DEL, no socket", missing, func(ctx context.Context, cfg *libcni.CNIConfig, address string) error {
			return cfg.DelNetwork(ctx, pluginConf(t, "1.0.0", address), runtimeConf("c1"))
		}},
		{"CHECK, stale socket", stale, func(ctx context.Context, cfg *libcni.CNIConfig, address string) error {
			return cfg.CheckNetwork(ctx, pluginConf(t, "0.4.0", address), runtimeConf("c1"))
		}},
		{"STATUS, no socket", missing, func(ctx context.Context, cfg *libcni.CNIConfig, address string) error {
			return cfg.GetStatusNetworkList(ctx, confList(t, "1.1.0", address))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			address := tt.address(t)
			err := tt.call(context.Background(), newCNIConfig(t), address)
			var cniErr *types.Error
			g.Expect(errors.As(err, &cniErr)).To(BeTrue(), "want a *types.Error, got %T: %v", err, err)
			g.Expect(cniErr.Code).To(Equal(types.ErrTryAgainLater))
			g.Expect(cniErr.Msg).To(ContainSubstring(address))
			g.Expect(cniErr.Msg).To(ContainSubstring("winnet agent is not reachable"))
		})
	}
}

func TestBadNetconf(t *testing.T) {
	agent := &fakeAgent{}
	address := startAgent(t, agent)
	valid := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"winnet","type":%q,"agentSocket":%q}`, pluginName, address)

	// libcni always re-marshals configurations, so malformed bytes can only arrive through its exec
	// layer (what libcni itself uses to run plugins).
	execAdd := func(netconf string) error {
		_, err := invoke.ExecPluginWithResult(context.Background(), filepath.Join(shimDir, pluginName), []byte(netconf),
			&invoke.Args{Command: "ADD", ContainerID: "c1", NetNS: "/var/run/netns/x", IfName: "eth0", Path: shimDir}, nil)
		return err
	}
	tests := []struct {
		name    string
		call    func() error
		wantMsg string
	}{
		{
			name:    "truncated JSON",
			call:    func() error { return execAdd(valid[:len(valid)-1]) },
			wantMsg: "unexpected end of JSON input",
		},
		{
			name:    "trailing garbage after a configuration naming the running agent",
			call:    func() error { return execAdd(valid + `}`) },
			wantMsg: "invalid character '}' after top-level value",
		},
		{
			name: "agentSocket of the wrong type, through libcni",
			call: func() error {
				conf, err := libcni.NetworkPluginConfFromBytes([]byte(fmt.Sprintf(
					`{"cniVersion":"1.1.0","name":"winnet","type":%q,"agentSocket":42}`, pluginName)))
				if err != nil {
					return fmt.Errorf("test setup: %w", err)
				}
				_, err = newCNIConfig(t).AddNetwork(context.Background(), conf, runtimeConf("c1"))
				return err
			},
			wantMsg: "decoding network configuration",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			err := tt.call()
			var cniErr *types.Error
			g.Expect(errors.As(err, &cniErr)).To(BeTrue(), "want a *types.Error, got %T: %v", err, err)
			g.Expect(cniErr.Code).To(Equal(types.ErrDecodingFailure))
			g.Expect(cniErr.Msg).To(ContainSubstring(tt.wantMsg))
		})
	}
	// The agent was running throughout and never contacted.
	NewWithT(t).Expect(agent.Requests()).To(BeEmpty())

	// Sanity check of the premise: the well-formed configuration does reach that agent.
	NewWithT(t).Expect(execAdd(valid)).To(Succeed())
	NewWithT(t).Expect(agent.Commands()).To(Equal([]cni.Command{cni.CommandAdd}))
}

func TestLibcniAgentErrors(t *testing.T) {
	tests := []struct {
		name string
		cmd  cni.Command
		err  *types.Error
		call func(ctx context.Context, cfg *libcni.CNIConfig, address string) error
	}{
		{
			name: "ADD", cmd: cni.CommandAdd,
			err: &types.Error{Code: types.ErrInvalidNetworkConfig, Msg: "pod CIDR not assigned to node", Details: "node win-1 has no spec.podCIDR"},
			call: func(ctx context.Context, cfg *libcni.CNIConfig, address string) error {
				_, err := cfg.AddNetwork(ctx, pluginConf(t, "1.1.0", address), runtimeConf("c1"))
				return err
			},
		},
		{
			name: "DEL with a plugin-specific code", cmd: cni.CommandDel,
			err: &types.Error{Code: 120, Msg: "HNS endpoint deletion timed out"},
			call: func(ctx context.Context, cfg *libcni.CNIConfig, address string) error {
				return cfg.DelNetwork(ctx, pluginConf(t, "1.0.0", address), runtimeConf("c1"))
			},
		},
		{
			name: "CHECK", cmd: cni.CommandCheck,
			err: &types.Error{Code: types.ErrUnknownContainer, Msg: "no endpoint for container", Details: "c1"},
			call: func(ctx context.Context, cfg *libcni.CNIConfig, address string) error {
				return cfg.CheckNetwork(ctx, pluginConf(t, "0.4.0", address), runtimeConf("c1"))
			},
		},
		{
			name: "STATUS", cmd: cni.CommandStatus,
			err: &types.Error{Code: types.ErrPluginNotAvailable, Msg: "OVS bridge br-int not ready"},
			call: func(ctx context.Context, cfg *libcni.CNIConfig, address string) error {
				return cfg.GetStatusNetworkList(ctx, confList(t, "1.1.0", address))
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			agent := &fakeAgent{errs: map[cni.Command]*types.Error{tt.cmd: tt.err}}
			address := startAgent(t, agent)
			err := tt.call(context.Background(), newCNIConfig(t), address)
			var cniErr *types.Error
			g.Expect(errors.As(err, &cniErr)).To(BeTrue(), "want a *types.Error, got %T: %v", err, err)
			g.Expect(cniErr).To(Equal(tt.err))
			g.Expect(agent.Commands()).To(Equal([]cni.Command{tt.cmd}))
		})
	}
}

func TestLibcniBadAgentResult(t *testing.T) {
	tests := []struct {
		name    string
		result  json.RawMessage
		wantMsg string
	}{
		{name: "no result", result: json.RawMessage{}, wantMsg: "winnet agent returned no result for ADD"},
		{name: "unknown result version", result: json.RawMessage(`{"cniVersion":"9.9.9"}`), wantMsg: "winnet agent returned an invalid CNI result"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			address := startAgent(t, &fakeAgent{addResult: tt.result})
			_, err := newCNIConfig(t).AddNetwork(context.Background(), pluginConf(t, "1.1.0", address), runtimeConf("c1"))
			var cniErr *types.Error
			g.Expect(errors.As(err, &cniErr)).To(BeTrue(), "want a *types.Error, got %T: %v", err, err)
			g.Expect(cniErr.Code).To(Equal(types.ErrInternal))
			g.Expect(cniErr.Msg).To(Equal(tt.wantMsg))
		})
	}
}

func TestCommandLine(t *testing.T) {
	tests := []struct {
		args       []string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{args: []string{"--help"}, wantCode: 0, wantStdout: "Usage: winnet-cni"},
		{args: []string{"-h"}, wantCode: 0, wantStdout: "Usage: winnet-cni"},
		{args: []string{"--frobnicate"}, wantCode: 2, wantStderr: `unknown argument "--frobnicate"`},
		// Without arguments and without CNI_COMMAND, skel prints what the plugin is.
		{args: nil, wantCode: 0, wantStderr: "CNI protocol versions supported: 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(append([]string{"args"}, tt.args...), " "), func(t *testing.T) {
			g := NewWithT(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := hostcmd.CommandContext(ctx, filepath.Join(shimDir, pluginName), tt.args...)
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "CNI_") {
					cmd.Env = append(cmd.Env, kv)
				}
			}
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			if tt.wantCode == 0 {
				g.Expect(err).NotTo(HaveOccurred(), "stderr: %s", stderr.String())
			} else {
				var exitErr *exec.ExitError
				g.Expect(errors.As(err, &exitErr)).To(BeTrue(), "want an exit error, got %v", err)
				g.Expect(exitErr.ExitCode()).To(Equal(tt.wantCode))
			}
			g.Expect(stdout.String()).To(ContainSubstring(tt.wantStdout))
			g.Expect(stderr.String()).To(ContainSubstring(tt.wantStderr))
			if tt.wantStdout != "" {
				g.Expect(stdout.String()).To(ContainSubstring("/var/run/winnet/cni.sock"))
				g.Expect(stdout.String()).To(ContainSubstring("0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0"))
			}
		})
	}
}

// TestCommandLineVersion: --version, which only a person passes, prints winnet's release and exits 0;
// with CNI_COMMAND set the shim ignores its arguments as ever, and the CNI command VERSION answers
// the CNI spec versions.
func TestCommandLineVersion(t *testing.T) {
	run := func(g Gomega, env []string, args ...string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := hostcmd.CommandContext(ctx, filepath.Join(shimDir, pluginName), args...)
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "CNI_") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		cmd.Env = append(cmd.Env, env...)
		cmd.Stdin = strings.NewReader(`{"cniVersion": "1.0.0", "name": "winnet", "type": "winnet-cni"}`)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		g.Expect(cmd.Run()).To(Succeed(), "stderr: %s", stderr.String())
		return stdout.String()
	}
	t.Run("--version", func(t *testing.T) {
		g := NewWithT(t)
		out := run(g, nil, "--version")
		g.Expect(out).To(MatchRegexp(`^winnet-cni %s \(revision ([0-9a-f]{12}(-modified)?|unknown), go[0-9a-z.]+\)\n$`,
			regexp.QuoteMeta(winnet.Version)))
	})
	t.Run("CNI_COMMAND=VERSION --version", func(t *testing.T) {
		g := NewWithT(t)
		out := run(g, []string{"CNI_COMMAND=VERSION"}, "--version")
		var info struct {
			CNIVersion        string   `json:"cniVersion"`
			SupportedVersions []string `json:"supportedVersions"`
		}
		g.Expect(json.Unmarshal([]byte(out), &info)).To(Succeed(), "the CNI VERSION answer, got %q", out)
		g.Expect(info.SupportedVersions).To(Equal(cni.SupportedVersions))
	})
}

// TestRealShimIgnoresAPlantedRemoveList: the real shim, run by libcni for DEL on a retired node,
// never removes what a retirement record lists: a record naming a directory outside the state
// directory (as an older agent wrote it, or as a user could plant it while the directory was open)
// leaves that directory where it is; the conflist, by name, and the record go with the last sandbox.
func TestRealShimIgnoresAPlantedRemoveList(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	stateDir, confDir := filepath.Join(dir, "state"), filepath.Join(dir, "net.d")
	victim := filepath.Join(dir, "precious", "data")
	g.Expect(os.MkdirAll(victim, 0o755)).To(Succeed())
	address := filepath.Join(dir, "no-agent.sock")
	_, err := cni.WriteConfList(confDir, address, stateDir)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = cni.Retire(stateDir, confDir, cni.Retirement{By: "test"}, []string{"c1"})
	g.Expect(err).NotTo(HaveOccurred())
	planted := fmt.Sprintf(`{"remove":[%q,%q],"by":"planted"}`, filepath.Dir(victim), victim)
	g.Expect(os.WriteFile(filepath.Join(stateDir, cni.RetiredDir, cni.RetiredFile), []byte(planted), 0o600)).To(Succeed())

	list, err := libcni.ConfListFromFile(filepath.Join(confDir, cni.ConfListName))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(newCNIConfig(t).DelNetworkList(context.Background(), list, runtimeConf("c1"))).To(Succeed())
	g.Expect(victim).To(BeADirectory(), "a path the record names survives")
	g.Expect(filepath.Join(confDir, cni.ConfListName)).NotTo(BeAnExistingFile(), "the conflist, derived by name, goes with the last sandbox")
	g.Expect(filepath.Join(stateDir, cni.RetiredDir)).NotTo(BeAnExistingFile())
}

// TestLibcniWinnetConfList runs the conflist the agent writes (cni.ConfList) through libcni as a
// runtime that knows CNI spec 1.1's cniVersions (libcni 1.2 and later: containerd 2.x) and as one
// that does not (libcni 1.1.x: containerd 1.6 and 1.7, which ignore the list and read cniVersion).
// The first gets 1.1.0 results and STATUS; the second 1.0.0 results, the newest it understands.
func TestLibcniWinnetConfList(t *testing.T) {
	for _, tt := range []struct {
		name        string
		cniVersions bool
		want        string
	}{
		{"runtime knows cniVersions", true, "1.1.0"},
		{"runtime ignores cniVersions", false, "1.0.0"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			agent := &fakeAgent{}
			address := startAgent(t, agent)
			raw := cni.ConfList(address, "", "")
			if !tt.cniVersions {
				var m map[string]any
				g.Expect(json.Unmarshal(raw, &m)).To(Succeed())
				g.Expect(m).To(HaveKey("cniVersions"))
				delete(m, "cniVersions")
				var err error
				raw, err = json.Marshal(m)
				g.Expect(err).NotTo(HaveOccurred())
			}
			list, err := libcni.NetworkConfFromBytes(raw)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(list.CNIVersion).To(Equal(tt.want))
			cfg := newCNIConfig(t)
			rt := runtimeConf("pod-conflist")

			res, err := cfg.AddNetworkList(ctx, list, rt)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(res.Version()).To(Equal(tt.want), "the shim answers in the version the runtime asked for")
			var stdin struct {
				CNIVersion string `json:"cniVersion"`
			}
			g.Expect(json.Unmarshal(agent.Requests()[0].StdinData, &stdin)).To(Succeed())
			g.Expect(stdin.CNIVersion).To(Equal(tt.want))

			g.Expect(cfg.GetStatusNetworkList(ctx, list)).To(Succeed())
			g.Expect(cfg.DelNetworkList(ctx, list, rt)).To(Succeed())
			want := []cni.Command{cni.CommandAdd, cni.CommandDel}
			if tt.want == "1.1.0" {
				// libcni sends STATUS only to a 1.1.0 network.
				want = []cni.Command{cni.CommandAdd, cni.CommandStatus, cni.CommandDel}
			}
			g.Expect(agent.Commands()).To(Equal(want))
		})
	}
}
