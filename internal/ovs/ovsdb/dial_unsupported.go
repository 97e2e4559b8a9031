//go:build !linux && !windows

package ovsdb

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-logr/logr"
)

// DefaultAddress is empty where winnet does not run.
const DefaultAddress = ""

func dialEndpoint(_ context.Context, _ logr.Logger, address, _ string) (string, func(), error) {
	return "", nil, fmt.Errorf("connecting to OVSDB at %q: %w", address, errors.ErrUnsupported)
}
