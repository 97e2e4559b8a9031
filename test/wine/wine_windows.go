package wine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/Microsoft/go-winio"
	"golang.org/x/sys/windows"

	"github.com/winnet-io/winnet/internal/peertrust"
)

var detected = sync.OnceValue(func() bool {
	// Wine's ntdll exports wine_get_version; Windows' never does.
	return windows.NewLazySystemDLL("ntdll.dll").NewProc("wine_get_version").Find() == nil
})

// Detected reports whether this process runs under Wine.
func Detected() bool { return detected() }

// removeTree removes dir and what it holds, children first, with os.Remove only.
func removeTree(dir string) error {
	var paths []string
	err := filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		paths = append(paths, path)
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	var errs []error
	for i := len(paths) - 1; i >= 0; i-- {
		if err := os.Remove(paths[i]); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ServerVerifier returns, under Wine, the check of a named pipe's server that winnet's clients
// should use in tests instead of the platform's (peertrust.NewVerifier), and nil elsewhere (nil
// selects the platform's). Wine's tokens are never owned by Administrators, as an elevated
// administrator's are on Windows (and Wine does not implement changing a token's owner), so the
// platform's check refuses every server there. This one identifies the server with the platform's
// own code (GetNamedPipeServerProcessId, the server process's token) and trusts a server run by
// this process's user, as the Linux check trusts the caller's own uid (peertrust.CheckUID).
func ServerVerifier() interface{ Verify(conn net.Conn) error } {
	if !Detected() {
		return nil
	}
	return sameUser{}
}

type sameUser struct{}

func (sameUser) Verify(conn net.Conn) error {
	id, err := peertrust.NewVerifier().Identifier.ServerIdentity(conn)
	if err != nil {
		return fmt.Errorf("identifying the server of %s: %w", conn.RemoteAddr(), err)
	}
	user, err := windows.GetCurrentProcessToken().GetTokenUser()
	if err != nil {
		return fmt.Errorf("reading this process's user: %w", err)
	}
	if id.User != user.User.Sid.String() {
		return fmt.Errorf("server %s is not run by this process's user %s, the only one trusted under Wine: %w",
			id, user.User.Sid, peertrust.ErrUntrustedServer)
	}
	return nil
}

// AfterListen adapts a named pipe that the test just created with go-winio (and on which it has not
// yet accepted) to Wine, and does nothing elsewhere. go-winio's listener creates a first pipe instance it never accepts on, relying on Windows to
// keep clients off it, and Wine lets the first client connect to it and wait forever (go-winio
// issues 173, 183, 313): a throwaway connection takes that instance until t ends.
func AfterListen(t testing.TB, address string) {
	t.Helper()
	if !Detected() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := winio.DialPipeContext(ctx, address)
	if err != nil {
		t.Fatalf("under Wine: taking go-winio's first instance of %s: %v", address, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
}
