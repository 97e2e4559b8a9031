package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/winnet-io/winnet/internal/agent"
	"github.com/winnet-io/winnet/internal/cmdline"
	"github.com/winnet-io/winnet/internal/cni"
)

// runResetCommand runs `winnet-agent reset [flags]` when args start with "reset": it removes what
// winnet created on this node without the API server (agent.Reset).
func runResetCommand(args []string) (handled bool, err error) {
	if len(args) == 0 || args[0] != "reset" {
		return false, nil
	}
	fs := cmdline.FlagSet("winnet-agent reset", "Usage: winnet-agent reset [flags]\n\n"+
		"Gives this node its network back without the API server: deletes the OVS bridges winnet owns,\n"+
		"releases the uplink adapter, deletes the HNS network (HNS gives the adapter its IP configuration\n"+
		"back), checks the adapter holds its recorded address again (re-applying the record if not), and\n"+
		"removes the adapter record, the CNI conflist, the agent's state (ipam/, pods/) and, with\n"+
		"--cni-shim-path, the shim winnet installed. While Pod sandboxes are left the conflist and the shim\n"+
		"stay: the shim then answers their DEL without the agent and removes both with the last. Stop the\n"+
		"agent first. Running it again is a no-op.")
	hostOpts := agent.HostOptions{}
	opts := agent.ResetOptions{Out: os.Stdout}
	fs.BoolVar(&opts.DryRun, "dry-run", false, "list what would be removed and change nothing")
	fs.StringVar(&opts.HNSNetwork, "hns-network", agent.DefaultHNSNetwork, "name of winnet's HNS network")
	fs.StringVar(&hostOpts.OVSDBAddress, "ovsdb", "", "ovsdb-server socket (Linux) or named pipe (Windows) (default: the platform's)")
	fs.StringVar(&hostOpts.NetNSPath, "netns", "", "Linux only: reset this network namespace instead of the command's own (simulated nodes)")
	fs.StringVar(&hostOpts.CNIConfDir, "cni-conf-dir", agent.DefaultCNIConfDir, "directory the agent wrote "+cni.ConfListName+" into")
	fs.StringVar(&hostOpts.StateDir, "state-dir", agent.DefaultStateDir, "the agent's state directory")
	fs.StringVar(&opts.CNIShimPath, "cni-shim-path", "", "the "+cni.PluginType+" binary winnet installed (the agent's --cni-shim-path): removed with the conflist, or with the last sandbox when some are left (default: leave the shim alone)")
	if help, err := cmdline.Parse(fs, args[1:]); help || err != nil {
		return true, err
	}
	if err := cmdline.NoArgs(fs); err != nil {
		return true, err
	}
	opts.StateDir, opts.CNIConfDir = hostOpts.StateDir, hostOpts.CNIConfDir
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	host, closeHost, err := agent.NewResetHost(ctx, hostOpts)
	if err != nil {
		return true, err
	}
	defer closeHost()
	_, err = agent.Reset(ctx, host, opts)
	return true, err
}
