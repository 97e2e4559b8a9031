package agent

import (
	"fmt"

	"github.com/winnet-io/winnet/internal/hns"
)

// newHNS returns the host's Host Networking Service.
func newHNS(HostOptions) (hns.Interface, error) {
	h, err := hns.New(hns.Options{})
	if err != nil {
		return nil, fmt.Errorf("opening HNS: %w", err)
	}
	return h, nil
}
