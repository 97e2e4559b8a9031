//go:build linux

package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/winnet-io/winnet/internal/cni"
	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/hostcmd"
)

// Nodes with a real kubelet and containerd (Options.Kubelets, AddKubeletNode). Each such node runs its
// containerd, its kubelet and its winnet-agent (with the HNS simulator) in one mount namespace of its own:
// containerd mounts the Pods' network namespaces there, where the simulator must open them, and kubelet's
// sysctls are overlaid there, never changed on the machine. containerd and kubelet run in the node's network
// namespace (kubelet probes the Pods from the node, as on Windows); the agent, as on the other nodes, in the
// harness's one with --netns. Everything the node's processes start (containerd's shims, the containers) is
// in the node's cgroups, which teardown empties and removes.

// KubeletImages are images every node with a real kubelet has imported (with the others images.txt lists),
// named as e2e.test v1.37.0 names them (hack/setup-kubelet-deps.sh builds them): nothing is ever pulled.
var KubeletImages = struct{ Pause, Agnhost string }{
	Pause:   "registry.k8s.io/pause:3.10.2",
	Agnhost: "registry.k8s.io/e2e-test-images/agnhost:2.66.1",
}

// ContainerdVersion is the containerd 2.x hack/setup-kubelet-deps.sh builds.
const ContainerdVersion = "v2.4.2"

// Runtime is the container runtime of a node with a real kubelet: containerd's binaries.
type Runtime struct {
	// Name says which containerd it is, for logs and test names.
	Name string
	// Containerd, Ctr and Shim are the binaries; the shim's directory goes first on containerd's PATH.
	Containerd, Ctr, Shim string
	// ConfigVersion is the version of containerd's configuration file: 2 for containerd 1.x, 3 for 2.x.
	ConfigVersion int
}

// DebianContainerd is Debian's containerd 1.6 (libcni 1.1: it ignores the conflist's cniVersions).
func DebianContainerd() Runtime {
	return Runtime{Name: "containerd-1.6", Containerd: "/usr/bin/containerd", Ctr: "/usr/bin/ctr",
		Shim: "/usr/bin/containerd-shim-runc-v2", ConfigVersion: 2}
}

// BuiltContainerd is the containerd 2.x hack/setup-kubelet-deps.sh builds into bin/ (libcni 1.3: it runs the
// conflist as CNI 1.1.0, with STATUS).
func BuiltContainerd() Runtime {
	dir := filepath.Join(framework.RepoRoot(), "bin", "containerd-"+ContainerdVersion)
	return Runtime{Name: "containerd-" + ContainerdVersion, Containerd: filepath.Join(dir, "containerd"), Ctr: filepath.Join(dir, "ctr"),
		Shim: filepath.Join(dir, "containerd-shim-runc-v2"), ConfigVersion: 3}
}

// kubeletNode is what a node with a real kubelet has besides the agent.
type kubeletNode struct {
	rt Runtime
	// dir is the node's directory for containerd's and kubelet's state.
	dir string
	// holder keeps the node's mount namespace: every other process of the node enters it.
	holder, containerd, kubelet *process
	// cgroup is the node's cgroup (in every v1 hierarchy): kubelet's cgroupRoot; containerd and its
	// shims are in its child "runtime".
	cgroup string
}

func (k *kubeletNode) mountNS() string {
	return fmt.Sprintf("/proc/%d/ns/mnt", k.holder.cmd.Process.Pid)
}
func (k *kubeletNode) socket() string { return filepath.Join(k.dir, "containerd.sock") }

// nsenter returns the command line running args in the node's mount namespace (and network namespace
// netns, when not empty).
func (k *kubeletNode) nsenter(netns string, args ...string) []string {
	cmd := []string{"nsenter", "--mount=" + k.mountNS()}
	if netns != "" {
		cmd = append(cmd, "--net="+netns)
	}
	return append(append(cmd, "--"), args...)
}

// kubeletSysctls are the values kubelet's protectKernelDefaults requires, overlaid in the node's mount
// namespace.
var kubeletSysctls = map[string]string{"vm/overcommit_memory": "1", "kernel/panic": "10", "kernel/panic_on_oops": "1"}

// cgroupHierarchies are the cgroup v1 hierarchies kubelet uses.
// (runc also makes the Pods' cgroups in the unified one of the hybrid layout).
var cgroupHierarchies = []string{"cpu", "cpuacct", "cpuset", "memory", "pids", "blkio", "devices", "freezer", "systemd", "unified"}

// varLibKubelet is where kubelet keeps its device plugin socket, whatever its root directory.
const varLibKubelet = "/var/lib/kubelet"

// emptyDirsFile lists, in a run directory, directories made outside it that teardown removes if empty.
const emptyDirsFile = "emptydirs"

// cgroupsFile lists, in a run directory, the cgroups (relative to each hierarchy) teardown empties and removes.
const cgroupsFile = "cgroups"

// AddKubeletNode adds a node as AddNode does, but with a real containerd (rt) and kubelet instead of the
// harness playing them: kubelet registers the Node (created first, with its Pod CIDR, as the node IPAM
// controller would), keeps it Ready and its Lease renewed; the Pods the scheduler puts there are started by
// kubelet through containerd, which runs winnet's conflist; the HNS simulator in the agent learns of the
// sandboxes from containerd's events. The cluster must have been started with Options.Kubelets.
func (c *Cluster) AddKubeletNode(ctx context.Context, spec NodeSpec, rt Runtime) (*Node, error) {
	if !c.opts.Kubelets {
		return nil, errors.New("a node with a real kubelet needs a cluster started with Options.Kubelets")
	}
	n, err := c.register(spec, func(n *Node) {
		n.kubelet = &kubeletNode{rt: rt, dir: filepath.Join(n.Dir, "k"), cgroup: "/" + n.NS}
	})
	if err != nil {
		return nil, err
	}

	c.logf("Adding node %s (%s, Pod CIDR %s) with kubelet and %s", n.Name, n.IP, n.PodCIDR, rt.Name)
	if err := n.build(); err != nil {
		return n, fmt.Errorf("building node %s: %w", n.Name, err)
	}
	if err := c.CreateNetwork(ctx, n); err != nil {
		return n, err
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: map[string]string{corev1.LabelHostname: n.Name}},
		Spec:       corev1.NodeSpec{PodCIDR: n.PodCIDR.String(), PodCIDRs: podCIDRs(n.PodCIDR, n.PodCIDRv6)},
	}
	if err := c.Client.Create(ctx, node); err != nil {
		return n, fmt.Errorf("creating Node %s: %w", n.Name, err)
	}
	k := n.kubelet
	if err := k.start(c, n); err != nil {
		return n, err
	}
	if err := n.StartAgent(); err != nil {
		return n, err
	}
	if err := k.startKubelet(c, n); err != nil {
		return n, err
	}
	return n, nil
}

// start makes the node's mount namespace, cgroups and directories and starts containerd with the images
// imported.
func (k *kubeletNode) start(c *Cluster, n *Node) error {
	for _, b := range []string{k.rt.Containerd, k.rt.Ctr, k.rt.Shim} {
		if _, err := os.Stat(b); err != nil {
			return fmt.Errorf("%s is missing: run hack/setup-kubelet-deps.sh (and hack/setup-test-deps.sh for Debian's containerd): %w", b, err)
		}
	}
	for _, d := range []string{"cni-bin", "sysctl", "containerd/root", "containerd/state", "runc", "kubelet", "pod-logs", "certs"} {
		if err := os.MkdirAll(filepath.Join(k.dir, d), 0o755); err != nil {
			return err
		}
	}
	// The mount namespace: private, so that nothing mounted in it reaches the machine, and gone with its
	// last process.
	holder, err := c.reg.startProcess("mount namespace "+n.Name, filepath.Join(n.Dir, "mntns.log"), false,
		"unshare", "--mount", "--propagation", "private", "--", "sleep", "infinity")
	if err != nil {
		return err
	}
	k.holder = holder
	if err := waitFor(10*time.Second, 20*time.Millisecond, func() error {
		self, err := os.Readlink("/proc/self/ns/mnt")
		if err != nil {
			return err
		}
		other, err := os.Readlink(k.mountNS())
		if err != nil {
			return err
		}
		if other == self {
			return errors.New("unshare has not made the mount namespace yet")
		}
		return nil
	}); err != nil {
		return err
	}
	for name, value := range kubeletSysctls {
		file := filepath.Join(k.dir, "sysctl", strings.ReplaceAll(name, "/", "."))
		if err := os.WriteFile(file, []byte(value+"\n"), 0o644); err != nil {
			return err
		}
		if err := runCmd(k.nsenter("", "mount", "--bind", file, "/proc/sys/"+name)...); err != nil {
			return fmt.Errorf("overlaying sysctl %s in node %s's mount namespace: %w", name, n.Name, err)
		}
	}
	// kubelet keeps its device plugin socket in /var/lib/kubelet/device-plugins whatever its root
	// directory: a tmpfs of the node's own there, over an empty directory made if missing (and removed
	// at teardown when empty).
	if _, err := os.Stat(varLibKubelet); errors.Is(err, os.ErrNotExist) {
		if err := os.Mkdir(varLibKubelet, 0o755); err != nil {
			return err
		}
		if err := c.reg.appendLine(emptyDirsFile, varLibKubelet); err != nil {
			return err
		}
	}
	if err := runCmd(k.nsenter("", "mount", "-t", "tmpfs", "tmpfs", varLibKubelet)...); err != nil {
		return fmt.Errorf("mounting a tmpfs on %s in node %s's mount namespace: %w", varLibKubelet, n.Name, err)
	}
	if err := k.makeCgroups(c); err != nil {
		return err
	}
	// containerd runs winnet's shim (and the loopback plugin, which containerd's CRI always adds).
	shim, err := os.ReadFile(filepath.Join(n.shimDir, cni.PluginType))
	if err != nil {
		return fmt.Errorf("reading the CNI shim: %w", err)
	}
	if err := os.WriteFile(filepath.Join(k.dir, "cni-bin", cni.PluginType), shim, 0o755); err != nil {
		return err
	}
	if err := os.Symlink("/usr/lib/cni/loopback", filepath.Join(k.dir, "cni-bin", "loopback")); err != nil {
		return err
	}
	config := filepath.Join(k.dir, "containerd.toml")
	if err := os.WriteFile(config, []byte(k.containerdConfig(n)), 0o644); err != nil {
		return err
	}
	p, err := c.reg.startProcessWithEnv("containerd "+n.Name, filepath.Join(n.Dir, "containerd.log"),
		[]string{"PATH=" + filepath.Dir(k.rt.Shim) + ":" + os.Getenv("PATH")},
		k.nsenter(n.NSPath, k.rt.Containerd, "--config", config)...)
	if err != nil {
		return err
	}
	k.containerd = p
	// Into the node's runtime cgroup before it starts any shim: the shims and what they run stay there.
	if err := addToCgroups(k.cgroup+"/runtime", p.cmd.Process.Pid); err != nil {
		return err
	}
	if err := waitFor(30*time.Second, 50*time.Millisecond, func() error {
		if !p.running() {
			return fmt.Errorf("containerd exited: %s", p.logTail(20))
		}
		_, err := output(k.rt.Ctr, "--address", k.socket(), "version")
		return err
	}); err != nil {
		return fmt.Errorf("containerd of node %s: %w", n.Name, err)
	}
	images := filepath.Join(framework.RepoRoot(), "bin", "images-"+KubeVersion)
	tars, err := imageArchives(images)
	if err != nil {
		return err
	}
	for i := range tars {
		tars[i] = filepath.Join(images, tars[i])
	}
	for _, tar := range append(tars, c.opts.KubeletImages...) {
		if _, err := output(k.rt.Ctr, "--address", k.socket(), "-n", "k8s.io", "images", "import", tar); err != nil {
			return fmt.Errorf("importing %s into node %s's containerd (hack/setup-kubelet-deps.sh builds it): %w", tar, n.Name, err)
		}
	}
	return nil
}

// imageArchives lists the archives in dir's images.txt ("<image> <archive>" lines, and the recipe's
// "revision <n>"), which hack/setup-kubelet-deps.sh writes: pause and agnhost, and the stand-ins of the other
// images the upstream suites run.
func imageArchives(dir string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "images.txt"))
	if err != nil {
		return nil, fmt.Errorf("the test images (hack/setup-kubelet-deps.sh builds them): %w", err)
	}
	var tars []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 || f[0] == "revision" {
			continue
		}
		if f[1] != filepath.Base(f[1]) || !strings.HasSuffix(f[1], ".tar") {
			return nil, fmt.Errorf("%s: %q is not an archive in that directory", filepath.Join(dir, "images.txt"), f[1])
		}
		tars = append(tars, f[1])
	}
	for _, want := range []string{"pause.tar", "agnhost.tar"} {
		if !slices.Contains(tars, want) {
			return nil, fmt.Errorf("%s lists no %s: run hack/setup-kubelet-deps.sh", filepath.Join(dir, "images.txt"), want)
		}
	}
	return tars, nil
}

// KubeVersion is the version of the Kubernetes binaries and of the images' names.
const KubeVersion = "v1.37.0"

// containerdConfig is containerd's configuration: everything under the node's directory (state, root,
// runc's root, the Pods' network namespaces), winnet's conflist directory and shim, no pulls.
func (k *kubeletNode) containerdConfig(n *Node) string {
	cri := `plugins."io.containerd.grpc.v1.cri"`
	runtimes := cri + `.containerd.runtimes.runc`
	if k.rt.ConfigVersion == 3 {
		cri = `plugins."io.containerd.cri.v1.runtime"`
		runtimes = cri + `.containerd.runtimes.runc`
	}
	var b strings.Builder
	fmt.Fprintf(&b, "version = %d\nroot = %q\nstate = %q\n", k.rt.ConfigVersion, filepath.Join(k.dir, "containerd/root"), filepath.Join(k.dir, "containerd/state"))
	fmt.Fprintf(&b, "disabled_plugins = [\"io.containerd.snapshotter.v1.btrfs\", \"io.containerd.snapshotter.v1.zfs\", \"io.containerd.snapshotter.v1.aufs\", \"io.containerd.snapshotter.v1.devmapper\"]\n")
	fmt.Fprintf(&b, "[grpc]\n  address = %q\n[ttrpc]\n  address = %q\n", k.socket(), k.socket()+".ttrpc")
	fmt.Fprintf(&b, "[plugins.\"io.containerd.internal.v1.opt\"]\n  path = %q\n", filepath.Join(k.dir, "opt"))
	// Each node its own NRI socket (containerd 2.x enables NRI).
	if k.rt.ConfigVersion == 3 {
		fmt.Fprintf(&b, "[plugins.\"io.containerd.nri.v1.nri\"]\n  disable = true\n  socket_path = %q\n", filepath.Join(k.dir, "nri.sock"))
	}
	fmt.Fprintf(&b, "[%s]\n", cri)
	// root lacks CAP_SYS_RESOURCE here: without this every sandbox fails ("can't get final child's PID from pipe").
	fmt.Fprintf(&b, "  restrict_oom_score_adj = true\n  netns_mounts_under_state_dir = true\n")
	if k.rt.ConfigVersion == 3 {
		fmt.Fprintf(&b, "[plugins.\"io.containerd.cri.v1.images\".pinned_images]\n  sandbox = %q\n", KubeletImages.Pause)
		fmt.Fprintf(&b, "[plugins.\"io.containerd.grpc.v1.cri\"]\n  stream_server_address = \"127.0.0.1\"\n  stream_server_port = \"0\"\n")
	} else {
		fmt.Fprintf(&b, "  sandbox_image = %q\n  stream_server_address = \"127.0.0.1\"\n  stream_server_port = \"0\"\n", KubeletImages.Pause)
	}
	binDir := fmt.Sprintf("bin_dir = %q", filepath.Join(k.dir, "cni-bin"))
	if k.rt.ConfigVersion == 3 {
		binDir = fmt.Sprintf("bin_dirs = [%q]", filepath.Join(k.dir, "cni-bin"))
	}
	fmt.Fprintf(&b, "[%s.cni]\n  %s\n  conf_dir = %q\n  max_conf_num = 1\n", cri, binDir, n.CNIConfDir)
	fmt.Fprintf(&b, "[%s]\n  runtime_type = \"io.containerd.runc.v2\"\n", runtimes)
	fmt.Fprintf(&b, "[%s.options]\n  Root = %q\n  SystemdCgroup = false\n", runtimes, filepath.Join(k.dir, "runc"))
	return b.String()
}

// makeCgroups creates the node's cgroup in every hierarchy (cpuset's with its parent's CPUs and memory nodes)
// and its runtime child, recording them for teardown.
func (k *kubeletNode) makeCgroups(c *Cluster) error {
	if err := c.reg.appendLine(cgroupsFile, k.cgroup); err != nil {
		return err
	}
	for _, h := range cgroupHierarchies {
		for _, cg := range []string{k.cgroup, k.cgroup + "/runtime"} {
			dir := filepath.Join("/sys/fs/cgroup", h, cg)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("creating cgroup %s: %w", dir, err)
			}
			if h != "cpuset" {
				continue
			}
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(filepath.Dir(dir), f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
					return fmt.Errorf("writing %s of %s: %w", f, dir, err)
				}
			}
		}
	}
	return nil
}

// addToCgroups moves pid into the cgroup in every hierarchy.
func addToCgroups(cg string, pid int) error {
	for _, h := range cgroupHierarchies {
		f := filepath.Join("/sys/fs/cgroup", h, cg, "cgroup.procs")
		if err := os.WriteFile(f, []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return fmt.Errorf("moving pid %d into %s: %w", pid, f, err)
		}
	}
	return nil
}

// removeCgroups kills every process in the cgroup (and below) and removes it from every hierarchy.
func removeCgroups(cg string) error {
	var errs []error
	for attempt := 0; attempt < 50; attempt++ {
		pids := cgroupPids(filepath.Join("/sys/fs/cgroup", "pids", cg))
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, h := range cgroupHierarchies {
		root := filepath.Join("/sys/fs/cgroup", h, cg)
		var dirs []string
		_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- { // children first
			var err error
			for attempt := 0; attempt < 50; attempt++ {
				if err = syscall.Rmdir(dirs[i]); err == nil || errors.Is(err, syscall.ENOENT) {
					err = nil
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("removing cgroup %s: %w", dirs[i], err))
			}
		}
	}
	return errors.Join(errs...)
}

// cgroupPids lists the processes in dir and every cgroup below it.
func cgroupPids(dir string) []int {
	var pids []int
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		b, _ := os.ReadFile(filepath.Join(path, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
}

// startKubelet writes kubelet's configuration and kubeconfig and starts it in the node's namespaces.
func (k *kubeletNode) startKubelet(c *Cluster, n *Node) error {
	assets, err := framework.AssetsDir()
	if err != nil {
		return err
	}
	bin := filepath.Join(assets, "kubelet")
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("kubelet is missing in %s: run hack/setup-kubelet-deps.sh: %w", assets, err)
	}
	kubeconfig := filepath.Join(k.dir, "kubelet.kubeconfig")
	if err := c.writeNodeKubeconfig(kubeconfig); err != nil {
		return err
	}
	resolv := filepath.Join(k.dir, "resolv.conf")
	if err := os.WriteFile(resolv, []byte("nameserver "+c.ExternalIP.String()+"\n"), 0o644); err != nil {
		return err
	}
	config := filepath.Join(k.dir, "kubelet.yaml")
	if err := os.WriteFile(config, []byte(k.kubeletConfig(n, resolv)), 0o644); err != nil {
		return err
	}
	p, err := c.reg.startProcess("kubelet "+n.Name, filepath.Join(n.Dir, "kubelet.log"), false,
		k.nsenter(n.NSPath, bin, "--config", config, "--kubeconfig", kubeconfig, "--hostname-override", n.Name,
			"--node-ip", nodeIPs(n.IP, n.IPv6, n.ipv6First), "--root-dir", filepath.Join(k.dir, "kubelet"), "--cert-dir", filepath.Join(k.dir, "certs"), "--v=2")...)
	if err != nil {
		return err
	}
	k.kubelet = p
	return nil
}

// kubeletConfig is kubelet's configuration file. kubelet serves on every address of the node's namespace:
// bound to the node IP, it fails to start when the agent is moving that address from the uplink to the
// bridge (as HNS moves it to the management vNIC), and a kubelet that exited is not started again here.
func (k *kubeletNode) kubeletConfig(n *Node, resolv string) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: %s
containerRuntimeEndpoint: unix://%s
podLogsDir: %s
address: 0.0.0.0
port: 10250
healthzPort: 0
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
clusterDNS: [%s]
clusterDomain: %s
resolvConf: %s
protectKernelDefaults: true
failSwapOn: false
registerNode: true
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "1%%"
  imagefs.available: "1%%"
  nodefs.inodesFree: "1%%"
localStorageCapacityIsolation: false
serializeImagePulls: false
`, k.cgroup, k.socket(), filepath.Join(k.dir, "pod-logs"), DNSServiceIP, ClusterDomain, resolv)
}

// writeNodeKubeconfig writes the admin kubeconfig with the API server reached through the API host's relay
// on the underlay, as the nodes reach it (its serving certificate names localhost).
func (c *Cluster) writeNodeKubeconfig(path string) error {
	cfg, err := clientcmd.LoadFromFile(c.Kubeconfig)
	if err != nil {
		return fmt.Errorf("reading the kubeconfig: %w", err)
	}
	for _, cl := range cfg.Clusters {
		cl.Server = fmt.Sprintf("https://%s:%d", c.APIHost.IP.Addr(), c.APIServerPort)
		cl.TLSServerName = "localhost"
	}
	return clientcmd.WriteToFile(*cfg, path)
}

// stopKubelet stops kubelet, containerd and everything they started, and the mount namespace.
func (k *kubeletNode) stop() error {
	var errs []error
	for _, p := range []*process{k.kubelet, k.containerd} {
		if p != nil {
			errs = append(errs, p.stop(syscall.SIGTERM, 10*time.Second))
		}
	}
	errs = append(errs, removeCgroups(k.cgroup))
	if k.holder != nil {
		errs = append(errs, k.holder.stop(syscall.SIGKILL, 10*time.Second))
	}
	return errors.Join(errs...)
}

// KubeletLogTail returns the last lines of the node's kubelet and containerd logs.
func (n *Node) KubeletLogTail(lines int) string {
	if n.kubelet == nil {
		return ""
	}
	return "kubelet:\n" + grepTail(filepath.Join(n.Dir, "kubelet.log"), lines, "eviction_manager", "cri_stats_provider") +
		"\ncontainerd:\n" + grepTail(filepath.Join(n.Dir, "containerd.log"), lines, "level=info")
}

// grepTail is the last lines of the file without those containing any of skip.
func grepTail(path string, lines int, skip ...string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	var keep []string
	for _, l := range strings.Split(string(b), "\n") {
		drop := false
		for _, s := range skip {
			drop = drop || strings.Contains(l, s)
		}
		if !drop {
			keep = append(keep, l)
		}
	}
	if len(keep) > lines {
		keep = keep[len(keep)-lines:]
	}
	return strings.Join(keep, "\n")
}

// HasKubelet reports whether the node runs a real kubelet.
func (n *Node) HasKubelet() bool { return n.kubelet != nil }

// startEgressProxy serves the API server's egress to the cluster (kubelets: exec, logs, port-forward; the
// proxy subresources) as an HTTP CONNECT proxy on a unix socket, dialing from the API host's namespace on the
// underlay: the API server runs in the harness's namespace, which has no route to the nodes.
func (c *Cluster) startEgressProxy() error {
	path := filepath.Join(c.RunDir, "egress.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("listening for the API server's egress: %w", err)
	}
	c.egress = l
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go c.connect(conn)
		}
	}()
	return nil
}

// egressConfig writes the API server's egress selector configuration: cluster traffic through the proxy.
func (c *Cluster) egressConfig() (string, error) {
	path := filepath.Join(c.RunDir, "egress-selector.yaml")
	conf := fmt.Sprintf(`apiVersion: apiserver.k8s.io/v1beta1
kind: EgressSelectorConfiguration
egressSelections:
- name: cluster
  connection:
    proxyProtocol: HTTPConnect
    transport:
      uds:
        udsName: %s
`, filepath.Join(c.RunDir, "egress.sock"))
	return path, os.WriteFile(path, []byte(conf), 0o644)
}

// connect serves one CONNECT request.
func (c *Cluster) connect(conn net.Conn) {
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	if req.Method != http.MethodConnect {
		_, _ = io.WriteString(conn, "HTTP/1.1 405 Method Not Allowed\r\n\r\n")
		return
	}
	var up net.Conn
	err = ns.WithNetNSPath(c.APIHost.NSPath, func(ns.NetNS) error {
		var err error
		up, err = net.DialTimeout("tcp", req.RequestURI, 5*time.Second)
		return err
	})
	if err != nil {
		_, _ = io.WriteString(conn, "HTTP/1.1 502 Bad Gateway\r\n\r\n")
		return
	}
	defer up.Close()
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	_ = conn.SetDeadline(time.Time{})
	if n := br.Buffered(); n > 0 {
		if _, err := io.CopyN(up, br, int64(n)); err != nil {
			return
		}
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(up, conn)
	go pipe(conn, up)
	<-done
	<-done
}

// startScheduler starts kube-scheduler (admin kubeconfig, no serving port, no leader election).
func (c *Cluster) startScheduler() error {
	assets, err := framework.AssetsDir()
	if err != nil {
		return err
	}
	bin := filepath.Join(assets, "kube-scheduler")
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("kube-scheduler is missing in %s: run hack/setup-kubelet-deps.sh: %w", assets, err)
	}
	c.logf("Starting kube-scheduler")
	p, err := c.reg.startProcess("kube-scheduler", filepath.Join(c.RunDir, "kube-scheduler.log"), false,
		bin, "--kubeconfig", c.Kubeconfig, "--leader-elect=false", "--secure-port=0")
	if err != nil {
		return err
	}
	c.scheduler = p
	return nil
}

// runCmd runs a command, failing with its output.
func runCmd(args ...string) error {
	_, err := output(args[0], args[1:]...)
	return err
}

func output(name string, args ...string) (string, error) {
	out, err := hostcmd.Command(name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}
