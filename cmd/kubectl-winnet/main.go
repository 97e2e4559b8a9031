// Command kubectl-winnet is winnet's kubectl plugin: kubectl winnet trace|status.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/winnet-io/winnet/internal/kubectlwinnet"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := kubectlwinnet.Run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "kubectl-winnet:", err)
		os.Exit(1)
	}
}
