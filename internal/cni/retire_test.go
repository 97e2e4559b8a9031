package cni

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	. "github.com/onsi/gomega"
)

// TestRetiredNodeAnswersDELWithoutTheAgent: on a retired node the shim answers DEL from the state
// directory, with no agent listening; the conflist stays until the last sandbox is deleted. On a
// node that is not retired, an unreachable agent is restarting: DEL is try-again-later.
func TestRetiredNodeAnswersDELWithoutTheAgent(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	stateDir, confDir := filepath.Join(dir, "state"), filepath.Join(dir, "net.d")
	_, err := WriteConfList(confDir, filepath.Join(dir, "no-agent.sock"), stateDir)
	g.Expect(err).NotTo(HaveOccurred())
	confList := filepath.Join(confDir, ConfListName)
	stdin, err := os.ReadFile(confList)
	g.Expect(err).NotTo(HaveOccurred())
	// The runtime passes the plugin's entry of the conflist, with the list's name and version.
	var list struct {
		Plugins []map[string]any `json:"plugins"`
	}
	g.Expect(json.Unmarshal(stdin, &list)).To(Succeed())
	plugin := list.Plugins[0]
	plugin["cniVersion"], plugin["name"] = ConfListVersion, NetworkName
	conf, err := json.Marshal(plugin)
	g.Expect(err).NotTo(HaveOccurred())
	shim := NewShim(ShimOptions{})
	del := func(id string) error {
		return shim.Run(context.Background(), CommandDel, &skel.CmdArgs{ContainerID: id, Netns: "/run/netns/x", IfName: "eth0", StdinData: conf})
	}

	err = del("sandbox-a")
	g.Expect(err).To(HaveField("Code", uint(types.ErrTryAgainLater)), "not retired: the agent is restarting")
	g.Expect(confList).To(BeAnExistingFile())

	finished, err := Retire(stateDir, confDir, Retirement{By: "test"}, []string{"sandbox-a", "sandbox-b"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(finished).To(BeFalse())
	g.Expect(RetiredSandboxes(stateDir)).To(Equal(2))

	g.Expect(del("sandbox-a")).To(Succeed())
	g.Expect(del("sandbox-a")).To(Succeed(), "a repeated DEL succeeds")
	g.Expect(del("workload-container")).To(Succeed(), "a container winnet never attached")
	g.Expect(confList).To(BeAnExistingFile(), "a sandbox is left: the runtime still needs the conflist")
	g.Expect(RetiredSandboxes(stateDir)).To(Equal(1))

	g.Expect(del("sandbox-b")).To(Succeed())
	g.Expect(confList).NotTo(BeAnExistingFile(), "the conflist goes with the last sandbox")
	entries, err := os.ReadDir(stateDir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(entries).To(BeEmpty(), "the retirement goes with the last sandbox")
}

// TestTheLastSandboxTakesTheInstalledShim: the shim binary named by the Retirement (the agent's
// --cni-shim-path) goes with the last sandbox, after the conflist; another copy of the shim (one the
// agent's configuration does not name) stays, and so does the shim when the Retirement names none.
func TestTheLastSandboxTakesTheInstalledShim(t *testing.T) {
	for _, tc := range []struct {
		name       string
		named      bool
		wantRemove bool
	}{
		{name: "the agent names the installed shim", named: true, wantRemove: true},
		{name: "the agent names no shim", named: false, wantRemove: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			dir := t.TempDir()
			stateDir, confList := filepath.Join(dir, "state"), filepath.Join(dir, ConfListName)
			installed, other := filepath.Join(dir, "bin", PluginType), filepath.Join(dir, "other", PluginType)
			node := RetiredNode{StateDir: stateDir, ConfDir: dir, Self: installed}
			for _, p := range []string{installed, other, confList} {
				g.Expect(os.MkdirAll(filepath.Dir(p), 0o755)).To(Succeed())
				g.Expect(os.WriteFile(p, []byte("binary"), 0o755)).To(Succeed())
			}
			r := Retirement{By: "test"}
			if tc.named {
				r.Shim = installed
			}
			_, err := Retire(stateDir, dir, r, []string{"sandbox-a", "sandbox-b"})
			g.Expect(err).NotTo(HaveOccurred())

			g.Expect(node.DelRetired("sandbox-a")).To(BeTrue())
			g.Expect(installed).To(BeAnExistingFile(), "a sandbox is left: the runtime still runs the shim for its DEL")
			g.Expect(node.DelRetired("sandbox-b")).To(BeTrue())
			g.Expect(confList).NotTo(BeAnExistingFile())
			if tc.wantRemove {
				g.Expect(installed).NotTo(BeAnExistingFile(), "the installed shim goes with the last sandbox")
				g.Expect(filepath.Join(dir, "bin")).To(BeADirectory(), "only the shim goes, not its directory")
			} else {
				g.Expect(installed).To(BeAnExistingFile(), "no shim named: it stays")
			}
			g.Expect(other).To(BeAnExistingFile(), "a shim the agent did not name stays")
			_, retired, err := ReadRetirement(stateDir)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(retired).To(BeFalse())
		})
	}
}

func TestRetireWithoutSandboxesRemovesTheShim(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	shim := filepath.Join(dir, PluginType)
	g.Expect(os.WriteFile(shim, []byte("binary"), 0o755)).To(Succeed())
	finished, err := Retire(filepath.Join(dir, "state"), dir, Retirement{Shim: shim}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(finished).To(BeTrue())
	g.Expect(shim).NotTo(BeAnExistingFile())
	finished, err = Retire(filepath.Join(dir, "state"), dir, Retirement{Shim: shim}, nil)
	g.Expect(err).NotTo(HaveOccurred(), "a shim already gone")
	g.Expect(finished).To(BeTrue())
}

// TestRetireRefusesAPathNotNamedLikeTheShim: the retirement never removes, as the shim, a file
// that is not named like it, nor a relative path.
func TestRetireRefusesAPathNotNamedLikeTheShim(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	victim := filepath.Join(dir, "host-local")
	g.Expect(os.WriteFile(victim, []byte("binary"), 0o755)).To(Succeed())
	for _, shim := range []string{victim, PluginType, dir} {
		_, err := Retire(filepath.Join(dir, "state"), dir, Retirement{Shim: shim}, nil)
		g.Expect(err).To(MatchError(ContainSubstring("CNI shim path")), shim)
		_, err = Retire(filepath.Join(dir, "state"), dir, Retirement{Shim: shim}, []string{"s"})
		g.Expect(err).To(MatchError(ContainSubstring("CNI shim path")), shim)
	}
	g.Expect(victim).To(BeAnExistingFile())
	g.Expect(dir).To(BeADirectory())
}

func TestRetireWithoutSandboxesRemovesTheConfList(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	_, err := WriteConfList(dir, "/run/winnet/cni.sock", filepath.Join(dir, "state"))
	g.Expect(err).NotTo(HaveOccurred())
	finished, err := Retire(filepath.Join(dir, "state"), dir, Retirement{}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(finished).To(BeTrue())
	g.Expect(filepath.Join(dir, ConfListName)).NotTo(BeAnExistingFile())
	_, retired, err := ReadRetirement(filepath.Join(dir, "state"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(retired).To(BeFalse())
}

func TestUnretire(t *testing.T) {
	g := NewWithT(t)
	stateDir := t.TempDir()
	_, err := Retire(stateDir, "/nonexistent", Retirement{}, []string{"s"})
	g.Expect(err).NotTo(HaveOccurred())
	_, retired, err := ReadRetirement(stateDir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(retired).To(BeTrue())
	g.Expect(Unretire(stateDir)).To(Succeed())
	_, retired, err = ReadRetirement(stateDir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(retired).To(BeFalse())
	handled, skipped, err := RetiredNode{StateDir: stateDir}.DelRetired("s")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(skipped).NotTo(HaveOccurred())
	g.Expect(handled).To(BeFalse(), "the agent answers again")
}

// TestPlantedRetirementRemovesNothingOutside: a retirement record naming paths outside the state
// directory — an old agent's record, or one planted while the state directory was open to users
// — never makes DEL remove them: the shim removes only what it derives itself (the conflist by
// name, the state directory's own subdirectories). A record in a directory users may write, or
// owned by another user, is not acted upon at all: DEL goes to the agent instead, and the shim
// says why on stderr.
func TestPlantedRetirementRemovesNothingOutside(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test chowns a file: run it as root")
	}
	for _, tc := range []struct {
		name string
		// plant prepares stateDir (already holding a retired node with one sandbox) after the
		// record was replaced by the planted one.
		plant       func(g *WithT, stateDir string)
		wantHandled bool
	}{
		{name: "a record in the protected state directory", wantHandled: true},
		{name: "a state directory users may write", plant: func(g *WithT, stateDir string) {
			g.Expect(os.Chmod(stateDir, 0o777)).To(Succeed())
		}},
		{name: "a record owned by another user", plant: func(g *WithT, stateDir string) {
			g.Expect(os.Chown(filepath.Join(stateDir, RetiredDir, RetiredFile), 65534, 65534)).To(Succeed())
		}},
		{name: "a record larger than its bound", plant: func(g *WithT, stateDir string) {
			big := append([]byte(`{"by":"`), make([]byte, MaxRetirementSize)...)
			for i := 7; i < len(big); i++ {
				big[i] = 'x'
			}
			g.Expect(os.WriteFile(filepath.Join(stateDir, RetiredDir, RetiredFile), append(big, `"}`...), 0o600)).To(Succeed())
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			dir := t.TempDir()
			stateDir, confDir := filepath.Join(dir, "state"), filepath.Join(dir, "net.d")
			victim := filepath.Join(dir, "precious")
			g.Expect(os.MkdirAll(filepath.Join(victim, "data"), 0o755)).To(Succeed())
			_, err := WriteConfList(confDir, filepath.Join(dir, "no-agent.sock"), stateDir)
			g.Expect(err).NotTo(HaveOccurred())
			_, err = Retire(stateDir, confDir, Retirement{By: "test"}, []string{"sandbox-a"})
			g.Expect(err).NotTo(HaveOccurred())
			planted := fmt.Sprintf(`{"remove":[%q,%q],"by":"planted"}`, victim, filepath.Join(victim, "data"))
			g.Expect(os.WriteFile(filepath.Join(stateDir, RetiredDir, RetiredFile), []byte(planted), 0o600)).To(Succeed())
			if tc.plant != nil {
				tc.plant(g, stateDir)
			}

			var stderr bytes.Buffer
			shim := NewShim(ShimOptions{Stderr: &stderr})
			conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"winnet","type":"winnet-cni","agentSocket":%q,"stateDir":%q,"confDir":%q}`,
				filepath.Join(dir, "no-agent.sock"), stateDir, confDir)
			err = shim.Run(context.Background(), CommandDel, &skel.CmdArgs{ContainerID: "sandbox-a", Netns: "/run/netns/x", IfName: "eth0", StdinData: []byte(conf)})

			g.Expect(filepath.Join(victim, "data")).To(BeADirectory(), "a path the record names survives")
			if tc.wantHandled {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(filepath.Join(confDir, ConfListName)).NotTo(BeAnExistingFile(), "the conflist, derived by name, goes")
				g.Expect(filepath.Join(stateDir, RetiredDir)).NotTo(BeAnExistingFile())
				return
			}
			g.Expect(err).To(HaveField("Code", uint(types.ErrTryAgainLater)), "not trusted: the agent is asked, as on a node not retired")
			g.Expect(stderr.String()).To(ContainSubstring("skipping the retirement record"))
			g.Expect(filepath.Join(confDir, ConfListName)).To(BeAnExistingFile())
		})
	}
}
