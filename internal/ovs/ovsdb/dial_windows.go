package ovsdb

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/go-logr/logr"

	"github.com/winnet-io/winnet/internal/peertrust"
	"github.com/winnet-io/winnet/internal/securefs"
)

// DefaultAddress is the named pipe OVS for Windows serves the database on.
const DefaultAddress = `\\.\pipe\C:openvswitchvarrunopenvswitchdb.sock`

// DefaultSocketDir is where the OVSDB pipe bridge's socket is made when Options.SocketDir is empty:
// under winnet's default state directory, protected like it.
var DefaultSocketDir = filepath.Join(os.Getenv("ProgramData"), "winnet", "run")

// dialEndpoint bridges libovsdb, which dials only tcp/ssl/unix endpoints, to
// OVS's named pipe: it listens on a private AF_UNIX socket (supported since
// Windows 10 1803) in a directory only SYSTEM and Administrators may enter
// (socketDir, internal/securefs; never %TEMP%, where every user may create
// files), and splices every accepted connection onto a fresh pipe connection
// once the pipe's server process is found to run as SYSTEM or an administrator
// (peertrust): on every connect and reconnect of libovsdb. OVSDB is never
// exposed on TCP.
func dialEndpoint(ctx context.Context, log logr.Logger, pipe, socketDir string) (string, func(), error) {
	if socketDir == "" {
		socketDir = DefaultSocketDir
	}
	if _, err := securefs.EnsureDir(socketDir, securefs.Private); err != nil {
		return "", nil, fmt.Errorf("preparing the directory of the OVSDB pipe bridge: %w", err)
	}
	dir, err := os.MkdirTemp(socketDir, "ovsdb-")
	if err != nil {
		return "", nil, fmt.Errorf("creating directory for the OVSDB pipe bridge: %w", err)
	}
	sock := filepath.Join(dir, "db.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, fmt.Errorf("listening on %q to bridge named pipe %q: %w", sock, pipe, err)
	}
	stop := peertrust.ServeSplices(ctx, log, ln, pipe, "OVSDB")
	closeFn := func() {
		stop()
		_ = os.RemoveAll(dir)
	}
	return "unix:" + sock, closeFn, nil
}
