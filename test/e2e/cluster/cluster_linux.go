//go:build linux

package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/winnet-io/winnet/internal/ovs/ovstest"
	"github.com/winnet-io/winnet/test/framework"
	"github.com/winnet-io/winnet/test/hostcmd"
	"github.com/winnet-io/winnet/test/simnode"
)

// RunRoot is where the run directories of test clusters live: RunRoot/<prefix>.
const RunRoot = "/tmp/winnet-e2e"

// testPrefixRE matches the prefixes Start picks when Options.Prefix is empty.
var testPrefixRE = regexp.MustCompile(`^wne[0-9a-f]{4}$`)

// Options configure a cluster.
type Options struct {
	// Prefix starts the name of every namespace of the run; empty picks "wne" and 4 random hex digits.
	// [a-z0-9], at most 8 bytes.
	Prefix string
	// RunDir holds the run's records (owner, pids, directories), logs, kubeconfig and per-node state.
	// Empty: RunRoot/<prefix>.
	RunDir string
	// BinDir holds winnet-agent, winnet-controller and winnet-cni. Empty: Release's.
	BinDir string
	// Release is the release every component starts with: its CRDs, chart objects and binaries. Empty:
	// this tree's (CurrentRelease), with BinDir's binaries when BinDir is set.
	Release Release
	// UnderlayCIDR is the nodes' subnet; the bridge holds its first address, the external host the last
	// (and the one before, ExcludedIP). Default 192.168.77.0/24.
	UnderlayCIDR netip.Prefix
	// ClusterCIDR contains every node's Pod CIDR. Default 10.244.0.0/16.
	ClusterCIDR netip.Prefix
	// Logf receives progress messages; nil discards them.
	Logf func(format string, args ...any)
	// ControllerArgs are added to winnet-controller's command line.
	ControllerArgs []string
	// Kubelets prepares the cluster for nodes with a real kubelet (AddKubeletNode): kube-scheduler, the
	// controllers Pods need, and the API server's way to the kubelets (exec, logs) over the underlay.
	Kubelets bool
	// KubeletImages are more image archives (paths) every node with a real kubelet imports, beside the
	// ones bin/images-<version>/images.txt lists (a suite's own images, say).
	KubeletImages []string
	// APIServerArgs are kube-apiserver flags (name without dashes -> value) set over the harness's
	// (an audit policy, say).
	APIServerArgs map[string]string
	// ControllerManagerArgs are added to kube-controller-manager's command line.
	ControllerManagerArgs []string
	// EtcdArgs are etcd flags (name without dashes -> value) set over envtest's defaults (a larger
	// --quota-backend-bytes for a cluster of many objects, say).
	EtcdArgs map[string]string
	// ControllerServiceAccount runs winnet-controller with the credentials the chart gives it (its
	// ServiceAccount, ClusterRole and Role, rendered by ApplyChart; a token of the ServiceAccount)
	// instead of the admin's: its requests carry its own user, which an audit policy can single
	// out, and what its role lacks fails as in an install. Otherwise it runs as the admin.
	ControllerServiceAccount bool
	// DualStack makes the cluster dual-stack, IPv4 first (see ServiceCIDRv6): the API server and
	// kube-controller-manager have an IPv6 Service CIDR and cluster CIDR beside the IPv4 ones, every host on
	// the underlay an IPv6 address too, every Node (winnet's, flannel's, with a real kubelet or not) an IPv6
	// Pod CIDR and InternalIP beside its IPv4 ones, and the WindowsNodeNetworks the harness writes both
	// families of Pod, cluster and Service CIDRs. winnet's nodes realise the IPv4 ones. It needs a /24
	// underlay and a /16 cluster CIDR, and /24 Pod CIDRs.
	DualStack bool
	// AgentReadiness makes every agent serve /healthz and /readyz on a free port of the loopback
	// (Node.AgentReady), as a DaemonSet's probes ask them; otherwise the agents serve no probe (a port
	// picked free may be taken again before the agent binds it).
	AgentReadiness bool
}

// Cluster is a running cluster. Its methods are safe for concurrent use unless they say otherwise.
type Cluster struct {
	Prefix string
	RunDir string
	BinDir string
	// Client is a client of the API server with winnet's types; Config is its configuration.
	Client client.Client
	Config *rest.Config
	// Kubeconfig is an admin kubeconfig for kubectl (RunDir/kubeconfig).
	Kubeconfig string
	// Kubectl is the kubectl built with the API server.
	Kubectl string
	// UnderlayNS is the namespace of the underlay bridge.
	UnderlayNS   string
	UnderlayCIDR netip.Prefix
	// UnderlayGateway is the bridge's address, the default gateway of every host on the underlay.
	UnderlayGateway netip.Addr
	ClusterCIDR     netip.Prefix
	// ClusterCIDRv6 is the cluster's IPv6 cluster CIDR (Options.DualStack); the zero Prefix otherwise.
	ClusterCIDRv6 netip.Prefix
	// External is the external host. It answers on ExternalIP (SNATed Pod traffic) and on ExcludedIP (a
	// destination every node excludes from SNAT), and routes every Pod CIDR to its node.
	External   *Host
	ExternalIP netip.Addr
	ExcludedIP netip.Addr
	// APIHost is the API server's host on the underlay (the second address): the kubernetes Service's
	// endpoint is APIHost's address and APIServerPort.
	APIHost       *Host
	APIServerPort int
	// CAFile holds the cluster's CA certificate (the API server's serving certificate is signed by it).
	CAFile string

	opts              Options
	reg               *registry
	api               *framework.APIServer
	relay             net.Listener
	controller        *process
	controllerRelease Release
	controllerManager *process
	// scheduler and egress: clusters with Options.Kubelets (kube-scheduler, the API server's egress proxy).
	scheduler  *process
	egress     net.Listener
	stopLeases chan struct{}
	dns        *process

	mu           sync.Mutex
	nodes        map[string]*Node
	flannelNodes []*FlannelNode
	// routesToFlannel: winnet-controller writes a route to every flannel node (its flannel interop is on).
	routesToFlannel bool
	pods            map[string]*Pod
	ports           int
}

// Start builds the cluster's shared parts: the run directory, the underlay with the external host and the API
// server's host, the API server with winnet's CRDs, kube-controller-manager and winnet-controller; it keeps
// the Nodes' Leases renewed from then on, as kubelet does. Leftovers of dead earlier runs under RunRoot are removed
// first. On error everything built so far is torn down.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	if err := checkPrerequisites(); err != nil {
		return nil, err
	}
	if err := Sweep(); err != nil {
		return nil, fmt.Errorf("removing leftovers of earlier runs: %w", err)
	}
	c, err = newCluster(opts)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Close())
		}
	}()
	if err := c.startUnderlay(); err != nil {
		return c, fmt.Errorf("building the underlay: %w", err)
	}
	if err := c.startAPIHost(); err != nil {
		return c, fmt.Errorf("plugging the API server's host into the underlay: %w", err)
	}
	if c.opts.Kubelets {
		if err := c.startEgressProxy(); err != nil {
			return c, err
		}
	}
	if err := c.startAPIServer(); err != nil {
		return c, err
	}
	if err := c.startAPIRelay(); err != nil {
		return c, err
	}
	if err := c.ApplyChart(ctx, c.opts.Release); err != nil {
		return c, err
	}
	if err := c.startControllerManager(); err != nil {
		return c, err
	}
	if c.opts.Kubelets {
		if err := c.startScheduler(); err != nil {
			return c, err
		}
	}
	c.stopLeases = make(chan struct{})
	go c.renewLeases(c.stopLeases)
	if err := c.startController(); err != nil {
		return c, err
	}
	if err := c.checkAgentFlags(); err != nil {
		return c, err
	}
	return c, nil
}

func newCluster(opts Options) (*Cluster, error) {
	if opts.Prefix == "" {
		b := make([]byte, 2)
		_, _ = rand.Read(b)
		opts.Prefix = "wne" + hex.EncodeToString(b)
	}
	if !regexp.MustCompile(`^[a-z0-9]{1,8}$`).MatchString(opts.Prefix) {
		return nil, fmt.Errorf("prefix %q must be [a-z0-9], 1 to 8 bytes", opts.Prefix)
	}
	if opts.RunDir == "" {
		opts.RunDir = filepath.Join(RunRoot, opts.Prefix)
	}
	if opts.Release.BinDir == "" {
		opts.Release = CurrentRelease()
	}
	if opts.BinDir != "" {
		opts.Release.BinDir = opts.BinDir
	}
	opts.BinDir = opts.Release.BinDir
	if !opts.UnderlayCIDR.IsValid() {
		opts.UnderlayCIDR = netip.MustParsePrefix("192.168.77.0/24")
	}
	if !opts.ClusterCIDR.IsValid() {
		opts.ClusterCIDR = netip.MustParsePrefix("10.244.0.0/16")
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if opts.DualStack {
		if err := checkDualStack(opts); err != nil {
			return nil, err
		}
	}
	for _, b := range []string{"winnet-agent", "winnet-controller", "winnet-cni"} {
		if _, err := os.Stat(filepath.Join(opts.BinDir, b)); err != nil {
			return nil, fmt.Errorf("%s is missing in %s: run 'make build': %w", b, opts.BinDir, err)
		}
	}
	if entries, _ := os.ReadDir(opts.RunDir); len(entries) > 0 {
		return nil, fmt.Errorf("run directory %s is in use: tear the earlier run down first", opts.RunDir)
	}
	if err := os.MkdirAll(opts.RunDir, 0o755); err != nil {
		return nil, fmt.Errorf("creating the run directory: %w", err)
	}
	c := &Cluster{
		Prefix: opts.Prefix, RunDir: opts.RunDir, BinDir: opts.BinDir,
		UnderlayNS: opts.Prefix + "-u", UnderlayCIDR: opts.UnderlayCIDR.Masked(), ClusterCIDR: opts.ClusterCIDR.Masked(),
		opts: opts, reg: &registry{dir: opts.RunDir}, nodes: map[string]*Node{}, pods: map[string]*Pod{},
		controllerRelease: opts.Release,
	}
	c.UnderlayGateway = c.UnderlayCIDR.Addr().Next()
	if opts.DualStack {
		b := c.ClusterCIDR.Addr().As4()
		c.ClusterCIDRv6 = mirrorV6(48, b[0], b[1])
		opts.Logf("Dual-stack: IPv6 cluster CIDR %s beside %s", c.ClusterCIDRv6, c.ClusterCIDR)
	}
	c.ExternalIP = lastHost(c.UnderlayCIDR)
	c.ExcludedIP = c.ExternalIP.Prev()
	for file, content := range map[string]string{ownerFile: strconv.Itoa(os.Getpid()), prefixFile: c.Prefix} {
		if err := os.WriteFile(filepath.Join(c.RunDir, file), []byte(content+"\n"), 0o644); err != nil {
			return nil, fmt.Errorf("writing the run record: %w", err)
		}
	}
	return c, nil
}

func checkPrerequisites() error {
	if err := simnode.CheckPrerequisites(); err != nil {
		return fmt.Errorf("cannot build simulated nodes: %w; run hack/setup-test-deps.sh as root", err)
	}
	if err := ovstest.CheckPrerequisites(); err != nil {
		return fmt.Errorf("cannot start Open vSwitch: %w; run hack/setup-test-deps.sh", err)
	}
	return nil
}

// lastHost returns the last host address of p (.254 in a /24).
func lastHost(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v = v | (uint32(1)<<(32-p.Bits()) - 1) - 1 // the broadcast address less one
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

func (c *Cluster) logf(format string, args ...any) { c.opts.Logf(format, args...) }

// nextPort returns the name of a new port of the underlay bridge.
func (c *Cluster) nextPort() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ports++
	return "p" + strconv.Itoa(c.ports)
}

func (c *Cluster) startUnderlay() error {
	c.logf("Building the underlay %s (%s) and the external host", c.UnderlayNS, c.UnderlayCIDR)
	if err := newUnderlay(c.UnderlayNS, c.UnderlayCIDR, c.UnderlayGateway); err != nil {
		return err
	}
	if err := c.addUnderlayV6(c.UnderlayNS, underlayBridge, c.UnderlayGateway); err != nil {
		return err
	}
	bits := c.UnderlayCIDR.Bits()
	ext := &Host{Name: "external", NS: c.Prefix + "-ext", IP: netip.PrefixFrom(c.ExternalIP, bits)}
	ext.NSPath = nsPath(ext.NS)
	if err := addNS(ext.NS); err != nil {
		return err
	}
	if err := plug(c.UnderlayNS, ext.NS, hostIfName, c.nextPort(), ext.IP, c.UnderlayGateway); err != nil {
		return err
	}
	if err := run(ext.NS, []string{"ip", "addr", "add", netip.PrefixFrom(c.ExcludedIP, bits).String(), "dev", hostIfName}); err != nil {
		return err
	}
	if err := c.addUnderlayV6(ext.NS, hostIfName, c.ExternalIP); err != nil {
		return err
	}
	if err := simnode.DisableTxChecksum(ext.NS, hostIfName); err != nil {
		return err
	}
	c.External = ext
	return nil
}

func (c *Cluster) startAPIServer() error {
	c.logf("Starting kube-apiserver and etcd")
	args, err := c.apiServerArgs()
	if err != nil {
		return err
	}
	api, err := framework.StartAPIServerWith(framework.APIServerOptions{Args: args, CRDDir: c.opts.Release.CRDDir, EtcdArgs: c.opts.EtcdArgs})
	if err != nil {
		return fmt.Errorf("starting the API server: %w", err)
	}
	c.api, c.Client, c.Config, c.Kubectl = api, api.Client, api.Config, api.Kubectl
	for pid, name := range childPids("etcd", "kube-apiserver") {
		if err := c.reg.recordPid(pid, name); err != nil {
			return err
		}
	}
	cp := api.Env.ControlPlane
	for _, d := range []string{cp.APIServer.CertDir, cp.Etcd.DataDir, api.KubeconfigPath} {
		if err := c.reg.recordDir(d); err != nil {
			return err
		}
	}
	kubeconfig, err := os.ReadFile(api.KubeconfigPath)
	if err != nil {
		return fmt.Errorf("reading the kubeconfig: %w", err)
	}
	c.Kubeconfig = filepath.Join(c.RunDir, "kubeconfig")
	if err := os.WriteFile(c.Kubeconfig, kubeconfig, 0o600); err != nil {
		return fmt.Errorf("writing the kubeconfig: %w", err)
	}
	c.CAFile = filepath.Join(c.RunDir, "ca.crt")
	if err := os.WriteFile(c.CAFile, api.Config.CAData, 0o644); err != nil {
		return fmt.Errorf("writing the cluster's CA certificate: %w", err)
	}
	return nil
}

func (c *Cluster) startController() error {
	c.logf("Starting winnet-controller %s %v", c.controllerRelease, c.opts.ControllerArgs)
	bin := filepath.Join(c.controllerRelease.BinDir, "winnet-controller")
	kubeconfig := c.Kubeconfig
	var own []string
	if c.opts.ControllerServiceAccount {
		var err error
		if kubeconfig, err = c.writeControllerKubeconfig(context.Background()); err != nil {
			return err
		}
		// Its Role (Leases, the uninstall signal) is in the release namespace.
		own = []string{"--leader-election-namespace", AgentNamespace}
	}
	args := []string{bin, "--kubeconfig", kubeconfig, "--leader-elect=false",
		"--health-probe-bind-address", "0", "--metrics-bind-address", "0",
		"--cluster-cidrs", c.clusterCIDRs()}
	args = append(args, own...)
	// The chart's PacketTrace tenancy policy is installed (ApplyChart) and the chart passes this flag,
	// since the release that has it.
	if has, err := hasFlag(bin, "packettrace-admission-checked"); err != nil {
		return err
	} else if has {
		args = append(args, "--packettrace-admission-checked")
	}
	p, err := c.reg.startProcess("winnet-controller", filepath.Join(c.RunDir, "winnet-controller.log"), false,
		append(args, c.opts.ControllerArgs...)...)
	if err != nil {
		return err
	}
	c.controller = p
	return nil
}

// ControllerPID is the pid of the running winnet-controller process, 0 when none runs.
func (c *Cluster) ControllerPID() int {
	if c.controller == nil || !c.controller.running() {
		return 0
	}
	return c.controller.cmd.Process.Pid
}

// RestartController stops winnet-controller and starts it again with args added to its command line instead of
// Options.ControllerArgs.
func (c *Cluster) RestartController(args ...string) error {
	if c.controller != nil {
		if err := c.controller.stop(syscall.SIGTERM, 10*time.Second); err != nil {
			return err
		}
	}
	c.opts.ControllerArgs = args
	return c.startController()
}

// hasFlag reports whether the binary's usage lists the flag.
func hasFlag(bin, flag string) (bool, error) {
	out, err := hostcmd.Command(bin, "--help").CombinedOutput()
	if err != nil && !strings.Contains(string(out), "Usage") {
		return false, fmt.Errorf("%s --help: %w: %s", bin, err, out)
	}
	return strings.Contains(string(out), "-"+flag+" ") || strings.Contains(string(out), "-"+flag+"\n"), nil
}

// agentFlagsNeeded are the agent flags the harness passes for the CNI server and per-node state (see the
// contract with the CNI server): an agent without one of them cannot run the tests' Pods, so Start fails.
var agentFlagsNeeded = []string{"state-dir", "cni-socket", "cni-conf-dir"}

// checkAgentFlags fails unless the agent binary has every flag of agentFlagsNeeded in its usage.
func (c *Cluster) checkAgentFlags() error {
	out, err := hostcmd.Command(filepath.Join(c.BinDir, "winnet-agent"), "--help").CombinedOutput()
	if err != nil {
		return fmt.Errorf("winnet-agent --help: %w: %s", err, out)
	}
	var missing []string
	for _, f := range agentFlagsNeeded {
		if !strings.Contains(string(out), "-"+f+" ") {
			missing = append(missing, "--"+f)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s has no %s flag: the harness needs them for Pods; run 'make build'",
			filepath.Join(c.BinDir, "winnet-agent"), strings.Join(missing, ", "))
	}
	return nil
}

// Node returns the node of this name, nil when there is none.
func (c *Cluster) Node(name string) *Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[name]
}

// Nodes returns the nodes sorted by name.
func (c *Cluster) Nodes() []*Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	nodes := make([]*Node, 0, len(c.nodes))
	for _, n := range c.nodes {
		nodes = append(nodes, n)
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	return nodes
}

// LogTails returns the last lines of the logs of winnet-controller and every agent, for a failed test.
func (c *Cluster) LogTails(lines int) string {
	var b strings.Builder
	for _, p := range []*process{c.controller, c.controllerManager, c.dns} {
		if p != nil {
			fmt.Fprintf(&b, "--- %s:\n%s\n", p.name, p.logTail(lines))
		}
	}
	for _, n := range c.Nodes() {
		if n.agent != nil {
			fmt.Fprintf(&b, "--- winnet-agent of %s:\n%s\n", n.Name, n.agent.logTail(lines))
		}
	}
	return b.String()
}

// Close stops everything the cluster started and removes what it created: Pods, agents, Open vSwitch
// instances, winnet-controller, the API server, namespaces and the run directory.
func (c *Cluster) Close() error {
	var errs []error
	for _, n := range c.Nodes() {
		errs = append(errs, n.stop())
	}
	for _, n := range c.FlannelNodes() {
		errs = append(errs, n.stop())
	}
	if c.controller != nil {
		errs = append(errs, c.controller.stop(syscall.SIGTERM, 10*time.Second))
	}
	errs = append(errs, c.stopControlPlaneExtras())
	if c.api != nil {
		errs = append(errs, c.api.Stop())
	}
	errs = append(errs, Teardown(c.RunDir))
	return errors.Join(errs...)
}

// Teardown removes a run by its run directory, whether or not the process that built it still runs: it kills
// the recorded processes (by pid, checking the program name), kills the processes inside the run's namespaces
// and deletes them, removes the recorded directories and the run directory.
func Teardown(runDir string) error {
	prefix, err := os.ReadFile(filepath.Join(runDir, prefixFile))
	if errors.Is(err, os.ErrNotExist) {
		return os.RemoveAll(runDir)
	}
	if err != nil {
		return fmt.Errorf("reading the prefix of run %s: %w", runDir, err)
	}
	killRecorded(runDir)
	var errs []error
	// The cgroups of nodes with a real kubelet: what containerd's shims run is in them, not recorded.
	if cgroups, err := os.ReadFile(filepath.Join(runDir, cgroupsFile)); err == nil {
		for _, cg := range strings.Fields(string(cgroups)) {
			errs = append(errs, removeCgroups(cg))
		}
	}
	if dirs, err := os.ReadFile(filepath.Join(runDir, emptyDirsFile)); err == nil {
		for _, d := range strings.Fields(string(dirs)) {
			_ = os.Remove(d) // only when empty: another run may use it still
		}
	}
	errs = append(errs, deleteNamespaces(strings.TrimSpace(string(prefix))))
	if dirs, err := os.ReadFile(filepath.Join(runDir, dirsFile)); err == nil {
		for _, d := range strings.Fields(string(dirs)) {
			errs = append(errs, os.RemoveAll(d))
		}
	}
	errs = append(errs, os.RemoveAll(runDir))
	return errors.Join(errs...)
}

// deleteNamespaces deletes every namespace named <prefix>-*.
func deleteNamespaces(prefix string) error {
	entries, _ := os.ReadDir("/run/netns")
	var errs []error
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix+"-") {
			errs = append(errs, deleteNS(e.Name()))
		}
	}
	return errors.Join(errs...)
}

// Sweep removes the leftovers of test runs whose process is gone (killed by a timeout, say): their run
// directories under RunRoot with everything recorded there, and namespaces of the test prefix scheme that no
// live run owns. Runs whose owner still runs are left alone, so concurrent runs do not disturb each other.
func Sweep() error {
	live := map[string]bool{}
	entries, _ := os.ReadDir(RunRoot)
	var errs []error
	for _, e := range entries {
		dir := filepath.Join(RunRoot, e.Name())
		if runAlive(dir) {
			live[e.Name()] = true
			continue
		}
		errs = append(errs, Teardown(dir))
	}
	nsEntries, _ := os.ReadDir("/run/netns")
	for _, e := range nsEntries {
		prefix, _, ok := strings.Cut(e.Name(), "-")
		if ok && testPrefixRE.MatchString(prefix) && !live[prefix] {
			errs = append(errs, deleteNS(e.Name()))
		}
	}
	return errors.Join(errs...)
}

// runAlive reports whether the run in dir may still be in use: its owner runs, or it has no owner record yet
// and was created less than a minute ago (a run being set up).
func runAlive(dir string) bool {
	owner, err := os.ReadFile(filepath.Join(dir, ownerFile))
	if errors.Is(err, os.ErrNotExist) {
		info, err := os.Stat(dir)
		return err == nil && time.Since(info.ModTime()) < time.Minute
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(owner)))
	return err == nil && pid > 0 && processAlive(pid, "")
}
