package cni

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// testAddress returns a fresh agent address private to t.
func testAddress(t *testing.T) string {
	t.Helper()
	return fmt.Sprintf(`\\.\pipe\winnet-cni-test-%d`, rand.Uint64())
}
