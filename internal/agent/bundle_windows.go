package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/winnet-io/winnet/internal/hns"
)

// hnsMemberName is the bundle's member of HNS: winnet's network and its endpoints as HNS reports
// them.
const hnsMemberName = "network.json"

func hnsSnapshot(ctx context.Context, host HostOptions, network string) ([]byte, error) {
	h, err := newHNS(host)
	if err != nil {
		return nil, err
	}
	defer closeHNS(h)
	var out struct {
		Network   *hns.Network   `json:"network"`
		Endpoints []hns.Endpoint `json:"endpoints"`
	}
	n, err := h.GetNetworkByName(ctx, network)
	if err != nil && !errors.Is(err, hns.ErrNotFound) {
		return nil, fmt.Errorf("HNS network %q: %w", network, err)
	}
	if n != nil {
		out.Network = n
		if out.Endpoints, err = h.ListEndpoints(ctx, n.ID); err != nil {
			return nil, fmt.Errorf("endpoints of HNS network %q: %w", network, err)
		}
	}
	return json.MarshalIndent(out, "", "  ")
}
