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
)

// A node is retired when winnet's node network is gone for good: the agent tore it down because its
// WindowsNodeNetwork was deleted (helm uninstall), or `winnet-agent reset` removed it. The HNS
// network went with its endpoints and the bridge with its ports, but the runtime may still hold Pod
// sandboxes, and it deletes each one with a CNI DEL that must succeed (the CNI specification asks
// DEL to succeed for what is already gone) even when no agent is left to answer.
//
// So the teardown leaves, in the agent's state directory, RetiredDir holding:
//   - RetiredFile, the Retirement: the conflist (and what else) to remove with the last sandbox;
//   - sandboxes/, one empty file per sandbox left on the node (named by the SHA-256 of its ID).
//
// The conflist stays (without it containerd fails every DEL before running any plugin), and so does
// the shim. The shim reads "stateDir" from the conflist; when RetiredFile exists it answers DEL
// itself, without the agent: it forgets the sandbox and, with the last one, removes the conflist, the
// rest of the agent's state, the shim binary winnet installed (Retirement.Shim, only when the
// agent's configuration names it) and RetiredDir. Without RetiredFile an unreachable agent is restarting, and the shim answers
// try-again-later as before. An agent that makes the node network Ready again removes RetiredDir
// (Unretire) before it writes the conflist.
const (
	// RetiredDir is the directory under the agent's state directory that marks a retired node.
	RetiredDir = "retired"
	// RetiredFile, in RetiredDir, holds the Retirement; it is written last and read first.
	RetiredFile = "node.json"
	// retiredSandboxes, in RetiredDir, holds one file per sandbox left on the node.
	retiredSandboxes = "sandboxes"
)

// Retirement is what the teardown leaves for the shim.
type Retirement struct {
	// Remove are the files and directories the shim removes with the node's last sandbox: the
	// conflist first, then what is left of the agent's state (IPAM allocations, attachments).
	Remove []string `json:"remove"`
	// Shim is the shim binary winnet installed (the agent's --cni-shim-path), removed with the
	// node's last sandbox after Remove; empty leaves the shim where it is (installed by someone
	// else). Only a file named like the shim (PluginType, with ".exe" on Windows) is removed.
	Shim string `json:"shim,omitempty"`
	// By says what retired the node, for a person reading the file.
	By string `json:"by"`
	// Time is when.
	Time time.Time `json:"time"`
}

// Retire retires the node: with sandboxes left, it records them and the Retirement in stateDir
// and keeps the conflist; with none, it removes what r.Remove and r.Shim name now and returns true
// (finished). It is idempotent: retiring a retired node again records the sandboxes given as well.
func Retire(stateDir string, r Retirement, sandboxes []string) (finished bool, err error) {
	if err := ValidateShimPath(r.Shim); err != nil {
		return false, err
	}
	if len(sandboxes) == 0 {
		return true, finishRetirement(stateDir, r)
	}
	dir := filepath.Join(stateDir, RetiredDir, retiredSandboxes)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, fmt.Errorf("recording the sandboxes left on the node: %w", err)
	}
	for _, id := range sandboxes {
		if err := os.WriteFile(filepath.Join(dir, sandboxKey(id)), nil, 0o600); err != nil {
			return false, fmt.Errorf("recording sandbox %s: %w", id, err)
		}
	}
	b, err := json.Marshal(r)
	if err != nil {
		return false, fmt.Errorf("encoding the retirement: %w", err)
	}
	return false, writeFileAtomic(filepath.Join(stateDir, RetiredDir, RetiredFile), append(b, '\n'), 0o600)
}

// Unretire removes the retirement: the node network is back and the agent answers again.
func Unretire(stateDir string) error {
	if err := os.RemoveAll(filepath.Join(stateDir, RetiredDir)); err != nil {
		return fmt.Errorf("removing the retirement of the node: %w", err)
	}
	return nil
}

// ReadRetirement returns the node's Retirement; ok is false when the node is not retired.
func ReadRetirement(stateDir string) (r Retirement, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(stateDir, RetiredDir, RetiredFile))
	if errors.Is(err, fs.ErrNotExist) {
		return Retirement{}, false, nil
	} else if err != nil {
		return Retirement{}, false, fmt.Errorf("reading the retirement of the node: %w", err)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return Retirement{}, false, fmt.Errorf("decoding %s: %w", filepath.Join(stateDir, RetiredDir, RetiredFile), err)
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

// DelRetired answers DEL of containerID on a retired node, without the agent: the sandbox is
// forgotten and, when it was the last, the conflist and the retirement go. handled is false when
// the node is not retired. Deleting an unknown container (a workload container, a repeated DEL)
// succeeds.
func DelRetired(stateDir, containerID string) (handled bool, err error) {
	r, ok, err := ReadRetirement(stateDir)
	if !ok || err != nil {
		return false, err
	}
	path := filepath.Join(stateDir, RetiredDir, retiredSandboxes, sandboxKey(containerID))
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return true, fmt.Errorf("forgetting sandbox %s: %w", containerID, err)
	}
	left, err := RetiredSandboxes(stateDir)
	if err != nil {
		return true, fmt.Errorf("counting the sandboxes left: %w", err)
	}
	if left > 0 {
		return true, nil
	}
	return true, finishRetirement(stateDir, r)
}

// finishRetirement removes the conflist and the rest of the agent's state, then the shim winnet
// installed, then the retirement: the node holds nothing of winnet's any more. When a removal
// fails the retirement stays, so the next DEL (the runtime retries) finishes it.
func finishRetirement(stateDir string, r Retirement) error {
	for _, path := range r.Remove {
		if err := os.RemoveAll(path); err != nil {
			return fmt.Errorf("removing %s: %w", path, err)
		}
	}
	if r.Shim != "" {
		if err := RemoveShim(r.Shim); err != nil {
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
