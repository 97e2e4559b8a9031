package hostcmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
)

// Kind says how a command gets onto the machine.
type Kind int

const (
	// Debian commands come from a Debian package, which hack/setup-test-deps.sh installs.
	Debian Kind = iota
	// Toolchain commands come with the machine (the Go toolchain).
	Toolchain
	// Plugin is a CNI plugin that libcni runs (the flannel node's Pods, bench-cni's reference) from a
	// Debian package; tests never run it themselves, so it is checked by Path and never looked up by name.
	Plugin
	// Built commands are built by hack/setup-test-deps.sh into bin/ (Kubernetes, etcd, helm, CoreDNS,
	// flanneld) or by `go build` of this repository (winnet's own binaries); they are run by path.
	Built
)

// Entry is one command of the list.
type Entry struct {
	// Name is the command's base name (what exec.Command is given, or the base of the path it is given).
	Name string
	Kind Kind
	// Package is the Debian package that installs a Debian command.
	Package string
	// Path, when set, is where the command must be: tests run it by that path (/usr/bin/python3, which
	// a pyenv or virtualenv python3 first on PATH must not replace) or a program other than a test runs
	// it from there (the CNI plugins libcni runs).
	Path string
	// From says, for Built and Toolchain commands, what provides it.
	From string
}

const (
	fromSetup = "hack/setup-test-deps.sh (built into bin/ from the Go module proxy)"
	fromRepo  = "a go build of this repository (make build, or the test builds it)"
)

// list is every external command the tests, benchmarks and demo run, directly or through `ip netns
// exec`, and the programs other tools run for them (iptables for flanneld, the CNI plugins for libcni).
// Add a command here, with its source, before a test runs it; hack/setup-test-deps.sh installs the
// Debian packages this list names.
var list = []Entry{
	{Name: "ip", Kind: Debian, Package: "iproute2"},
	{Name: "nft", Kind: Debian, Package: "nftables"},
	{Name: "ping", Kind: Debian, Package: "iputils-ping"},
	{Name: "python3", Kind: Debian, Package: "python3", Path: "/usr/bin/python3"},
	{Name: "iptables", Kind: Debian, Package: "iptables"}, // flanneld's default mode runs it
	{Name: "getent", Kind: Debian, Package: "libc-bin"},
	{Name: "pgrep", Kind: Debian, Package: "procps"},
	{Name: "cat", Kind: Debian, Package: "coreutils"},
	{Name: "sleep", Kind: Debian, Package: "coreutils"},
	{Name: "true", Kind: Debian, Package: "coreutils"},
	{Name: "ovs-vsctl", Kind: Debian, Package: "openvswitch-switch"},
	{Name: "ovs-vswitchd", Kind: Debian, Package: "openvswitch-switch"},
	{Name: "ovs-ofctl", Kind: Debian, Package: "openvswitch-common"},
	{Name: "ovs-appctl", Kind: Debian, Package: "openvswitch-common"},
	{Name: "ovsdb-tool", Kind: Debian, Package: "openvswitch-common"},
	{Name: "ovsdb-server", Kind: Debian, Package: "openvswitch-common"},
	{Name: "bridge", Kind: Debian, Package: "iproute2"}, // bridge fdb: flanneld's forwarding entries
	{Name: "bash", Kind: Debian, Package: "bash"},       // make docs-check runs the demo's Try commands as a user would
	{Name: "cni-bridge", Kind: Plugin, Package: "containernetworking-plugins", Path: "/usr/lib/cni/bridge"},
	{Name: "cni-host-local", Kind: Plugin, Package: "containernetworking-plugins", Path: "/usr/lib/cni/host-local"},
	// make test-windows: Wine runs the Windows test binaries; hack/setup-wine.sh builds the prefix's
	// bcryptprimitives.dll (test/wine/bcryptprimitives) with MinGW-w64's gcc.
	{Name: "wine64", Kind: Debian, Package: "wine64", Path: "/usr/lib/wine/wine64"},
	{Name: "wineserver64", Kind: Debian, Package: "wine64", Path: "/usr/lib/wine/wineserver64"},
	{Name: "x86_64-w64-mingw32-gcc-win32", Kind: Debian, Package: "gcc-mingw-w64-x86-64-win32"},
	// The winnet nodes with a real kubelet (test/framework/kubeletnode): Debian's containerd 1.6 and
	// runc, run by name; containerd 2.x (same names) is built by hack/setup-kubelet-deps.sh into
	// bin/containerd-<version>/ and run by path. nsenter starts kubelet in the node's network namespace.
	{Name: "containerd", Kind: Debian, Package: "containerd"},
	{Name: "containerd-shim-runc-v2", Kind: Debian, Package: "containerd"},
	{Name: "ctr", Kind: Debian, Package: "containerd"},
	{Name: "runc", Kind: Debian, Package: "runc"},
	{Name: "nsenter", Kind: Debian, Package: "util-linux"},
	{Name: "unshare", Kind: Debian, Package: "util-linux"},
	{Name: "mount", Kind: Debian, Package: "mount"},
	// hack/setup-kubelet-deps.sh: pause is compiled with gcc -static (libc6-dev's libc.a), and the
	// agnhost image's root filesystem is this machine's binaries with the libraries ldd names.
	{Name: "gcc", Kind: Debian, Package: "gcc"},
	{Name: "ldd", Kind: Debian, Package: "libc-bin"},
	{Name: "curl", Kind: Debian, Package: "curl"},
	{Name: "nc.openbsd", Kind: Debian, Package: "netcat-openbsd"},
	{Name: "dig", Kind: Debian, Package: "bind9-dnsutils"},
	{Name: "nslookup", Kind: Debian, Package: "bind9-dnsutils"},
	{Name: "kubelet", Kind: Built, From: "hack/setup-kubelet-deps.sh (hack/setup-test-deps.sh kubelet)"},
	{Name: "kube-scheduler", Kind: Built, From: "hack/setup-kubelet-deps.sh (hack/setup-test-deps.sh kubelet)"},
	// Kubernetes' own e2e suite (test/e2e/conformance), and the ginkgo CLI that runs it in parallel.
	{Name: "e2e.test", Kind: Built, From: "hack/setup-kubelet-deps.sh (hack/setup-test-deps.sh e2e)"},
	{Name: "ginkgo", Kind: Built, From: "hack/setup-kubelet-deps.sh (hack/setup-test-deps.sh e2e)"},
	// The network-policy-api conformance suite (make conformance-cnp), a test binary of its module.
	{Name: "conformance.test", Kind: Built, From: "hack/setup-kubelet-deps.sh cnp (make conformance-cnp)"},
	{Name: "go", Kind: Toolchain, From: "the Go toolchain the machine comes with (/usr/local/go)"},
	{Name: "kube-apiserver", Kind: Built, From: fromSetup},
	{Name: "kube-controller-manager", Kind: Built, From: fromSetup},
	{Name: "kubectl", Kind: Built, From: fromSetup},
	{Name: "kube-proxy", Kind: Built, From: "hack/setup-test-deps.sh kube-proxy (make bench-services)"},
	{Name: "etcd", Kind: Built, From: fromSetup},
	{Name: "helm", Kind: Built, From: fromSetup},
	{Name: "coredns", Kind: Built, From: fromSetup},
	{Name: "flanneld", Kind: Built, From: fromSetup},
	{Name: "winnet-agent", Kind: Built, From: fromRepo},
	{Name: "winnet-controller", Kind: Built, From: fromRepo},
	{Name: "kubectl-winnet", Kind: Built, From: fromRepo},
	{Name: "winnet-cni", Kind: Built, From: fromRepo},
	{Name: "winnet-demo", Kind: Built, From: fromRepo},
}

// List returns a copy of the list, sorted by name.
func List() []Entry {
	l := append([]Entry(nil), list...)
	sort.Slice(l, func(i, j int) bool { return l[i].Name < l[j].Name })
	return l
}

func lookup(name string) (Entry, bool) {
	for _, c := range list {
		if c.Name == name && c.Kind != Plugin {
			return c, true
		}
	}
	return Entry{}, false
}

// Source says where c comes from, in the words an error gives.
func (c Entry) Source() string {
	switch c.Kind {
	case Debian, Plugin:
		return "Debian package " + c.Package + " (installed by hack/setup-test-deps.sh)"
	default:
		return c.From
	}
}

// Check reports whether the command a test would run as name is allowed and present: a name on the
// list found on PATH (or at its Path), or a path whose base name is on the list and that is an
// executable file. The error names the command and where it comes from.
func Check(name string) error {
	base := filepath.Base(name)
	if runtime.GOOS == "windows" {
		// A Windows test (make test-windows) runs winnet's binaries as NAME.exe.
		base = strings.TrimSuffix(base, ".exe")
	}
	c, ok := lookup(base)
	if !ok {
		return fmt.Errorf("hostcmd: %q is not on the list of commands tests may run (test/hostcmd/hostcmd.go): add it with the package that provides it", name)
	}
	return c.present(name)
}

// present checks that the command as invoked (name: a bare name or a path) exists.
func (c Entry) present(name string) error {
	switch {
	case strings.ContainsRune(name, filepath.Separator):
		if c.Path != "" && name != c.Path && c.Kind == Debian {
			return fmt.Errorf("hostcmd: %s is run as %s, not from %s (%s)", c.Name, c.Path, name, c.Source())
		}
		if err := executable(name); err != nil {
			return fmt.Errorf("hostcmd: %s: %w; it comes from %s", name, err, c.Source())
		}
	case c.Path != "":
		if err := executable(c.Path); err != nil {
			return fmt.Errorf("hostcmd: %s: %w; install %s", c.Name, err, c.Source())
		}
	default:
		if _, err := exec.LookPath(name); err != nil {
			return fmt.Errorf("hostcmd: %s is not installed (%s)", name, c.Source())
		}
	}
	return nil
}

func executable(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return errors.New("not found")
		}
		return err
	}
	// Windows has no execute bits (Go reports 0666 or 0444): there, a file is enough.
	if st.IsDir() || (runtime.GOOS != "windows" && st.Mode().Perm()&0o111 == 0) {
		return errors.New("not an executable file")
	}
	return nil
}

// resolve returns the path to run for a bare Debian name with a fixed Path (python3), else name.
func resolve(name string) string {
	if strings.ContainsRune(name, filepath.Separator) {
		return name
	}
	if c, ok := lookup(name); ok && c.Path != "" {
		return c.Path
	}
	return name
}

// inner returns the command args run through a wrapper: `ip netns exec NS CMD...` and
// `ip -n NS ...` (ip itself). Only the first is a nested command.
func inner(name string, args []string) (string, bool) {
	if filepath.Base(name) == "ip" && len(args) >= 4 && args[0] == "netns" && args[1] == "exec" {
		return args[3], true
	}
	return "", false
}

// CheckArgs checks name and, for `ip netns exec NS CMD ...`, CMD.
func CheckArgs(name string, args ...string) error {
	if err := Check(name); err != nil {
		return err
	}
	if in, ok := inner(name, args); ok {
		return Check(in)
	}
	return nil
}

// Command is exec.Command for a command on the list. When the command (or the command it runs inside
// `ip netns exec`) is not on the list or not installed, the returned Cmd's Err says which and where
// it comes from, and Start, Run and Output return that error at once.
func Command(name string, args ...string) *exec.Cmd {
	return CommandContext(context.Background(), name, args...)
}

// CommandContext is Command with a context, like exec.CommandContext.
func CommandContext(ctx context.Context, name string, args ...string) *exec.Cmd {
	if in, ok := inner(name, args); ok {
		args = append([]string(nil), args...)
		args[3] = resolve(in)
	}
	cmd := exec.CommandContext(ctx, resolve(name), args...)
	if err := CheckArgs(name, args...); err != nil {
		cmd.Err = err
	}
	return cmd
}

// Missing checks every Debian and Toolchain command of the list and returns one error per missing
// one. Built commands are run by path and checked by the steps that build them.
func Missing() []error {
	var errs []error
	for _, c := range List() {
		if c.Kind == Built {
			continue
		}
		if err := c.present(c.Name); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// Packages returns the Debian packages of the commands that are missing, sorted and unique.
func Packages() []string {
	seen := map[string]bool{}
	for _, c := range list {
		if (c.Kind == Debian || c.Kind == Plugin) && c.present(c.Name) != nil {
			seen[c.Package] = true
		}
	}
	var out []string
	for p := range seen {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}
