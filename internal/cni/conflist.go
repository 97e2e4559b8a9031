package cni

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/winnet-io/winnet/internal/securefs"
)

const (
	// ConfListName is the file the agent writes into the runtime's CNI configuration directory.
	ConfListName = "10-winnet.conflist"
	// NetworkName is the name of winnet's CNI network.
	NetworkName = "winnet"
	// PluginType is the shim's binary name, the "type" of the conflist's plugin.
	PluginType = "winnet-cni"
	// ConfListVersion is the conflist's cniVersion: the version a runtime that does not know CNI
	// spec 1.1's cniVersions list uses. 1.0.0, not 1.1.0: libcni 1.1.x (containerd 1.6 and 1.7, common
	// on Windows nodes) refuses a 1.1.0 configuration ("unsupported CNI result version").
	ConfListVersion = "1.0.0"
)

// ConfListVersions is the conflist's cniVersions (CNI spec 1.1): a runtime that knows it runs the
// plugin in the highest of these it supports, so libcni 1.2 and later (containerd 2.x) use 1.1.0
// and with it STATUS and GC. The shim answers in the version the runtime chose (Shim.Run).
var ConfListVersions = []string{"1.0.0", "1.1.0"}

// ConfList returns the network configuration list the container runtime reads (cniVersion
// ConfListVersion, cniVersions ConfListVersions): one plugin, the shim, told where the agent listens, where its state directory is and where this conflist is
// (for DEL on a retired node, see Retire), and asking the runtime for the Pod's DNS settings (the
// "dns" capability: runtimeConfig.dns) and hostPorts (the "portMappings" capability:
// runtimeConfig.portMappings, which an agent of release 0.1.0 ignores).
func ConfList(agentSocket, stateDir, confDir string) []byte {
	plugin := map[string]any{"type": PluginType, "agentSocket": agentSocket, "capabilities": map[string]bool{"dns": true, "portMappings": true}}
	if stateDir != "" {
		plugin["stateDir"] = stateDir
	}
	if confDir != "" {
		plugin["confDir"] = confDir
	}
	conf := map[string]any{
		"cniVersion":  ConfListVersion,
		"cniVersions": ConfListVersions,
		"name":        NetworkName,
		"plugins":     []any{plugin},
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		panic(err) // maps of strings always encode
	}
	return append(b, '\n')
}

// WriteConfList writes ConfList(agentSocket, stateDir, dir) to dir/ConfListName unless the file
// already holds it, atomically through a temporary file of a unique name: a runtime reading the
// directory sees the old file or the new one, never a part. The directory is created, checked and
// repaired as a public one (internal/securefs: only the administrators may add a conflist that
// the runtime, as SYSTEM, would run). It reports whether it wrote.
func WriteConfList(dir, agentSocket, stateDir string) (bool, error) {
	if _, err := securefs.EnsureDir(dir, securefs.Public); err != nil {
		return false, fmt.Errorf("preparing the CNI configuration directory: %w", err)
	}
	want := ConfList(agentSocket, stateDir, dir)
	path := filepath.Join(dir, ConfListName)
	if have, err := os.ReadFile(path); err == nil && bytes.Equal(have, want) && securefs.CheckFile(path, securefs.Public) == nil {
		return false, nil
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("reading %s: %w", path, err)
	}
	if err := securefs.WriteFile(path, want, securefs.Public); err != nil {
		return false, err
	}
	return true, nil
}
