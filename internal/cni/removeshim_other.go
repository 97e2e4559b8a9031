//go:build !windows

package cni

import (
	"errors"
	"io/fs"
	"os"
)

// removeShim unlinks the shim: a running executable keeps running from its unlinked inode.
func removeShim(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
