//go:build !linux && !windows

package peertrust

import (
	"errors"
	"net"
)

type platformIdentifier struct{}

var _ Identifier = platformIdentifier{}

func (platformIdentifier) ServerIdentity(net.Conn) (Identity, error) {
	return Identity{}, errors.ErrUnsupported
}
