package peertrust

import (
	"errors"
	"fmt"
	"net"
	"unsafe"

	"golang.org/x/sys/windows"
)

// platformIdentifier finds the process serving a named pipe (GetNamedPipeServerProcessId) and
// reads the user and owner of its token.
type platformIdentifier struct{}

var _ Identifier = platformIdentifier{}

// fder is what go-winio's pipe connections expose: their handle.
type fder interface {
	Fd() uintptr
}

// tokenOwner is TOKEN_OWNER.
type tokenOwner struct {
	Owner *windows.SID
}

func (platformIdentifier) ServerIdentity(conn net.Conn) (Identity, error) {
	f, ok := conn.(fder)
	if !ok {
		return Identity{}, fmt.Errorf("a %T is not a named pipe", conn)
	}
	var pid uint32
	if err := windows.GetNamedPipeServerProcessId(windows.Handle(f.Fd()), &pid); err != nil {
		return Identity{}, fmt.Errorf("GetNamedPipeServerProcessId: %w", err)
	}
	id := Identity{PID: pid, UID: -1}
	if pid == 4 {
		// The System process (kernel-mode servers) runs as SYSTEM; OpenProcessToken refuses it.
		id.User, id.Owner = SIDSystem, SIDSystem
		return id, nil
	}
	proc, err := windows.OpenProcess(windows.PROCESS_QUERY_LIMITED_INFORMATION, false, pid)
	if err != nil {
		return Identity{}, fmt.Errorf("opening server process %d: %w", pid, err)
	}
	defer windows.CloseHandle(proc) //nolint:errcheck
	var tok windows.Token
	if err := windows.OpenProcessToken(proc, windows.TOKEN_QUERY, &tok); err != nil {
		return Identity{}, fmt.Errorf("opening the token of server process %d: %w", pid, err)
	}
	defer tok.Close() //nolint:errcheck
	user, err := tok.GetTokenUser()
	if err != nil {
		return Identity{}, fmt.Errorf("reading the user of server process %d: %w", pid, err)
	}
	id.User = user.User.Sid.String()
	owner, err := readTokenOwner(tok)
	if err != nil {
		return Identity{}, fmt.Errorf("reading the owner of server process %d's token: %w", pid, err)
	}
	id.Owner = owner
	return id, nil
}

func readTokenOwner(tok windows.Token) (string, error) {
	n := uint32(64)
	for {
		buf := make([]byte, n)
		err := windows.GetTokenInformation(tok, windows.TokenOwner, &buf[0], uint32(len(buf)), &n)
		if errors.Is(err, windows.ERROR_INSUFFICIENT_BUFFER) && n > uint32(len(buf)) {
			continue
		}
		if err != nil {
			return "", err
		}
		owner := (*tokenOwner)(unsafe.Pointer(&buf[0]))
		if owner.Owner == nil {
			return "", errors.New("no owner")
		}
		return owner.Owner.String(), nil
	}
}
