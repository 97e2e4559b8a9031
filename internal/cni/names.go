package cni

import (
	"fmt"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/utils"
)

// MaxContainerIDLength is the longest container ID winnet accepts. The agent names files after
// sandbox IDs (its attachment records, a retired node's sandboxes), and a Windows path must stay
// within MAX_PATH (260 characters) without long-path support; runtimes use 64 hex digits.
const MaxContainerIDLength = 128

// windowsReservedNames are the device names Windows resolves in every directory, with any
// extension ("NUL.json" is the NUL device, not a file): a container ID equal to one would make
// the agent write to a device instead of its state directory. Microsoft, "Naming Files, Paths, and
// Namespaces" (learn.microsoft.com/windows/win32/fileio/naming-a-file).
var windowsReservedNames = func() map[string]bool {
	m := map[string]bool{"CON": true, "PRN": true, "AUX": true, "NUL": true, "CONIN$": true, "CONOUT$": true}
	for _, d := range "0123456789" {
		m["COM"+string(d)], m["LPT"+string(d)] = true, true
	}
	return m
}()

// ValidateContainerID checks a container ID (CNI_CONTAINERID, or a sandbox ID from CNI_ARGS or
// CNI_NETNS) named by what in the error: the CNI spec's characters (an alphanumeric, then
// alphanumerics, '_', '.', '-', so that no ID holds a path separator or is "." or ".."), at most
// MaxContainerIDLength bytes, and no Windows device name. The error has code
// ErrInvalidEnvironmentVariables (4).
func ValidateContainerID(what, id string) *types.Error {
	if id == "" {
		return types.NewError(types.ErrInvalidEnvironmentVariables, fmt.Sprintf("required environment variable %s is missing", what), "")
	}
	if err := utils.ValidateContainerID(id); err != nil {
		return types.NewError(types.ErrInvalidEnvironmentVariables, what+": "+err.Msg, err.Details)
	}
	if len(id) > MaxContainerIDLength {
		return types.NewError(types.ErrInvalidEnvironmentVariables,
			fmt.Sprintf("%s is %d bytes, more than winnet's limit of %d", what, len(id), MaxContainerIDLength), "")
	}
	base, _, _ := strings.Cut(id, ".")
	if windowsReservedNames[strings.ToUpper(base)] {
		return types.NewError(types.ErrInvalidEnvironmentVariables,
			fmt.Sprintf("%s %q is a Windows device name, which cannot name a file", what, id), "")
	}
	return nil
}
