// Package wine runs winnet's Windows test binaries under Wine (make test-windows: see run/ and
// docs/testing.md) and gives those tests the few adjustments Wine needs where it departs from
// Windows (TempDir, AfterListen); each is a no-op on Windows and Linux.
package wine
