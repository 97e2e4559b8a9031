package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/winnet-io/winnet/internal/agent"
	"github.com/winnet-io/winnet/internal/cmdline"
)

// runTakeoverCommand runs `winnet-agent takeover --from flannel|kube-proxy [flags]` when args start with
// "takeover": it removes what those stacks left on this node (agent.Takeover).
func runTakeoverCommand(args []string) (handled bool, err error) {
	return takeoverCommand(args, os.Stdout, os.Stderr)
}

// takeoverCommand is runTakeoverCommand writing its report to out and its usage to errOut.
func takeoverCommand(args []string, out, errOut io.Writer) (handled bool, err error) {
	if len(args) == 0 || args[0] != "takeover" {
		return false, nil
	}
	fs := cmdline.FlagSet("winnet-agent takeover", "Usage: winnet-agent takeover --from flannel,kube-proxy [--dry-run] [flags]\n\n"+
		"Removes, without the API server, exactly what flannel (win-overlay or host-gw) and kube-proxy\n"+
		"(winkernel) left on this node, so that winnet's agent can build its network: kube-proxy's HNS load\n"+
		"balancers, remote endpoints and source-VIP endpoint; flannel's Overlay or L2Bridge network (its\n"+
		"RemoteSubnetRoute and HostRoute policies go with it), its host endpoint and the endpoints of Pods\n"+
		"gone without a CNI DEL; flannel's CNI configuration and subnet file. It decides everything first and\n"+
		"refuses, changing nothing and saying why, when an endpoint is still attached to a Pod or when it\n"+
		"finds something there it does not recognise. Cordon and drain the node and stop the old stack's\n"+
		"services or Pods first; run it with --dry-run to see the list. Running it again is a no-op.")
	fs.SetOutput(errOut)
	from := fs.String("from", "", "the stacks whose leftovers to remove: "+strings.Join(agent.TakeoverStacks, ", ")+", or both separated by a comma (required)")
	opts := agent.TakeoverOptions{Out: out}
	hostOpts := agent.HostOptions{}
	fs.BoolVar(&opts.DryRun, "dry-run", false, "list what would be removed (and what is refused) and change nothing")
	flannelNets := fs.String("flannel-network", "", `names of flannel's HNS networks, comma-separated: its Backend.Name (default: "flannel.<VNI>" and "vxlan0" of type Overlay, "cbr0" of type L2Bridge)`)
	fs.StringVar(&opts.KubeProxyNetwork, "kube-proxy-network", "", "the network kube-proxy served (its --network-name or $KUBE_NETWORK) (default: flannel's network)")
	sourceVIP := fs.String("source-vip", "", "kube-proxy's --source-vip (default: the one its load balancers carry)")
	fs.StringVar(&opts.SourceVIPFile, "source-vip-file", "", `the file the kube-proxy start-up script kept the source VIP in, removed with kube-proxy's leftovers (sig-windows-tools: C:\sourcevip\sourceVip.json) (default: none)`)
	fs.StringVar(&opts.CNIConfDir, "cni-conf-dir", agent.DefaultCNIConfDir, "the runtime's CNI configuration directory")
	fs.StringVar(&opts.FlannelSubnetFile, "flannel-subnet-file", agent.DefaultFlannelSubnetFile, "flanneld's --subnet-file")
	fs.StringVar(&hostOpts.NetNSPath, "netns", "", "Linux only: the network namespace of the simulated node")
	fs.StringVar(&hostOpts.StateDir, "state-dir", agent.DefaultStateDir, "the agent's state directory (Linux: where the HNS simulator keeps its state)")
	if help, err := cmdline.Parse(fs, args[1:]); help || err != nil {
		return true, err
	}
	if err := cmdline.NoArgs(fs); err != nil {
		return true, err
	}
	if *from == "" {
		return true, errors.New("--from is required: " + strings.Join(agent.TakeoverStacks, ", ") + ", or both separated by a comma")
	}
	if opts.From, err = agent.ParseTakeoverStacks(*from); err != nil {
		return true, err
	}
	if *flannelNets != "" {
		opts.FlannelNetworks = strings.Split(*flannelNets, ",")
	}
	if *sourceVIP != "" {
		if opts.SourceVIP, err = netip.ParseAddr(*sourceVIP); err != nil {
			return true, fmt.Errorf("--source-vip: %w", err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	inv, closeHNS, err := agent.NewTakeoverHNS(hostOpts)
	if err != nil {
		return true, err
	}
	defer closeHNS()
	_, err = agent.Takeover(ctx, inv, opts)
	return true, err
}
