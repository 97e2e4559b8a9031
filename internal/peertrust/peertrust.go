package peertrust

import (
	"errors"
	"fmt"
	"net"
	"os"
)

// Well-known SIDs.
const (
	// SIDSystem is LocalSystem: the agent, OVS's services and containerd run as it.
	SIDSystem = "S-1-5-18"
	// SIDAdministrators is BUILTIN\Administrators, the owner of an elevated administrator's objects.
	SIDAdministrators = "S-1-5-32-544"
)

// ErrUntrustedServer is wrapped when the server end of a connection is not run by SYSTEM or an
// administrator (Windows) or root (Linux): nothing is sent to it.
var ErrUntrustedServer = errors.New("the server is not run by the node's administrators")

// Identity is who runs the server end of a connection.
type Identity struct {
	// PID is the server's process ID.
	PID uint32
	// User and Owner are the user SID and the default owner SID of the server process's token
	// (Windows): an elevated administrator's token is owned by Administrators.
	User, Owner string
	// UID is the server's user ID (Linux); -1 when unknown.
	UID int
}

func (id Identity) String() string {
	if id.User != "" {
		return fmt.Sprintf("process %d (user %s, owner %s)", id.PID, id.User, id.Owner)
	}
	return fmt.Sprintf("process %d (uid %d)", id.PID, id.UID)
}

// Identifier tells who serves the other end of conn.
type Identifier interface {
	ServerIdentity(conn net.Conn) (Identity, error)
}

// CheckSIDs decides, for Windows, whether a server whose token has user and owner may be trusted:
// its user is SYSTEM, or its token is owned by SYSTEM or Administrators (an elevated
// administrator). LocalService, NetworkService and every other user are refused.
func CheckSIDs(user, owner string) error {
	if user == SIDSystem || owner == SIDSystem || owner == SIDAdministrators {
		return nil
	}
	return fmt.Errorf("user %s, token owner %s: %w", user, owner, ErrUntrustedServer)
}

// CheckUID decides, for Linux, whether a server running as uid may be trusted: root, or the user
// the caller itself runs as (self).
func CheckUID(uid, self int) error {
	if uid == 0 || (uid >= 0 && uid == self) {
		return nil
	}
	return fmt.Errorf("uid %d: %w", uid, ErrUntrustedServer)
}

// Check decides whether id may be trusted (CheckSIDs when it carries SIDs, CheckUID otherwise).
func Check(id Identity) error {
	var err error
	if id.User != "" || id.Owner != "" {
		err = CheckSIDs(id.User, id.Owner)
	} else {
		err = CheckUID(id.UID, os.Geteuid())
	}
	if err != nil {
		return fmt.Errorf("server process %d: %w", id.PID, err)
	}
	return nil
}

// Verifier checks the server end of connections.
type Verifier struct {
	Identifier Identifier
}

// NewVerifier returns the Verifier of this platform: the named pipe's server process on Windows,
// the unix socket's peer credentials on Linux.
func NewVerifier() Verifier {
	return Verifier{Identifier: platformIdentifier{}}
}

// Verify returns nil when the server end of conn is run by the node's administrators, and an
// error wrapping ErrUntrustedServer (or saying why it could not tell) otherwise.
func (v Verifier) Verify(conn net.Conn) error {
	id, err := v.Identifier.ServerIdentity(conn)
	if err != nil {
		return fmt.Errorf("identifying the server of %s: %w", conn.RemoteAddr(), err)
	}
	return Check(id)
}
