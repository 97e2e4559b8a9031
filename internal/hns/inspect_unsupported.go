//go:build !windows

package hns

import (
	"context"
	"errors"
	"fmt"
)

// Inspect asks the real Host Networking Service, which exists only on Windows. The HNS simulator
// answers SimVersion and the load balancers of its state file (ReadSimLoadBalancers): only those
// seeded as kube-proxy's, since winnet makes none.
func Inspect(context.Context) (HostInfo, error) {
	return HostInfo{}, fmt.Errorf("the Host Networking Service is available only on Windows: %w", errors.ErrUnsupported)
}
