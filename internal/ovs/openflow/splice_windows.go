package openflow

import (
	"context"
	"crypto/rand"
	encodinghex "encoding/hex"
	"fmt"

	"github.com/Microsoft/go-winio"
	"github.com/go-logr/logr"

	"github.com/winnet-io/winnet/internal/peertrust"
)

// spliceSecurityDescriptor lets only SYSTEM and Administrators open the private pipe, with a
// protected DACL.
const spliceSecurityDescriptor = "D:P(A;;GA;;;SY)(A;;GA;;;BA)"

// splice puts a private named pipe of the agent's between ofctrl (which dials the switch's pipe
// itself, so that no check can sit in it) and OVS's pipe at address: a random name, created first
// (go-winio creates the first instance with FILE_CREATE, so a name someone else made is refused),
// that only SYSTEM and Administrators may open. Every connection accepted on it — ofctrl's first
// and every reconnect, the bundle and monitor connections, the verification's dumps — is joined to
// a fresh connection to address only once the process serving address proved to run as SYSTEM or
// an administrator (peertrust); otherwise it is closed and nothing is sent. It returns the private
// pipe's name and the function that stops it.
func splice(ctx context.Context, log logr.Logger, address string) (string, func(), error) {
	var nonce [16]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return "", nil, fmt.Errorf("naming the private OpenFlow pipe: %w", err)
	}
	private := `\\.\pipe\winnet-openflow-` + encodinghex.EncodeToString(nonce[:])
	ln, err := winio.ListenPipe(private, &winio.PipeConfig{SecurityDescriptor: spliceSecurityDescriptor})
	if err != nil {
		return "", nil, fmt.Errorf("listening on the private OpenFlow pipe %s: %w", private, err)
	}
	stop := peertrust.ServeSplices(ctx, log, ln, address, "the switch's OpenFlow")
	return private, stop, nil
}
