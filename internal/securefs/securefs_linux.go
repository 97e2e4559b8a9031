package securefs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// On Linux a directory of Access Private is 0700 and its files 0600 (0700 for executables); a
// Public one 0755 and 0644 (0755). Everything is owned by root, or by the user the agent runs as
// (tests).

// allowed returns the permission bits a may grant at most.
func allowed(a Access) fs.FileMode {
	if a == Public {
		return 0o755
	}
	return 0o700
}

// dirMode is the mode of a directory of Access a.
func dirMode(a Access) fs.FileMode { return allowed(a) }

// fileMode is the mode of a file WriteFile writes.
func fileMode(a Access) fs.FileMode {
	if a == Public {
		return 0o644
	}
	return 0o600
}

func mkdirAll(path string, a Access) error {
	parent := filepath.Dir(path)
	if parent != path {
		if _, err := os.Lstat(parent); errors.Is(err, fs.ErrNotExist) {
			if err := mkdirAll(parent, a); err != nil {
				return err
			}
		}
	}
	if err := os.Mkdir(path, dirMode(a)); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return os.Chmod(path, dirMode(a)) // the umask may have narrowed it; never wider
}

// trustedUID reports whether uid may own winnet's files.
func trustedUID(uid uint32) bool {
	return uid == 0 || int(uid) == os.Geteuid()
}

func checkPath(path string, a Access, _ bool) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("checking %s: %w", path, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("checking %s: no owner information", path)
	}
	if !trustedUID(st.Uid) {
		return fmt.Errorf("%s is owned by uid %d: %w", path, st.Uid, ErrUntrustedOwner)
	}
	if extra := fi.Mode().Perm() &^ allowed(a); extra != 0 || fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
		return fmt.Errorf("%s has mode %s (at most %s for %s): %w", path, fi.Mode(), allowed(a), a, ErrTooOpen)
	}
	return nil
}

func repairPath(path string, d fs.DirEntry, a Access) (bool, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return false, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return false, fmt.Errorf("%s: no owner information", path)
	}
	changed := false
	if !trustedUID(st.Uid) {
		if err := os.Lchown(path, os.Geteuid(), os.Getegid()); err != nil {
			return false, err
		}
		changed = true
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return changed, nil // a link's own mode means nothing; readers never follow one
	}
	mode := fi.Mode().Perm() & allowed(a)
	if d.IsDir() {
		mode = dirMode(a)
	}
	if mode != fi.Mode().Perm() || fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
		if err := os.Chmod(path, mode); err != nil {
			return false, err
		}
		changed = true
	}
	return changed, nil
}

func protectFile(f *os.File, a Access) error {
	return f.Chmod(fileMode(a))
}

// openNoFollow opens path for reading with O_NOFOLLOW (a link at path fails with ELOOP: ErrLink)
// and O_NONBLOCK (a FIFO does not block the open; OpenNoFollow refuses it after fstat).
func openNoFollow(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if errors.Is(err, unix.ELOOP) {
		return nil, ErrLink
	}
	return f, err
}

// createNew opens path with O_CREAT|O_EXCL, which fails on any existing name, a symbolic link
// (dangling or not) included, and O_NOFOLLOW; the mode is set again after the umask.
func createNew(path string, a Access) (*os.File, error) {
	return create(path, a, os.O_WRONLY)
}

// create is createNew with the open flags given (os.O_WRONLY, with os.O_APPEND or not).
func create(path string, a Access, flags int) (*os.File, error) {
	f, err := os.OpenFile(path, flags|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, fileMode(a))
	if err != nil {
		return nil, err
	}
	if err := protectFile(f, a); err != nil {
		f.Close()
		_ = os.Remove(path)
		return nil, err
	}
	return f, nil
}

// openAppend opens an existing path for appending with O_NOFOLLOW: a link fails.
func openAppend(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_WRONLY|os.O_APPEND|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
}

// createAppend is createNew, appending.
func createAppend(path string, a Access) (*os.File, error) {
	return create(path, a, os.O_WRONLY|os.O_APPEND)
}
