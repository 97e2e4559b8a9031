//go:build !windows

package hns

import (
	"errors"
	"fmt"
)

// New returns a client of the real Host Networking Service, which exists only on Windows. Elsewhere use NewSim or
// NewLinuxSim.
func New(Options) (Interface, error) {
	return nil, fmt.Errorf("the Host Networking Service is available only on Windows; use the HNS simulator: %w",
		errors.ErrUnsupported)
}
