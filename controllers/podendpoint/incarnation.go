package podendpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"sync"

	"github.com/winnet-io/winnet/internal/pipeline"
	"github.com/winnet-io/winnet/internal/securefs"
)

// A Pod's connections must not outlive its address: the conntrack entries of a deleted Pod stay,
// and a packet of one of them would pass as established for the next Pod given the address. The
// pipeline drops such packets by the attachment's incarnation (internal/pipeline/incarnation.go);
// Incarnations gives the numbers out: each time an address is attached again, the next number
// after the one it had last (wrapping from pipeline.MaxIncarnation to 1), so that an address must
// be given out 61,439 times before an old connection of it could carry the current number. The
// numbers are kept in a file of the agent's state directory (IncarnationsFileName), written before
// ADD installs the Pod's flows, so that a restarted agent installs the same ones and goes on from
// the last number of each address.
//
// A Pod attached by a release without incarnations (0.1.0) has none: its connections carry 0 and
// are not checked. When the file is missing, or the store holds attachments the file does not
// know (a release without incarnations attached them since: it may also have committed
// connections without a number for the Pods the file knows), every attachment present is marked
// as having none, for the rest of its life.

// IncarnationsFileName is the file in the agent's state directory that keeps the numbers.
const IncarnationsFileName = "pod-incarnations.json"

// incarnationsFileVersion is the version of the file's format; a file of another version is
// treated as missing.
const incarnationsFileVersion = 1

// maxIncarnationsFileSize bounds what is read: a /16 of Pod addresses at about 30 bytes each,
// with room.
const maxIncarnationsFileSize = 8 << 20

type incarnationsFile struct {
	Version int `json:"version"`
	// Addresses holds the last number given to each address.
	Addresses map[netip.Addr]uint16 `json:"addresses"`
	// Sandboxes holds the number of each attachment (0: none, not checked).
	Sandboxes map[string]uint16 `json:"sandboxes"`
}

// Incarnations gives each Pod attachment its incarnation. It is safe for concurrent use.
type Incarnations struct {
	path string
	mu   sync.Mutex
	f    incarnationsFile
}

// OpenIncarnations reads the numbers kept at path for the attachments of store. A file that
// cannot be trusted or read is ignored (the attachments present get no number; addresses start
// from a random number) and reported in the error, which does not stop the agent.
func OpenIncarnations(path string, store *Store) (*Incarnations, error) {
	b := &Incarnations{path: path, f: incarnationsFile{Version: incarnationsFileVersion,
		Addresses: map[netip.Addr]uint16{}, Sandboxes: map[string]uint16{}}}
	f, readErr := readIncarnations(path)
	if readErr == nil {
		b.f.Addresses = f.Addresses
	}
	attachments := store.List()
	legacy := readErr != nil
	for _, a := range attachments {
		// (An attachment being detached may have been forgotten already, DEL's last step.)
		if _, ok := f.Sandboxes[a.SandboxID]; !ok && !a.Deleting {
			legacy = true
		}
	}
	for _, a := range attachments {
		if legacy {
			b.f.Sandboxes[a.SandboxID] = 0
		} else {
			b.f.Sandboxes[a.SandboxID] = f.Sandboxes[a.SandboxID]
		}
	}
	if errors.Is(readErr, os.ErrNotExist) {
		readErr = nil
	}
	if err := b.write(); err != nil {
		return b, errors.Join(readErr, err)
	}
	return b, readErr
}

func readIncarnations(path string) (incarnationsFile, error) {
	fh, _, err := securefs.OpenNoFollow(path)
	if err != nil {
		return incarnationsFile{}, err
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, maxIncarnationsFileSize+1))
	if err != nil {
		return incarnationsFile{}, fmt.Errorf("reading %s: %w", path, err)
	}
	if len(data) > maxIncarnationsFileSize {
		return incarnationsFile{}, fmt.Errorf("%s is larger than %d bytes", path, maxIncarnationsFileSize)
	}
	var f incarnationsFile
	if err := json.Unmarshal(data, &f); err != nil {
		return incarnationsFile{}, fmt.Errorf("reading %s: %w", path, err)
	}
	if f.Version != incarnationsFileVersion {
		return incarnationsFile{}, fmt.Errorf("%s is of version %d, not %d", path, f.Version, incarnationsFileVersion)
	}
	for addr, n := range f.Addresses {
		if !addr.Is4() || n == 0 || n > pipeline.MaxIncarnation {
			return incarnationsFile{}, fmt.Errorf("%s: address %s has incarnation %d (an IPv4 address, 1 to %d)", path, addr, n, pipeline.MaxIncarnation)
		}
	}
	for sandbox, n := range f.Sandboxes {
		if n > pipeline.MaxIncarnation {
			return incarnationsFile{}, fmt.Errorf("%s: sandbox %s has incarnation %d (at most %d)", path, sandbox, n, pipeline.MaxIncarnation)
		}
	}
	return f, nil
}

// Assign gives the sandbox's attachment of addr the next incarnation of addr and keeps it on disk
// before it returns; the sandbox keeps the number it has if it was given one.
func (b *Incarnations) Assign(sandbox string, addr netip.Addr) (uint16, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n, ok := b.f.Sandboxes[sandbox]; ok {
		return n, nil
	}
	last, ok := b.f.Addresses[addr]
	if !ok {
		// An address never seen (or a file lost): start anywhere, so that a lost file does not
		// give the numbers of the connections still tracked again in order.
		last = uint16(rand.IntN(int(pipeline.MaxIncarnation)))
	}
	n := last%pipeline.MaxIncarnation + 1
	b.f.Addresses[addr] = n
	b.f.Sandboxes[sandbox] = n
	if err := b.write(); err != nil {
		delete(b.f.Sandboxes, sandbox)
		return 0, err
	}
	return n, nil
}

// Of returns the sandbox's incarnation (0: none).
func (b *Incarnations) Of(sandbox string) uint16 {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.f.Sandboxes[sandbox]
}

// Forget drops the sandbox's number once its attachment is gone, on disk too (nothing of a deleted
// Pod stays in the agent's state); its address keeps its last number.
func (b *Incarnations) Forget(sandbox string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.f.Sandboxes[sandbox]; !ok {
		return nil
	}
	delete(b.f.Sandboxes, sandbox)
	return b.write()
}

// write keeps the numbers in the file. Call with mu held (or before b is shared).
func (b *Incarnations) write() error {
	data, err := json.Marshal(b.f)
	if err != nil {
		return fmt.Errorf("encoding the Pod incarnations: %w", err)
	}
	if _, err := securefs.EnsureDir(filepath.Dir(b.path), securefs.Private); err != nil {
		return err
	}
	if err := securefs.WriteFile(b.path, data, securefs.Private); err != nil {
		return fmt.Errorf("keeping the Pod incarnations in %s: %w", b.path, err)
	}
	return nil
}
