//go:build !windows

package openflow

import (
	"context"

	"github.com/go-logr/logr"
)

// splice returns address itself: on Linux the switch's management socket is a file in OVS's run
// directory, which only root may enter.
func splice(_ context.Context, _ logr.Logger, address string) (string, func(), error) {
	return address, func() {}, nil
}
