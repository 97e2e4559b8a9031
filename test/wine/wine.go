package wine

import (
	"testing"
)

// TempDir is t.TempDir for a test that runs under Wine: Wine 8.0 does not implement the POSIX
// deletion mode (FileDispositionInformationEx) of Go's os.RemoveAll, so t.TempDir's own clean-up
// fails there ("unlinkat ...: Invalid function"). Under Wine it first removes what the test left in
// the directory one entry at a time (DeleteFile and RemoveDirectory, which Wine implements); elsewhere
// it is t.TempDir.
func TempDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	if Detected() {
		// Cleanups run last-registered first: this one runs before t.TempDir's RemoveAll, which
		// then finds empty directories, which os.Remove deletes without the unsupported mode.
		t.Cleanup(func() {
			if err := removeTree(dir); err != nil {
				t.Errorf("removing %s under Wine: %v", dir, err)
			}
		})
	}
	return dir
}
