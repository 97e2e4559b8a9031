package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/winnet-io/winnet"
	"github.com/winnet-io/winnet/internal/cni"
)

const about = "winnet-cni: CNI plugin of winnet; forwards CNI commands to the winnet agent"

func main() {
	if os.Getenv("CNI_COMMAND") == "" && len(os.Args) > 1 {
		os.Exit(runCLI(os.Args[1:], os.Stdout, os.Stderr))
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	self, err := os.Executable()
	if err != nil {
		self = "" // never remove the shim when it cannot tell which file it is
	}
	shim := cni.NewShim(cni.ShimOptions{Stdout: os.Stdout, Stderr: os.Stderr, Executable: self})
	funcs := shim.Funcs(ctx)
	// PluginMainFuncs exits the process on error, so stop explicitly rather than by defer.
	skel.PluginMainFuncs(funcs, cni.PluginVersionInfo(), about)
	stop()
}

// runCLI handles command-line arguments, given only when a person (not a container runtime, which
// sets CNI_COMMAND and passes none) runs the binary. It returns the exit code. --version is winnet's
// release; the CNI command VERSION (the spec versions the shim supports) is answered by skel as ever.
func runCLI(args []string, stdout, stderr io.Writer) int {
	switch args[0] {
	case "-h", "--help", "-help", "help":
		fmt.Fprint(stdout, usage())
		return 0
	case "--version", "-version":
		fmt.Fprintln(stdout, winnet.Build().String("winnet-cni"))
		return 0
	default:
		fmt.Fprintf(stderr, "winnet-cni: unknown argument %q\n\n%s", args[0], usage())
		return 2
	}
}

func usage() string {
	return fmt.Sprintf(`Usage: winnet-cni [-h | --help | --version]

winnet-cni is the CNI plugin of winnet. kubelet or containerd runs it with CNI_COMMAND and the
other CNI_* environment variables set and the network configuration on stdin; it forwards the
command to the winnet agent on this node and prints the agent's answer.

Agent address: %s (override with "agentSocket" in the network configuration)
CNI commands:  ADD, DEL, CHECK, STATUS, GC, VERSION
CNI versions:  %s
`, cni.DefaultAddress, strings.Join(cni.SupportedVersions, ", "))
}
