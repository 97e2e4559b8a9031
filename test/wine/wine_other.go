//go:build !windows

package wine

import (
	"net"
	"testing"
)

// Detected reports whether this process runs under Wine: never on this platform.
func Detected() bool { return false }

func removeTree(string) error { return nil }

// AfterListen adapts a fresh named pipe to Wine: nothing to do on this platform.
func AfterListen(testing.TB, string) {}

// ServerVerifier returns the check of a pipe's server tests use under Wine: nil (the platform's
// check) on this platform.
func ServerVerifier() interface{ Verify(conn net.Conn) error } { return nil }
