package securefs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Access is who, besides the node's administrators, may read a directory and its files.
type Access int

const (
	// Private is the agent's state: the administrators only (Linux 0700 directories and 0600
	// files; Windows full control for SYSTEM and Administrators, nothing for anyone else).
	Private Access = iota
	// Public is what the container runtime and people read: the CNI configuration and binary
	// directories (Linux 0755 and 0644; Windows read and execute for Users as well).
	Public
)

func (a Access) String() string {
	if a == Public {
		return "public"
	}
	return "private"
}

var (
	// ErrUntrustedOwner is wrapped when a directory or file is owned by someone other than the
	// node's administrators: winnet refuses it (an administrator has to look) and changes nothing.
	ErrUntrustedOwner = errors.New("not owned by the node's administrators")
	// ErrTooOpen is wrapped when a directory or file grants more than its Access (others may write
	// it, or read private state); EnsureDir repairs it, CheckDir and ReadFile refuse it.
	ErrTooOpen = errors.New("grants access to others than the node's administrators")
	// ErrTooLarge is wrapped by ReadFile for a file larger than its bound.
	ErrTooLarge = errors.New("larger than allowed")
)

// Result says what EnsureDir did.
type Result struct {
	// Created is true when the directory did not exist and was created protected.
	Created bool
	// Repaired lists the paths whose permissions were narrowed (the directory first, then what
	// it holds): the directory was only too open, and its records must be revalidated by their
	// readers before being trusted.
	Repaired []string
}

// EnsureDir creates path protected for a (missing parents are created the same way), or checks
// the existing directory: owned by someone other than the administrators it is refused
// (ErrUntrustedOwner) and left as it is; only too open, it and everything under it are repaired
// (owner and permissions reset) and listed in Result.Repaired.
func EnsureDir(path string, a Access) (Result, error) {
	path = filepath.Clean(path)
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		if err := mkdirAll(path, a); err != nil {
			return Result{}, fmt.Errorf("creating the %s directory %s: %w", a, path, err)
		}
		return Result{Created: true}, CheckDir(path, a)
	} else if err != nil {
		return Result{}, fmt.Errorf("inspecting the %s directory %s: %w", a, path, err)
	}
	if !fi.IsDir() {
		return Result{}, fmt.Errorf("%s exists and is not a directory (mode %s)", path, fi.Mode())
	}
	err = checkPath(path, a, true)
	switch {
	case err == nil:
		return Result{}, nil
	case !errors.Is(err, ErrTooOpen):
		return Result{}, err
	}
	repaired, err := repairTree(path, a)
	if err != nil {
		return Result{Repaired: repaired}, fmt.Errorf("repairing the permissions of %s: %w", path, err)
	}
	return Result{Repaired: repaired}, CheckDir(path, a)
}

// CheckDir verifies, changing nothing, that path is a directory owned by the administrators that
// grants no more than a.
func CheckDir(path string, a Access) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("checking the %s directory %s: %w", a, path, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory (mode %s)", path, fi.Mode())
	}
	return checkPath(path, a, true)
}

// CheckFile verifies, changing nothing, that path is a regular file owned by the administrators
// that grants no more than a.
func CheckFile(path string, a Access) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("checking %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file (mode %s)", path, fi.Mode())
	}
	return checkPath(path, a, false)
}

// WriteFile writes data to path through a temporary file of a unique name in the same directory,
// renamed over path: a reader sees the old file or the new one, and nobody can prepare the
// temporary name. The directory must exist (EnsureDir); the file grants a.
func WriteFile(path string, data []byte, a Access) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	name := tmp.Name()
	err = protectFile(tmp, a)
	if err == nil {
		_, err = tmp.Write(data)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(name, path)
	}
	if err != nil {
		_ = os.Remove(name)
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// CreateNew creates the file at path for writing, granting a from its creation on (on Windows an
// explicit, protected DACL given with the creation, not inherited from the directory): it refuses a
// path that exists, a link or another reparse point included (a link is never followed, dangling
// or not). The caller writes and closes the file.
func CreateNew(path string, a Access) (*os.File, error) {
	f, err := createNew(path, a)
	if err != nil {
		return nil, fmt.Errorf("creating %s: %w", path, err)
	}
	return f, nil
}

// ErrLink is wrapped when a path winnet opens is a link or another reparse point: it is never
// followed, and refused.
var ErrLink = errors.New("is a link or reparse point, never followed")

// OpenAppend opens the file at path for appending (a log), creating it as CreateNew does when it
// does not exist. An existing path is refused with an error naming why, and left as it is, when it
// is a link (ErrLink; never followed, dangling or not), not a regular file, owned by someone other
// than the administrators (ErrUntrustedOwner) or open to others beyond a (ErrTooOpen). Readers may
// read the file while it is open (on Windows too); the caller writes and closes it.
func OpenAppend(path string, a Access) (*os.File, error) {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		f, err := createAppend(path, a)
		if err != nil {
			return nil, fmt.Errorf("creating %s: %w", path, err)
		}
		return f, nil
	case err != nil:
		return nil, fmt.Errorf("opening %s for appending: %w", path, err)
	case fi.Mode()&(fs.ModeSymlink|fs.ModeIrregular) != 0:
		return nil, fmt.Errorf("opening %s for appending: %w (mode %s)", path, ErrLink, fi.Mode())
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("opening %s for appending: not a regular file (mode %s)", path, fi.Mode())
	}
	if err := checkPath(path, a, false); err != nil {
		return nil, fmt.Errorf("opening %s for appending: %w", path, err)
	}
	f, err := openAppend(path)
	if err != nil {
		return nil, fmt.Errorf("opening %s for appending: %w", path, err)
	}
	// What was opened is what was checked: not replaced in between (openAppend follows no link).
	if opened, err := f.Stat(); err != nil || !os.SameFile(fi, opened) {
		f.Close()
		return nil, fmt.Errorf("opening %s for appending: the file changed while it was opened", path)
	}
	return f, nil
}

// ErrNotRegular is wrapped when a path winnet reads is not a regular file (a directory, a device,
// a pipe or a socket): it is refused.
var ErrNotRegular = errors.New("not a regular file")

// OpenNoFollow opens the regular file at path for reading without following a link at path: a
// link or another reparse point is refused (ErrLink), and so is anything else that is not a regular
// file (ErrNotRegular). What it checks is the open file (fstat on Linux, the handle's type and
// attributes on Windows), never the path before it is opened: a link swapped in between is refused
// too. It returns the open file's information; the caller closes the file.
func OpenNoFollow(path string) (*os.File, fs.FileInfo, error) {
	f, err := openNoFollow(path)
	if err != nil {
		return nil, nil, fmt.Errorf("opening %s: %w", path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("opening %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("opening %s: %w (mode %s)", path, ErrNotRegular, fi.Mode())
	}
	return f, fi, nil
}

// ReadFile reads the regular file at path, at most max bytes: a file that is not regular (a link,
// never followed: OpenNoFollow), not owned by the administrators, open to others beyond a, or
// larger than max is refused with an error naming why, and is not read.
func ReadFile(path string, a Access, max int64) ([]byte, error) {
	f, fi, err := OpenNoFollow(path)
	if err != nil {
		return nil, err // "opening <path>: why"
	}
	defer f.Close()
	if err := checkPath(path, a, false); err != nil {
		return nil, err
	}
	if fi.Size() > max {
		return nil, fmt.Errorf("reading %s: %d bytes, %w (%d bytes)", path, fi.Size(), ErrTooLarge, max)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("reading %s: %w (%d bytes)", path, ErrTooLarge, max)
	}
	return b, nil
}

// MoveAside renames path to "<path>.untrusted-<n>" in its directory, so that it is neither read
// again nor lost (an administrator can look at it), and returns the new name.
func MoveAside(path string) (string, error) {
	for n := 1; n < 1000; n++ {
		aside := fmt.Sprintf("%s.untrusted-%d", path, n)
		if _, err := os.Lstat(aside); errors.Is(err, fs.ErrNotExist) {
			if err := os.Rename(path, aside); err != nil {
				return "", fmt.Errorf("moving %s aside: %w", path, err)
			}
			return aside, nil
		}
	}
	return "", fmt.Errorf("moving %s aside: too many untrusted copies beside it", path)
}

// repairTree narrows path and everything under it (links are not followed) to a, and returns the
// paths it changed.
func repairTree(root string, a Access) ([]string, error) {
	var repaired []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		changed, err := repairPath(p, d, a)
		if err != nil {
			return err
		}
		if changed {
			repaired = append(repaired, p)
		}
		return nil
	})
	return repaired, err
}
