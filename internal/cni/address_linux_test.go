package cni

import (
	"path/filepath"
	"testing"
)

// testAddress returns a fresh agent address private to t.
func testAddress(t *testing.T) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "cni.sock")
}
