package framework

import (
	"path/filepath"
	"runtime"
)

// RepoRoot is the root of the winnet repository, found from this file's location.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}
