//go:build !linux && !windows

package agent

import "github.com/winnet-io/winnet/internal/hns"

// newHNS reports that winnet-agent runs on Windows (and on Linux for simulated nodes) only.
func newHNS(HostOptions) (hns.Interface, error) { return hns.New(hns.Options{}) }
