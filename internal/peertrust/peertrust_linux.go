package peertrust

import (
	"errors"
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// platformIdentifier reads a unix socket's peer credentials (SO_PEERCRED).
type platformIdentifier struct{}

var _ Identifier = platformIdentifier{}

func (platformIdentifier) ServerIdentity(conn net.Conn) (Identity, error) {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return Identity{}, fmt.Errorf("a %T is not a unix socket", conn)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return Identity{}, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return Identity{}, err
	}
	if credErr != nil {
		return Identity{}, fmt.Errorf("reading SO_PEERCRED: %w", credErr)
	}
	if cred == nil {
		return Identity{}, errors.New("no peer credentials")
	}
	return Identity{PID: uint32(cred.Pid), UID: int(cred.Uid)}, nil
}
