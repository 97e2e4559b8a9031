//go:build !linux && !windows

package cni

import "testing"

// testAddress stops t: the transport exists only on Linux and Windows.
func testAddress(t *testing.T) string {
	t.Helper()
	t.Skip("winnet CNI transport is not supported on this platform")
	return ""
}
