package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/winnet-io/winnet/internal/cmdline"
	"github.com/winnet-io/winnet/internal/controller"
	winnetscheme "github.com/winnet-io/winnet/internal/scheme"
)

// runUninstallCommand runs `winnet-controller uninstall [flags]` (the Helm chart's pre-delete hook)
// when args start with "uninstall".
func runUninstallCommand(args []string) (handled bool, err error) {
	if len(args) == 0 || args[0] != "uninstall" {
		return false, nil
	}
	fs := cmdline.FlagSet("winnet-controller uninstall", "Usage: winnet-controller uninstall [flags]\n\n"+
		"Removes winnet from the cluster (the Helm chart runs it before `helm uninstall` deletes anything):\n"+
		"stops winnet-controller from creating WindowsNodeNetworks, deletes them and waits until each\n"+
		"agent has given its node its network back, deletes the agents' DaemonSet, then every remaining\n"+
		"winnet object, the flannel annotations of winnet's nodes and, with --delete-crds, the CRDs.\n"+
		"Exits 1 naming the nodes that did not finish in time: run `winnet-agent reset` on them.")
	opts := controller.UninstallOptions{Out: os.Stdout}
	fs.StringVar(&opts.Namespace, "namespace", "", "the release namespace (winnet-controller's and the agents'); required")
	fs.StringVar(&opts.ControllerDeployment, "controller-deployment", "winnet-controller", "name of winnet-controller's Deployment")
	fs.StringVar(&opts.AgentDaemonSet, "agent-daemonset", "winnet-agent", "name of the agents' DaemonSet")
	fs.DurationVar(&opts.Timeout, "timeout", 3*time.Minute, "how long to wait for the agents to give their nodes their network back")
	fs.BoolVar(&opts.DeleteCRDs, "delete-crds", false, "delete winnet's CRDs too (Helm never deletes a chart's crds/)")
	kubeconfig := cmdline.KubeconfigFlag(fs)
	if help, err := cmdline.Parse(fs, args[1:]); help || err != nil {
		return true, err
	}
	if err := cmdline.NoArgs(fs); err != nil {
		return true, err
	}
	switch {
	case opts.Namespace == "":
		return true, fmt.Errorf("uninstall needs --namespace, the release namespace")
	case opts.Timeout <= 0:
		return true, fmt.Errorf("--timeout must be positive, got %s", opts.Timeout)
	}
	cfg, err := cmdline.RESTConfig(*kubeconfig, "")
	if err != nil {
		return true, fmt.Errorf("loading a kubeconfig: %w", err)
	}
	scheme, err := winnetscheme.New()
	if err != nil {
		return true, err
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		return true, fmt.Errorf("adding apiextensions to the scheme: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return true, fmt.Errorf("creating the API client: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return true, controller.Uninstall(ctx, c, opts)
}
