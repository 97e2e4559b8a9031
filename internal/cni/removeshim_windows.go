package cni

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/windows"
)

// removeShim deletes the shim when no process runs it. A running executable cannot be deleted on
// Windows but can be renamed: it is moved aside in its directory, where the runtime (which looks up
// <type>.exe) never finds it, and that name is scheduled for deletion at the next reboot
// (MOVEFILE_DELAY_UNTIL_REBOOT; the agent and the shim run as SYSTEM, which may schedule it).
func removeShim(path string) error {
	err := os.Remove(path)
	if err == nil || errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	aside := fmt.Sprintf("%s.removed-%d", path, os.Getpid())
	if err := os.Rename(path, aside); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("renaming it aside: %w", err)
	}
	name, err := windows.UTF16PtrFromString(aside)
	if err != nil {
		return err
	}
	if err := windows.MoveFileEx(name, nil, windows.MOVEFILE_DELAY_UNTIL_REBOOT); err != nil {
		return fmt.Errorf("scheduling %s for deletion at the next reboot: %w", aside, err)
	}
	return nil
}
