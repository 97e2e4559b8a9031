//go:build !linux && !(windows && (amd64 || arm64))

package hostnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
)

// unsupportedHost is the Interface of platforms winnet does not run on: every call fails with an
// error wrapping errors.ErrUnsupported.
type unsupportedHost struct{}

var _ Interface = (*unsupportedHost)(nil)

func newPlatform(Options) (Interface, error) {
	return nil, errUnsupported()
}

func errUnsupported() error {
	return fmt.Errorf("host networking on %s: %w", runtime.GOOS, errors.ErrUnsupported)
}

func (unsupportedHost) LinkByName(context.Context, string) (Link, error) {
	return Link{}, errUnsupported()
}

func (unsupportedHost) LinkByAddress(context.Context, netip.Addr) (Link, error) {
	return Link{}, errUnsupported()
}

func (unsupportedHost) Addresses(context.Context, int) ([]netip.Prefix, error) {
	return nil, errUnsupported()
}

func (unsupportedHost) EnsureAddress(context.Context, int, netip.Prefix) error {
	return errUnsupported()
}

func (unsupportedHost) EnsureSkipAsSourceAddress(context.Context, int, netip.Prefix) error {
	return errUnsupported()
}

func (unsupportedHost) DeleteAddress(context.Context, int, netip.Prefix) error {
	return errUnsupported()
}

func (unsupportedHost) SetMAC(context.Context, int, net.HardwareAddr) error { return errUnsupported() }

func (unsupportedHost) SetMTU(context.Context, int, int) error { return errUnsupported() }

func (unsupportedHost) SetUp(context.Context, int) error { return errUnsupported() }

func (unsupportedHost) EnsureForwarding(context.Context, int) error    { return errUnsupported() }
func (unsupportedHost) SetSwitchPort(context.Context, int, bool) error { return errUnsupported() }

func (unsupportedHost) ReleaseSwitchPort(context.Context, string) error { return errUnsupported() }
func (unsupportedHost) EnsureRoutes(context.Context, []Route) error     { return errUnsupported() }

func (unsupportedHost) Routes(context.Context, RouteFilter) ([]Route, error) {
	return nil, errUnsupported()
}

func (unsupportedHost) EnsureRoute(context.Context, Route) error { return errUnsupported() }

func (unsupportedHost) DeleteRoute(context.Context, Route) error { return errUnsupported() }

func (unsupportedHost) ReconcileRoutes(context.Context, []Route) error { return errUnsupported() }

func (unsupportedHost) Neighbor(context.Context, netip.Addr) (net.HardwareAddr, error) {
	return nil, errUnsupported()
}

func (unsupportedHost) RenameLink(context.Context, int, string) error { return errUnsupported() }

func (unsupportedHost) ReadIPConfig(context.Context, int) (IPConfig, error) {
	return IPConfig{}, errUnsupported()
}

func (unsupportedHost) ApplyIPConfig(context.Context, int, IPConfig) error { return errUnsupported() }

func (unsupportedHost) WatchLinks(context.Context) (<-chan struct{}, error) {
	return nil, errUnsupported()
}

func (unsupportedHost) WatchAddresses(context.Context, func() []int) (<-chan struct{}, error) {
	return nil, errUnsupported()
}
