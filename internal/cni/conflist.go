package cni

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

const (
	// ConfListName is the file the agent writes into the runtime's CNI configuration directory.
	ConfListName = "10-winnet.conflist"
	// NetworkName is the name of winnet's CNI network.
	NetworkName = "winnet"
	// PluginType is the shim's binary name, the "type" of the conflist's plugin.
	PluginType = "winnet-cni"
	// ConfListVersion is the CNI version of the conflist.
	ConfListVersion = "1.1.0"
)

// ConfList returns the network configuration list the container runtime reads: one plugin, the
// shim, told where the agent listens and where its state directory is (for DEL on a retired node,
// see Retire), and asking the runtime for the Pod's DNS settings (the "dns" capability:
// runtimeConfig.dns).
func ConfList(agentSocket, stateDir string) []byte {
	plugin := map[string]any{"type": PluginType, "agentSocket": agentSocket, "capabilities": map[string]bool{"dns": true}}
	if stateDir != "" {
		plugin["stateDir"] = stateDir
	}
	conf := map[string]any{
		"cniVersion": ConfListVersion,
		"name":       NetworkName,
		"plugins":    []any{plugin},
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		panic(err) // maps of strings always encode
	}
	return append(b, '\n')
}

// WriteConfList writes ConfList(agentSocket, stateDir) to dir/ConfListName unless the file already holds it,
// atomically: a runtime reading the directory sees the old file or the new one, never a part. It
// reports whether it wrote.
func WriteConfList(dir, agentSocket, stateDir string) (bool, error) {
	want := ConfList(agentSocket, stateDir)
	path := filepath.Join(dir, ConfListName)
	if have, err := os.ReadFile(path); err == nil && bytes.Equal(have, want) {
		return false, nil
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("reading %s: %w", path, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, fmt.Errorf("creating CNI configuration directory %s: %w", dir, err)
	}
	if err := writeFileAtomic(path, want, 0o644); err != nil {
		return false, err
	}
	return true, nil
}

// writeFileAtomic writes data to a temporary file beside path and renames it over path.
func writeFileAtomic(path string, data []byte, perm fs.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	name := tmp.Name()
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(name, perm)
	}
	if err == nil {
		err = os.Rename(name, path)
	}
	if err != nil {
		_ = os.Remove(name)
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
