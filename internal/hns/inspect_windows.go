//go:build windows

package hns

import (
	"context"
	"fmt"

	"github.com/Microsoft/hcsshim/hcn"
)

// Inspect asks the Host Networking Service its version (hcn.GetGlobals: HNS GET /globals/version)
// and its load balancers (hcn.ListLoadBalancers), each call bounded by DefaultCallTimeout.
func Inspect(ctx context.Context) (HostInfo, error) {
	g, err := withTimeout(ctx, DefaultCallTimeout, "getting the HNS version", func(context.Context) (*hcn.Globals, error) { return hcn.GetGlobals() })
	if err != nil {
		return HostInfo{}, err
	}
	info := HostInfo{Version: Version{Major: g.Version.Major, Minor: g.Version.Minor}}
	lbs, err := withTimeout(ctx, DefaultCallTimeout, "listing HNS load balancers", func(context.Context) ([]hcn.HostComputeLoadBalancer, error) {
		return hcn.ListLoadBalancers()
	})
	if err != nil {
		return info, fmt.Errorf("HNS %s answered its version: %w", info.Version, err)
	}
	for _, lb := range lbs {
		info.LoadBalancers = append(info.LoadBalancers, LoadBalancer{ID: lb.Id, FrontendVIPs: lb.FrontendVIPs})
	}
	return info, nil
}
