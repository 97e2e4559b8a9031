package cni

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/winnet-io/winnet/internal/securefs"
)

// A node is retired when winnet's node network is gone for good: the agent tore it down because its
// WindowsNodeNetwork was deleted (helm uninstall), or `winnet-agent reset` removed it. The HNS
// network went with its endpoints and the bridge with its ports, but the runtime may still hold Pod
// sandboxes, and it deletes each one with a CNI DEL that must succeed (the CNI specification asks
// DEL to succeed for what is already gone) even when no agent is left to answer.
//
// So the teardown leaves, in the agent's state directory, RetiredDir holding:
//   - RetiredFile, the Retirement: who retired the node, and whether the shim goes too;
//   - sandboxes/, one empty file per sandbox left on the node (named by the SHA-256 of its ID).
//
// The conflist stays (without it containerd fails every DEL before running any plugin), and so does
// the shim. The shim reads "stateDir" and "confDir" from the conflist; when RetiredFile exists it
// answers DEL itself, without the agent: it forgets the sandbox and, with the last one, removes what
// it derives itself — the conflist ConfListName in confDir, the state directory's own
// subdirectories (StateSubdirs), its own executable when the Retirement names it, and RetiredDir.
// It never removes a path a file names: the state directory is protected (internal/securefs), and
// the shim checks that it is before it trusts anything in it; a record it does not trust is skipped
// (the shim then asks the agent, as on a node that is not retired) and the reason written to stderr.
// Without RetiredFile an unreachable agent is restarting, and the shim answers try-again-later as
// before. An agent that makes the node network Ready again removes RetiredDir (Unretire) before it
// writes the conflist.
const (
	// RetiredDir is the directory under the agent's state directory that marks a retired node.
	RetiredDir = "retired"
	// RetiredFile, in RetiredDir, holds the Retirement; it is written last and read first.
	RetiredFile = "node.json"
	// retiredSandboxes, in RetiredDir, holds one file per sandbox left on the node.
	retiredSandboxes = "sandboxes"
	// MaxRetirementSize bounds the Retirement file the shim reads.
	MaxRetirementSize = 16 << 10
	// maxRetiredBy bounds Retirement.By.
	maxRetiredBy = 1024
)

// StateSubdirs are the agent's directories and files in its state directory that a finished
// retirement removes: IPAM allocations, Pod attachments, their hostPort mappings
// (hostport.DirName), their incarnations (podendpoint.IncarnationsFileName) and the record of the
// egress IPs the agent added (egress.RecordFileName). They are named here, never read from a file.
var StateSubdirs = []string{"ipam", "pods", "hostports", "pod-incarnations.json", "egress-ips.json"}

// Retirement is what the teardown leaves for the shim.
type Retirement struct {
	// Shim is the shim binary winnet installed (the agent's --cni-shim-path); the shim removes
	// its own executable with the node's last sandbox only when this names it (the same file).
	// Empty leaves the shim where it is (installed by someone else). The agent removes it itself
	// when no sandbox is left.
	Shim string `json:"shim,omitempty"`
	// By says what retired the node, for a person reading the file.
	By string `json:"by"`
	// Time is when.
	Time time.Time `json:"time"`
}

// Validate checks a Retirement read from a file: bounded and of the right shape.
func (r Retirement) Validate() error {
	if err := ValidateShimPath(r.Shim); err != nil {
		return err
	}
	if len(r.By) > maxRetiredBy {
		return fmt.Errorf("the retirement's \"by\" is %d bytes, more than %d", len(r.By), maxRetiredBy)
	}
	return nil
}

// Retire retires the node: with sandboxes left, it records them and the Retirement in stateDir
// and keeps the conflist; with none, it removes now the conflist in confDir, the state
// subdirectories and r.Shim, and returns true (finished). It is idempotent: retiring a retired
// node again records the sandboxes given as well.
func Retire(stateDir, confDir string, r Retirement, sandboxes []string) (finished bool, err error) {
	if err := r.Validate(); err != nil {
		return false, err
	}
	if len(sandboxes) == 0 {
		return true, finishRetirement(stateDir, confDir, r.Shim)
	}
	if _, err := securefs.EnsureDir(stateDir, securefs.Private); err != nil {
		return false, fmt.Errorf("recording the sandboxes left on the node: %w", err)
	}
	dir := filepath.Join(stateDir, RetiredDir, retiredSandboxes)
	for _, d := range []string{filepath.Dir(dir), dir} {
		if _, err := securefs.EnsureDir(d, securefs.Private); err != nil {
			return false, fmt.Errorf("recording the sandboxes left on the node: %w", err)
		}
	}
	for _, id := range sandboxes {
		if err := securefs.WriteFile(filepath.Join(dir, sandboxKey(id)), nil, securefs.Private); err != nil {
			return false, fmt.Errorf("recording sandbox %s: %w", id, err)
		}
	}
	b, err := json.Marshal(r)
	if err != nil {
		return false, fmt.Errorf("encoding the retirement: %w", err)
	}
	return false, securefs.WriteFile(filepath.Join(stateDir, RetiredDir, RetiredFile), append(b, '\n'), securefs.Private)
}

// Unretire removes the retirement: the node network is back and the agent answers again.
func Unretire(stateDir string) error {
	if err := os.RemoveAll(filepath.Join(stateDir, RetiredDir)); err != nil {
		return fmt.Errorf("removing the retirement of the node: %w", err)
	}
	return nil
}

// ErrUntrustedRetirement is wrapped by ReadRetirement when the record, or a directory holding it,
// is not protected (internal/securefs) or not a valid Retirement: it is not acted upon.
var ErrUntrustedRetirement = errors.New("untrusted retirement record")

// ReadRetirement returns the node's Retirement; ok is false when the node is not retired. The
// state directory, RetiredDir and the record must be owned by the node's administrators and closed
// to others, and the record bounded (MaxRetirementSize) and valid; otherwise the error wraps
// ErrUntrustedRetirement.
func ReadRetirement(stateDir string) (r Retirement, ok bool, err error) {
	path := filepath.Join(stateDir, RetiredDir, RetiredFile)
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return Retirement{}, false, nil
	}
	for _, d := range []string{stateDir, filepath.Join(stateDir, RetiredDir), filepath.Join(stateDir, RetiredDir, retiredSandboxes)} {
		if err := securefs.CheckDir(d, securefs.Private); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return Retirement{}, false, fmt.Errorf("%w: %w", ErrUntrustedRetirement, err)
		}
	}
	b, err := securefs.ReadFile(path, securefs.Private, MaxRetirementSize)
	if err != nil {
		return Retirement{}, false, fmt.Errorf("%w: %w", ErrUntrustedRetirement, err)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return Retirement{}, false, fmt.Errorf("%w: decoding %s: %w", ErrUntrustedRetirement, path, err)
	}
	if err := r.Validate(); err != nil {
		return Retirement{}, false, fmt.Errorf("%w: %s: %w", ErrUntrustedRetirement, path, err)
	}
	return r, true, nil
}

// RetiredSandboxes returns how many sandboxes of a retired node are left.
func RetiredSandboxes(stateDir string) (int, error) {
	entries, err := os.ReadDir(filepath.Join(stateDir, RetiredDir, retiredSandboxes))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	return len(entries), err
}

// RetiredNode is what the shim knows of its node, all of it derived by the shim itself: the
// directories from the conflist the runtime passed, its own executable from the process.
type RetiredNode struct {
	// StateDir is the agent's state directory ("stateDir" of the conflist).
	StateDir string
	// ConfDir is the directory of the conflist ("confDir" of the conflist); empty leaves the
	// conflist in place.
	ConfDir string
	// Self is the shim's own executable; the retirement removes it only when the Retirement
	// names the same file. Empty never removes it.
	Self string
}

// DelRetired answers DEL of containerID on a retired node, without the agent: the sandbox is
// forgotten and, when it was the last, the conflist and the retirement go. handled is false when
// the node is not retired or its record is not trusted (skipped is then the reason, for the
// runtime's log): the caller asks the agent. Deleting an unknown container (a workload
// container, a repeated DEL) succeeds.
func (n RetiredNode) DelRetired(containerID string) (handled bool, skipped, err error) {
	r, ok, err := ReadRetirement(n.StateDir)
	if errors.Is(err, ErrUntrustedRetirement) {
		return false, err, nil
	}
	if !ok || err != nil {
		return false, nil, err
	}
	path := filepath.Join(n.StateDir, RetiredDir, retiredSandboxes, sandboxKey(containerID))
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return true, nil, fmt.Errorf("forgetting sandbox %s: %w", containerID, err)
	}
	left, err := RetiredSandboxes(n.StateDir)
	if err != nil {
		return true, nil, fmt.Errorf("counting the sandboxes left: %w", err)
	}
	if left > 0 {
		return true, nil, nil
	}
	shim := ""
	if n.Self != "" && r.Shim != "" && sameFile(n.Self, r.Shim) {
		shim = n.Self
	}
	return true, nil, finishRetirement(n.StateDir, n.ConfDir, shim)
}

// sameFile reports whether a and b name the same existing file.
func sameFile(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}

// finishRetirement removes the conflist (ConfListName in confDir, if confDir is set) and the
// state subdirectories, then shim (already checked by the caller), then the retirement: the node
// holds nothing of winnet's any more. When a removal fails the retirement stays, so the next DEL
// (the runtime retries) finishes it.
func finishRetirement(stateDir, confDir, shim string) error {
	var remove []string
	if confDir != "" {
		remove = append(remove, filepath.Join(confDir, ConfListName))
	}
	for _, d := range StateSubdirs {
		remove = append(remove, filepath.Join(stateDir, d))
	}
	for _, path := range remove {
		if err := os.RemoveAll(path); err != nil {
			return fmt.Errorf("removing %s: %w", path, err)
		}
	}
	if shim != "" {
		if err := RemoveShim(shim); err != nil {
			return err
		}
	}
	return Unretire(stateDir)
}

// RemoveShim removes the shim binary at path, which may be running (this very process, answering
// the last DEL): on Linux a running executable is unlinked; on Windows, where it cannot be deleted
// while it runs, it is renamed aside in its directory (path + ".removed-<pid>", a name the runtime
// never looks up) and that name is deleted at the next reboot (removeshim_windows.go). It refuses a
// path that is not absolute or not named like the shim, and removing a missing shim succeeds.
func RemoveShim(path string) error {
	if err := ValidateShimPath(path); err != nil {
		return err
	}
	if err := removeShim(path); err != nil {
		return fmt.Errorf("removing the CNI shim %s: %w", path, err)
	}
	return nil
}

// ValidateShimPath accepts an empty path (no shim to remove) or an absolute path to a file named
// PluginType or PluginType.exe: nothing else is ever removed as the shim.
func ValidateShimPath(path string) error {
	if path == "" {
		return nil
	}
	if !filepath.IsAbs(path) {
		return fmt.Errorf("the CNI shim path %q is not absolute", path)
	}
	if base := filepath.Base(path); base != PluginType && base != PluginType+".exe" {
		return fmt.Errorf("the CNI shim path %q does not name %s or %s.exe", path, PluginType, PluginType)
	}
	return nil
}

// sandboxKey names a sandbox's file: the hex SHA-256 of its ID, a valid file name whatever the ID.
func sandboxKey(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])
}
