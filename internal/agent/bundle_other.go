//go:build !linux && !windows

package agent

import (
	"context"
	"errors"
)

const hnsMemberName = "network.json"

func hnsSnapshot(context.Context, HostOptions, string) ([]byte, error) {
	return nil, errors.ErrUnsupported
}
