package cni

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	. "github.com/onsi/gomega"
	"golang.org/x/sys/windows/registry"

	"github.com/winnet-io/winnet/test/hostcmd"
	"github.com/winnet-io/winnet/test/wine"
)

// These tests run the shim as its own process, as containerd runs winnet-cni.exe: this test binary,
// started again with childRole set, is the shim (the same main as cmd/winnet-cni: skel with
// NewShim's callbacks) or the shim removing itself. They prove the named-pipe protocol across
// processes on Windows (and under Wine, which make test-windows runs them in).

// childRole, when set in the environment, makes this test binary act as a child instead of testing.
const childRole = "WINNET_CNI_TEST_CHILD"

func TestMain(m *testing.M) {
	switch os.Getenv(childRole) {
	case "":
		os.Exit(m.Run())
	case "shim":
		ctx, cancel := context.WithCancel(context.Background())
		self, _ := os.Executable()
		shim := NewShim(ShimOptions{Stdout: os.Stdout, Stderr: os.Stderr, Executable: self, Server: wine.ServerVerifier()})
		// PluginMainFuncs exits with status 1 after printing the CNI error on stdout.
		skel.PluginMainFuncs(shim.Funcs(ctx), PluginVersionInfo(), "winnet-cni test child")
		cancel()
		os.Exit(0)
	case "remove-self":
		self, err := os.Executable()
		if err == nil {
			err = RemoveShim(self)
		}
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println("removed")
		os.Exit(0)
	default:
		fmt.Fprintf(os.Stderr, "unknown %s %q\n", childRole, os.Getenv(childRole))
		os.Exit(2)
	}
}

// shimBinary copies this test binary to winnet-cni.exe in a directory of t's: run with childRole
// set, it is the shim, and it is run by that name like winnet's own binaries (test/hostcmd).
func shimBinary(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	shim := filepath.Join(wine.TempDir(t), "winnet-cni.exe")
	copyFile(t, self, shim)
	return shim
}

// runShim runs shim as a process with the CNI environment of cmd and conf on stdin, and returns its
// stdout and exit code.
func runShim(t *testing.T, shim string, cmd Command, containerID string, conf []byte) (stdout []byte, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := hostcmd.CommandContext(ctx, shim)
	c.Env = append(os.Environ(), childRole+"=shim", "CNI_COMMAND="+string(cmd), "CNI_CONTAINERID="+containerID,
		"CNI_NETNS=/var/run/netns/pod", "CNI_IFNAME=eth0", `CNI_PATH=C:\opt\cni\bin`, "CNI_ARGS=K8S_POD_NAME=web-0")
	c.Stdin = bytes.NewReader(conf)
	var out, errOut bytes.Buffer
	c.Stdout, c.Stderr = &out, &errOut
	err := c.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out.Bytes(), ee.ExitCode()
	}
	if err != nil {
		t.Fatalf("running the shim: %v (stderr: %s)", err, errOut.String())
	}
	return out.Bytes(), 0
}

func shimConf(t *testing.T, address string, extra map[string]any) []byte {
	t.Helper()
	m := map[string]any{"cniVersion": "1.1.0", "name": "winnet", "type": "winnet-cni", "agentSocket": address}
	for k, v := range extra {
		m[k] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestShimProcessToServer: ADD, DEL and an agent's CNI error, each through a shim process and the
// agent's named pipe; the agent receives the runtime's environment and configuration unchanged.
func TestShimProcessToServer(t *testing.T) {
	g := NewWithT(t)
	rec := &recorder{respond: func(_ context.Context, req Request) Response {
		switch req.Command {
		case CommandAdd:
			return Response{Result: json.RawMessage(agentResult100)}
		case CommandCheck:
			return ErrorResponse(types.ErrUnknownContainer, "no endpoint for container", req.ContainerID)
		}
		return Response{}
	}}
	address := startServer(t, rec, ServeOptions{})
	conf := shimConf(t, address, nil)
	shim := shimBinary(t)

	out, code := runShim(t, shim, CommandAdd, "c0ffee", conf)
	g.Expect(code).To(Equal(0), "stdout: %s", out)
	g.Expect(out).To(MatchJSON(`{"cniVersion":"1.1.0","interfaces":[{"name":"eth0","mac":"aa:bb:cc:00:00:05","sandbox":"/var/run/netns/pod"}],
		"ips":[{"interface":0,"address":"10.244.1.5/24","gateway":"10.244.1.1"}],"routes":[{"dst":"0.0.0.0/0","gw":"10.244.1.1"}]}`))
	got := rec.Requests()
	g.Expect(got).To(HaveLen(1))
	g.Expect(got[0]).To(Equal(Request{Command: CommandAdd, ContainerID: "c0ffee", Netns: "/var/run/netns/pod", IfName: "eth0",
		Args: "K8S_POD_NAME=web-0", Path: `C:\opt\cni\bin`, StdinData: conf}))

	out, code = runShim(t, shim, CommandCheck, "c0ffee", conf)
	g.Expect(code).To(Equal(1))
	g.Expect(out).To(MatchJSON(`{"code":3,"msg":"no endpoint for container","details":"c0ffee"}`))

	out, code = runShim(t, shim, CommandDel, "c0ffee", conf)
	g.Expect(code).To(Equal(0), "stdout: %s", out)
	g.Expect(out).To(BeEmpty())
	g.Expect(rec.Requests()).To(HaveLen(3))
}

// TestShimProcessErrors: what a shim process prints when the agent is not there, when the
// configuration cannot be decoded and when it is over the limit; none reaches the handler.
func TestShimProcessErrors(t *testing.T) {
	g := NewWithT(t)
	rec := &recorder{}
	address := startServer(t, rec, ServeOptions{})
	absent := testAddress(t)
	shim := shimBinary(t)

	decode := func(out []byte) *types.Error {
		var e types.Error
		g.Expect(json.Unmarshal(out, &e)).To(Succeed(), "stdout: %s", out)
		return &e
	}
	out, code := runShim(t, shim, CommandAdd, "c1", shimConf(t, absent, nil))
	g.Expect(code).To(Equal(1))
	e := decode(out)
	g.Expect(e.Code).To(BeEquivalentTo(types.ErrTryAgainLater))
	g.Expect(e.Msg).To(ContainSubstring(fmt.Sprintf("winnet agent is not reachable at %q", absent)))

	out, code = runShim(t, shim, CommandAdd, "c1", []byte(`{"cniVersion":"1.1.0","name":"winnet","type":"winnet-cni","agentSocket":["a"]}`))
	g.Expect(code).To(Equal(1))
	g.Expect(decode(out).Code).To(BeEquivalentTo(types.ErrDecodingFailure))

	big := shimConf(t, address, map[string]any{"pad": strings.Repeat("x", MaxConfigSize)})
	out, code = runShim(t, shim, CommandAdd, "c1", big)
	g.Expect(code).To(Equal(1))
	e = decode(out)
	g.Expect(e.Code).To(BeEquivalentTo(types.ErrInvalidNetworkConfig))
	g.Expect(e.Msg).To(ContainSubstring("limit of 4194304 bytes"))
	g.Expect(rec.Requests()).To(BeEmpty())
}

// TestShimProcessLargeConfiguration: a configuration just under the 4 MiB limit crosses the pipe
// (64 KiB buffers) whole, and so does a 1 MiB result.
func TestShimProcessLargeConfiguration(t *testing.T) {
	g := NewWithT(t)
	pad := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB of result
	result := fmt.Sprintf(`{"cniVersion":"1.1.0","ips":[{"address":"10.244.1.5/24"}],"dns":{"domain":%q}}`, pad)
	rec := &recorder{respond: func(context.Context, Request) Response { return Response{Result: json.RawMessage(result)} }}
	address := startServer(t, rec, ServeOptions{})
	conf := shimConf(t, address, nil)
	fill := MaxConfigSize - len(conf) - len(`,"pad":""`)
	conf = shimConf(t, address, map[string]any{"pad": strings.Repeat("y", fill)})
	g.Expect(len(conf)).To(Equal(MaxConfigSize))
	shim := shimBinary(t)

	out, code := runShim(t, shim, CommandAdd, "c-large", conf)
	g.Expect(code).To(Equal(0), "stdout: %.300s", out)
	g.Expect(out).To(MatchJSON(result))
	got := rec.Requests()
	g.Expect(got).To(HaveLen(1))
	g.Expect(bytes.Equal(got[0].StdinData, conf)).To(BeTrue(), "the configuration arrived changed (%d bytes, sent %d)", len(got[0].StdinData), len(conf))
}

// TestShimProcessesConcurrently: shim processes started together are each answered with their
// own container's result.
func TestShimProcessesConcurrently(t *testing.T) {
	g := NewWithT(t)
	rec := &recorder{respond: func(_ context.Context, req Request) Response {
		time.Sleep(50 * time.Millisecond) // keep several in flight
		return Response{Result: json.RawMessage(fmt.Sprintf(`{"cniVersion":"1.1.0","ips":[{"address":"10.244.1.%s/24"}]}`,
			strings.TrimPrefix(req.ContainerID, "c")))}
	}}
	address := startServer(t, rec, ServeOptions{MaxConcurrent: 4})
	conf := shimConf(t, address, nil)
	shim := shimBinary(t)
	const n = 8
	outs, codes := make([][]byte, n), make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { outs[i], codes[i] = runShim(t, shim, CommandAdd, fmt.Sprintf("c%d", i+10), conf) })
	}
	wg.Wait()
	for i := range n {
		g.Expect(codes[i]).To(Equal(0), "shim %d: %s", i, outs[i])
		g.Expect(outs[i]).To(MatchJSON(fmt.Sprintf(`{"cniVersion":"1.1.0","ips":[{"address":"10.244.1.%d/24"}]}`, i+10)))
	}
	g.Expect(rec.Requests()).To(HaveLen(n))
}

// pendingRenames reads PendingFileRenameOperations, where MoveFileEx(MOVEFILE_DELAY_UNTIL_REBOOT)
// records what to do at the next boot: pairs of \??\source and target ("" deletes).
func pendingRenames(t *testing.T) []string {
	t.Helper()
	k, err := registry.OpenKey(registry.LOCAL_MACHINE, `SYSTEM\CurrentControlSet\Control\Session Manager`, registry.QUERY_VALUE)
	if err != nil {
		t.Fatalf("opening the Session Manager key: %v", err)
	}
	defer k.Close() //nolint:errcheck
	v, _, err := k.GetStringsValue("PendingFileRenameOperations")
	if err != nil && err != registry.ErrNotExist {
		t.Fatalf("reading PendingFileRenameOperations: %v", err)
	}
	return v
}

// TestShimRemovesItselfWhileRunning: a running shim cannot delete its own file on Windows; RemoveShim
// moves it aside in its directory (where no runtime looks it up) and schedules that name for
// deletion at the next reboot.
func TestShimRemovesItselfWhileRunning(t *testing.T) {
	g := NewWithT(t)
	shim := shimBinary(t)

	// The shim calls RemoveShim on its own file while it runs; Windows refuses to delete the image
	// of a running process, so the plain delete RemoveShim tries first fails.
	c := hostcmd.Command(shim)
	c.Env = append(os.Environ(), childRole+"=remove-self")
	out, err := c.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "output: %s", out)
	g.Expect(string(out)).To(Equal("removed\n"))
	pid := c.ProcessState.Pid()

	aside := fmt.Sprintf("%s.removed-%d", shim, pid)
	g.Expect(shim).NotTo(BeAnExistingFile(), "the runtime no longer finds winnet-cni.exe")
	g.Expect(aside).To(BeAnExistingFile(), "moved aside in its directory")
	pending := pendingRenames(t)
	g.Expect(pending).To(ContainElement(HaveSuffix(aside)), "scheduled for deletion at the next reboot: %q", pending)
	t.Cleanup(func() { forgetPendingRename(t, aside) })
	g.Expect(os.Remove(aside)).To(Succeed(), "the process ended: its image can be deleted now")
}

// forgetPendingRename removes the entries of path from PendingFileRenameOperations.
func forgetPendingRename(t *testing.T, path string) {
	k, err := registry.OpenKey(registry.LOCAL_MACHINE, `SYSTEM\CurrentControlSet\Control\Session Manager`, registry.QUERY_VALUE|registry.SET_VALUE)
	if err != nil {
		t.Errorf("opening the Session Manager key: %v", err)
		return
	}
	defer k.Close() //nolint:errcheck
	v, _, err := k.GetStringsValue("PendingFileRenameOperations")
	if err != nil {
		return
	}
	var keep []string
	for i := 0; i+1 < len(v); i += 2 {
		if !strings.HasSuffix(v[i], path) {
			keep = append(keep, v[i], v[i+1])
		}
	}
	if len(keep) == 0 {
		err = k.DeleteValue("PendingFileRenameOperations")
	} else {
		err = k.SetStringsValue("PendingFileRenameOperations", keep)
	}
	if err != nil {
		t.Errorf("restoring PendingFileRenameOperations: %v", err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close() //nolint:errcheck
	out, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
