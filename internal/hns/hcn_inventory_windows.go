//go:build windows

package hns

import (
	"context"
	"encoding/json"
	"net/netip"

	"github.com/Microsoft/hcsshim/hcn"
	"github.com/go-logr/logr"
)

var _ inventoryRaw = hcnClient{}

// ListNetworks lists every HNS network (hcn.ListNetworks: HNS GET /networks) with its type and the
// policies the takeover reads: RemoteSubnetRoute (hcn.RemoteSubnetRoutePolicySetting, what flannel's vxlan
// backend adds per remote lease) and HostRoute.
func (hcnClient) ListNetworks(context.Context) ([]NetworkInfo, error) {
	nets, err := hcn.ListNetworks()
	if err != nil {
		return nil, err
	}
	out := make([]NetworkInfo, 0, len(nets))
	for i := range nets {
		n := &nets[i]
		info := NetworkInfo{Network: *fromHCNNetwork(n), Type: NetworkType(n.Type)}
		for _, p := range n.Policies {
			switch p.Type {
			case hcn.HostRoute:
				info.HostRoute = true
			case hcn.RemoteSubnetRoute:
				var s hcn.RemoteSubnetRoutePolicySetting
				if json.Unmarshal(p.Settings, &s) != nil {
					continue
				}
				rs := RemoteSubnetPolicy{DRMAC: s.DistributedRouterMacAddress, IsolationID: s.IsolationId}
				rs.DestinationPrefix, _ = netip.ParsePrefix(s.DestinationPrefix)
				rs.ProviderAddress, _ = netip.ParseAddr(s.ProviderAddress)
				info.RemoteSubnets = append(info.RemoteSubnets, rs)
			}
		}
		out = append(out, info)
	}
	return out, nil
}

// ListLoadBalancers lists every HNS load balancer (hcn.ListLoadBalancers).
func (hcnClient) ListLoadBalancers(context.Context) ([]LoadBalancer, error) {
	lbs, err := hcn.ListLoadBalancers()
	if err != nil {
		return nil, err
	}
	out := make([]LoadBalancer, 0, len(lbs))
	for _, lb := range lbs {
		out = append(out, LoadBalancer{ID: lb.Id, FrontendVIPs: lb.FrontendVIPs, SourceVIP: lb.SourceVIP, Endpoints: lb.HostComputeEndpoints})
	}
	return out, nil
}

// DeleteLoadBalancer deletes a load balancer (hcn.GetLoadBalancerByID, Delete); one that is gone is a no-op.
func (hcnClient) DeleteLoadBalancer(ctx context.Context, id string) error {
	lb, err := hcn.GetLoadBalancerByID(id)
	if err != nil {
		if isNotFound(err) {
			return nil
		}
		return err
	}
	logr.FromContextOrDiscard(ctx).V(2).Info("Deleting HNS load balancer", "loadBalancerID", lb.Id)
	if err := lb.Delete(); err != nil && !isNotFound(err) {
		return err
	}
	return nil
}
