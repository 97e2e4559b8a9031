//go:build linux

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	networkv1alpha1 "github.com/winnet-io/winnet/api/v1alpha1"
	"github.com/winnet-io/winnet/internal/auditlog"
	"github.com/winnet-io/winnet/test/e2e/cluster"
	"github.com/winnet-io/winnet/test/hostcmd"
)

// Files in the demo directory.
const (
	pidFile    = "demo.pid"         // the serving process
	readyFile  = "ready"            // written once the cluster is up: its content is printed by up
	logFile    = "demo.log"         // the serving process's output
	runSubdir  = "run"              // the cluster's run directory
	kubeconfig = "kubeconfig"       // an admin kubeconfig for kubectl
	addedFile  = "add-endpoint.out" // what serve reports after adding an endpoint Pod (add-endpoint)
	prefix     = "wndemo"           // the prefix of the demo's namespaces
)

const usage = `Usage: winnet-demo up|down|serve|add-endpoint --dir DIR

  up     take down a demo still running from DIR, start a new one in the background, wait until it
         is up and print what it shows and what to try
  down   stop the demo running from DIR and remove everything it created
  serve  (run by up, detached) build the cluster, write DIR/ready, keep it running until SIGTERM
  add-endpoint  have the running demo add an endpoint Pod to the Service web and print what changed
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	fs := flag.NewFlagSet("winnet-demo", flag.ExitOnError)
	dir := fs.String("dir", "bin/demo", "directory of the demo's state, logs and kubeconfig")
	_ = fs.Parse(os.Args[2:])
	abs, err := filepath.Abs(*dir)
	if err == nil {
		switch os.Args[1] {
		case "up":
			err = up(abs)
		case "down":
			err = down(abs)
		case "serve":
			err = serve(abs)
		case "add-endpoint":
			err = addEndpoint(abs)
		default:
			fmt.Fprint(os.Stderr, usage)
			os.Exit(2)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "winnet-demo:", err)
		os.Exit(1)
	}
}

// up takes an earlier demo down, starts serve detached and prints the status it writes.
func up(dir string) error {
	if os.Geteuid() != 0 {
		return errors.New("the demo builds network namespaces and Open vSwitch instances: run it as root")
	}
	if _, err := os.Stat(filepath.Join(dir, pidFile)); err == nil {
		fmt.Println("A demo is still running from", dir, "- taking it down first")
		if err := down(dir); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	log, err := os.Create(filepath.Join(dir, logFile))
	if err != nil {
		return err
	}
	defer log.Close()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := hostcmd.Command(self, "serve", "--dir", dir)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // outlives this command and its terminal
	fmt.Println("Starting the demo cluster (API server, winnet-controller, two winnet nodes with two Pods each, the flannel node linux-a with one, an Egress); log:", log.Name())
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the demo: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		select {
		case err := <-exited:
			return fmt.Errorf("the demo stopped (%v); last lines of %s:\n%s", err, log.Name(), tail(log.Name(), 30))
		default:
		}
		if status, err := os.ReadFile(filepath.Join(dir, readyFile)); err == nil {
			fmt.Print(string(status))
			return nil
		}
	}
	return fmt.Errorf("the demo did not come up within 3 minutes; see %s", log.Name())
}

// down stops the serving process (which tears the cluster down) and removes whatever is left.
func down(dir string) error {
	if b, err := os.ReadFile(filepath.Join(dir, pidFile)); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && isDemo(pid) {
			fmt.Printf("Stopping the demo (pid %d)\n", pid)
			_ = syscall.Kill(pid, syscall.SIGTERM)
			for deadline := time.Now().Add(90 * time.Second); isDemo(pid) && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			}
			if isDemo(pid) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	err := cluster.Teardown(filepath.Join(dir, runSubdir))
	for _, f := range []string{pidFile, readyFile, kubeconfig, logFile} {
		err = errors.Join(err, removeIfExists(filepath.Join(dir, f)))
	}
	if err != nil {
		return fmt.Errorf("removing the demo: %w", err)
	}
	fmt.Println("The demo is gone: processes, namespaces, Open vSwitch instances and state under", dir)
	return nil
}

func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// isDemo reports whether pid runs this program's serve command.
func isDemo(pid int) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && strings.Contains(string(cmdline), "serve")
}

// serve builds the cluster, writes the status and keeps the cluster until SIGTERM or SIGINT.
func serve(dir string) error {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := os.WriteFile(filepath.Join(dir, pidFile), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return err
	}
	c, err := cluster.Start(ctx, cluster.Options{
		Prefix: prefix, RunDir: filepath.Join(dir, runSubdir),
		Logf: func(f string, a ...any) { fmt.Printf(f+"\n", a...) },
	})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("Tearing the demo down")
		if err := c.Close(); err != nil {
			fmt.Println("Tearing down:", err)
		}
	}()
	status, services, pods, err := build(ctx, c, dir)
	if err != nil {
		return fmt.Errorf("%w\n%s", err, c.LogTails(30))
	}
	if err := os.WriteFile(filepath.Join(dir, readyFile), []byte(status), 0o644); err != nil {
		return err
	}
	fmt.Print(status)
	// add-endpoint asks with SIGUSR1.
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-usr1:
			report, err := services.addEndpoint(ctx, pods)
			if err != nil {
				report = "adding an endpoint Pod failed: " + err.Error() + "\n"
			}
			fmt.Print(report)
			tmp := filepath.Join(dir, addedFile+".tmp")
			if err := os.WriteFile(tmp, []byte(report), 0o644); err != nil {
				return err
			}
			if err := os.Rename(tmp, filepath.Join(dir, addedFile)); err != nil {
				return err
			}
		}
	}
}

// addEndpoint signals the running demo to add an endpoint Pod to the Service web and prints its report.
func addEndpoint(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, pidFile))
	if err != nil {
		return fmt.Errorf("no demo runs from %s: %w", dir, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || !isDemo(pid) {
		return fmt.Errorf("no demo runs from %s (pid file %q)", dir, strings.TrimSpace(string(b)))
	}
	out := filepath.Join(dir, addedFile)
	if err := removeIfExists(out); err != nil {
		return err
	}
	fmt.Println("Adding an endpoint Pod to the Service web (the demo's log:", filepath.Join(dir, logFile)+")")
	if err := syscall.Kill(pid, syscall.SIGUSR1); err != nil {
		return err
	}
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if report, err := os.ReadFile(out); err == nil {
			fmt.Print(string(report))
			return nil
		}
	}
	return fmt.Errorf("the demo did not report within 2 minutes; see %s", filepath.Join(dir, logFile))
}

// build adds the nodes and Pods, the cluster DNS and a Service, probes the data plane and returns what up
// prints.
func build(ctx context.Context, c *cluster.Cluster, dir string) (string, *servicesDemo, map[string]*cluster.Pod, error) {
	specs := []cluster.NodeSpec{
		{Name: "node-a", IP: netip.MustParseAddr("192.168.77.11"), PodCIDR: netip.MustParsePrefix("10.244.1.0/24")},
		{Name: "node-b", IP: netip.MustParseAddr("192.168.77.12"), PodCIDR: netip.MustParsePrefix("10.244.2.0/24")},
	}
	for _, s := range specs {
		if _, err := c.AddNode(ctx, s); err != nil {
			return "", nil, nil, err
		}
	}
	if err := c.WaitReady(ctx, time.Minute); err != nil {
		return "", nil, nil, err
	}
	a, b := c.Node("node-a"), c.Node("node-b")
	pods := map[string]*cluster.Pod{}
	for _, p := range [][2]string{{"pod-a1", "node-a"}, {"pod-a2", "node-a"}, {"pod-b1", "node-b"}, {"pod-b2", "node-b"}} {
		pod, err := c.AddPod(ctx, c.Node(p[1]), p[0], time.Minute)
		if err != nil {
			return "", nil, nil, err
		}
		pods[p[0]] = pod
	}
	linuxA, lx1, err := addFlannelNode(ctx, c)
	if err != nil {
		return "", nil, nil, err
	}
	kc := filepath.Join(dir, kubeconfig)
	if err := copyFile(c.Kubeconfig, kc); err != nil {
		return "", nil, nil, err
	}
	if err := egressDemo(ctx, c, pods); err != nil {
		return "", nil, nil, err
	}
	a1, a2, b1, b2 := pods["pod-a1"].Place(), pods["pod-a2"].Place(), pods["pod-b1"].Place(), pods["pod-b2"].Place()
	checks := []cluster.Check{
		{From: a1, To: a2, Path: "same node"},
		{From: a1, To: b1, Path: "vxlan"},
		{From: b2, To: a2, Path: "vxlan"},
		{From: a.Host(), To: a1, Path: "node to local Pod", WantSource: a.Gateway},
		{From: a.Host(), To: b2, Path: "vxlan, node to remote Pod", WantSource: a.Gateway},
		{From: a1, To: c.ExternalPlace(), Path: "external, SNAT", WantSource: a.IP},
		{From: a2, To: c.ExternalPlace(), Path: "external, Egress " + egressName, WantSource: egressIP},
		{From: b1, To: c.ExternalPlace(), Path: "external, SNAT", WantSource: b.IP},
		{From: b2, To: c.ExcludedPlace(), Path: "external, excluded from SNAT"},
		{From: a1, To: lx1.Place(), Path: "winnet -> flannel vxlan"},
		{From: lx1.Place(), To: b1, Path: "flannel -> winnet vxlan"},
		{From: linuxA.Host(), To: a2, Path: "flannel host -> winnet Pod", WantSource: linuxA.TunnelSource()},
	}
	if _, _, err := c.WaitReachable(ctx, checks, time.Minute); err != nil {
		return "", nil, nil, err
	}
	results := c.Probe(ctx, checks, 1)
	get, err := hostcmd.CommandContext(ctx, c.Kubectl, "--kubeconfig", kc, "get", "winnet", "-A", "-o", "wide").CombinedOutput()
	if err != nil {
		return "", nil, nil, fmt.Errorf("kubectl get winnet: %w: %s", err, get)
	}
	var s strings.Builder
	fmt.Fprintf(&s, "\n$ kubectl get winnet -A -o wide\n%s\n", get)
	pre, err := preflightDemo(ctx, c, kc)
	if err != nil {
		return "", nil, nil, err
	}
	s.WriteString(pre)
	fmt.Fprintf(&s, "Connectivity (ICMP: replies/requests; TCP: the source address the destination saw):\n%s\n", cluster.FormatTable(results))
	policy, err := policyDemo(ctx, c, pods)
	if err != nil {
		return "", nil, nil, err
	}
	fmt.Fprintf(&s, "%s  kubectl describe networkpolicy %s   # the policy; kubectl describe wnn node-b shows PoliciesReady\n\n", policy, policyName)
	tiers, err := clusterPolicyDemo(ctx, c, pods)
	if err != nil {
		return "", nil, nil, err
	}
	fmt.Fprintf(&s, "%s\n", tiers)
	services, err := startServices(ctx, c)
	if err != nil {
		return "", nil, nil, err
	}
	fmt.Fprintf(&s, "Services (CoreDNS as kube-dns on %s; Service %s with endpoints web-a on node-a and web-b on node-b, each answering with its name):\n%s\n",
		cluster.DNSServiceIP, serviceName, services.table(ctx, pods))
	started := time.Now()
	traces, err := traceDemo(ctx, c, kc)
	if err != nil {
		return "", nil, nil, err
	}
	fmt.Printf("The three packet traces took %v\n", time.Since(started).Round(time.Millisecond))
	fmt.Fprintf(&s, "%s\n", traces)
	fmt.Fprint(&s, tryLines(c, kc, a, pods))
	return s.String(), services, pods, nil
}

// addFlannelNode turns winnet's flannel interop on (the FlannelInterop named default) and adds the Linux node
// linux-a, running the real flanneld (VXLAN, VNI 4096, port 4789), with one Pod, lx-1; it waits until every
// winnet node routes to linux-a.
func addFlannelNode(ctx context.Context, c *cluster.Cluster) (*cluster.FlannelNode, *cluster.FlannelPod, error) {
	fi := &networkv1alpha1.FlannelInterop{ObjectMeta: metav1.ObjectMeta{Name: networkv1alpha1.FlannelInteropName}}
	if err := c.Client.Create(ctx, fi); err != nil {
		return nil, nil, fmt.Errorf("creating FlannelInterop %s: %w", fi.Name, err)
	}
	linuxA, err := c.AddFlannelNode(ctx, cluster.FlannelNodeSpec{Name: "linux-a", IP: netip.MustParseAddr("192.168.77.21"),
		PodCIDR: netip.MustParsePrefix("10.244.9.0/24")})
	if err != nil {
		return nil, nil, err
	}
	lx1, err := c.AddFlannelPod(ctx, linuxA, "lx-1")
	if err != nil {
		return nil, nil, err
	}
	c.SetRoutesToFlannelNodes(true)
	return linuxA, lx1, c.WaitReady(ctx, time.Minute)
}

// tryLines tells the user what to do with the running demo.
func tryLines(c *cluster.Cluster, kc string, a *cluster.Node, pods map[string]*cluster.Pod) string {
	return fmt.Sprintf(`The demo keeps running. Try:
  export KUBECONFIG=%[1]s; alias kubectl=%[2]s
  kubectl get windowsnodenetworks,remotesubnetroutes,podendpoints,flannelinterops -A
  kubectl get node linux-a node-a -o yaml | grep flannel   # flanneld's lease on linux-a, the one winnet publishes for node-a
  ip netns exec %[17]s bridge fdb show dev flannel.4096    # flanneld's forwarding entries: one VTEP MAC per winnet node
  kubectl describe windowsnodenetwork node-a
  ovs-ofctl -O OpenFlow15 dump-flows unix:%[3]s   # node-a's OpenFlow pipeline
  ip netns exec %[4]s ip route                   # node-a's host routes
  ip netns exec %[5]s ping -c 3 %[6]s           # pod-a1 -> pod-b1 over the tunnel
  ip netns exec %[5]s ping -c 3 %[7]s       # pod-a1 -> the external host, SNATed to node-a's IP
  kubectl get egresses -o wide; kubectl describe egress %[19]s   # pod-a2 leaves from %[20]s, held by node-a (docs/egress.md)
  kubectl get svc,endpointslices -A; kubectl describe wnn node-a   # Services, their endpoints, ServicesReady
  ip netns exec %[5]s getent hosts web.default.svc.cluster.local   # pod-a1 resolves through CoreDNS
  ovs-ofctl -O OpenFlow15 dump-groups unix:%[3]s   # one select group per Service port, one bucket per endpoint
  %[15]s add-endpoint --dir %[16]s
      # adds an endpoint Pod (web-c on node-b): prints the EndpointSlices, node-a's groups and where new connections go, before and after
  kubectl annotate namespace default network.winnet.io/audit-log=true --overwrite; cat %[18]s
      # node-b's audit log: from now on each new connection the demo policy decides (pod-b2's ingress) is a JSON line (docs/operations.md, "Audit logs")
  for n in node-a node-b; do kubectl patch wnn $n --type merge -p '{"spec":{"encapsulation":{"tunnelType":"geneve"}}}'; done
  %[10]s reset --dry-run --netns %[11]s --ovsdb %[12]s --state-dir %[13]s --cni-conf-dir %[14]s
      # what resetting node-a would remove (without --dry-run, with its agent stopped, it gives the node its network back)
Namespaces: ip netns list | grep %[8]s    Logs: %[9]s
Take it down with: make demo-down
`, kc, c.Kubectl, a.OVS.MgmtSocket(cluster.BridgeName), a.NS, pods["pod-a1"].NS, pods["pod-b1"].IP, c.ExternalIP, prefix, c.RunDir,
		filepath.Join(c.BinDir, "winnet-agent"), a.NSPath, a.OVS.DBSocket(), a.StateDir, a.CNIConfDir, self(), filepath.Dir(kc), prefix+"-linux-a",
		filepath.Join(c.RunDir, "node-b", "audit", auditlog.FileName), egressName, egressIP)
}

// self is the path of this program, for the commands the demo prints.
func self() string {
	p, err := os.Executable()
	if err != nil {
		return "winnet-demo"
	}
	return p
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o600)
}

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
