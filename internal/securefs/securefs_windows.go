package securefs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/windows"
)

// On Windows a directory is created with the security descriptor SDDL(a) (CreateDirectory with
// SECURITY_ATTRIBUTES), so that it never inherits the ACL of its parent (ProgramData lets Users
// create files and folders). Files created in it inherit its entries.

func securityAttributes(a Access) (*windows.SecurityAttributes, error) {
	sd, err := windows.SecurityDescriptorFromString(SDDL(a))
	if err != nil {
		return nil, fmt.Errorf("building the security descriptor %q: %w", SDDL(a), err)
	}
	sa := &windows.SecurityAttributes{SecurityDescriptor: sd}
	sa.Length = uint32(unsafe.Sizeof(*sa))
	return sa, nil
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
	sa, err := securityAttributes(a)
	if err != nil {
		return err
	}
	p, err := windows.UTF16PtrFromString(path)
	if err != nil {
		return err
	}
	if err := windows.CreateDirectory(p, sa); err != nil && !errors.Is(err, windows.ERROR_ALREADY_EXISTS) {
		return err
	}
	return nil
}

// descriptor reads the owner and DACL of path into the platform-neutral types of descriptor.go.
func descriptor(path string) (owner string, daclPresent bool, aces []ACE, err error) {
	sd, err := windows.GetNamedSecurityInfo(path, windows.SE_FILE_OBJECT,
		windows.OWNER_SECURITY_INFORMATION|windows.DACL_SECURITY_INFORMATION)
	if err != nil {
		return "", false, nil, fmt.Errorf("reading the security descriptor of %s: %w", path, err)
	}
	return readDescriptor(sd)
}

func readDescriptor(sd *windows.SECURITY_DESCRIPTOR) (owner string, daclPresent bool, aces []ACE, err error) {
	o, _, err := sd.Owner()
	if err != nil || o == nil {
		return "", false, nil, fmt.Errorf("reading the owner: %w", err)
	}
	dacl, _, err := sd.DACL()
	if errors.Is(err, windows.ERROR_OBJECT_NOT_FOUND) || (err == nil && dacl == nil) {
		return o.String(), false, nil, nil // no DACL, or a NULL DACL: everyone has full control
	} else if err != nil {
		return "", false, nil, fmt.Errorf("reading the DACL: %w", err)
	}
	for i := uint32(0); i < uint32(dacl.AceCount); i++ {
		var ace *windows.ACCESS_ALLOWED_ACE
		if err := windows.GetAce(dacl, i, &ace); err != nil {
			return "", false, nil, fmt.Errorf("reading entry %d of the DACL: %w", i, err)
		}
		e := ACE{Flags: ace.Header.AceFlags, Mask: uint32(ace.Mask)}
		switch ace.Header.AceType {
		case windows.ACCESS_ALLOWED_ACE_TYPE:
			e.Allow = true
		case windows.ACCESS_DENIED_ACE_TYPE:
		default:
			// Object, callback and audit entries have another layout: count them as allowing
			// everything to an unknown trustee, so that the DACL is rewritten.
			aces = append(aces, ACE{Allow: true, Mask: ^uint32(0), SID: "unknown"})
			continue
		}
		e.SID = (*windows.SID)(unsafe.Pointer(&ace.SidStart)).String()
		aces = append(aces, e)
	}
	return o.String(), true, aces, nil
}

func checkPath(path string, a Access, _ bool) error {
	owner, present, aces, err := descriptor(path)
	if err != nil {
		return err
	}
	if err := CheckDescriptor(owner, present, aces, a); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// ownerSID is the owner a repair gives: the process's user when it is SYSTEM (the agent's
// service and HostProcess), Administrators otherwise (an elevated administrator may give that).
func ownerSID() (*windows.SID, error) {
	user, err := windows.GetCurrentProcessToken().GetTokenUser()
	if err == nil && user.User.Sid.String() == SIDSystem {
		return user.User.Sid, nil
	}
	return windows.StringToSid(SIDAdministrators)
}

func repairPath(path string, _ fs.DirEntry, a Access) (bool, error) {
	err := checkPath(path, a, false)
	if err == nil {
		return false, nil
	}
	if !errors.Is(err, ErrTooOpen) && !errors.Is(err, ErrUntrustedOwner) {
		return false, err
	}
	sd, err := windows.SecurityDescriptorFromString(SDDL(a))
	if err != nil {
		return false, fmt.Errorf("building the security descriptor %q: %w", SDDL(a), err)
	}
	dacl, _, err := sd.DACL()
	if err != nil {
		return false, fmt.Errorf("reading the DACL of %q: %w", SDDL(a), err)
	}
	owner, err := ownerSID()
	if err != nil {
		return false, err
	}
	if err := windows.SetNamedSecurityInfo(path, windows.SE_FILE_OBJECT,
		windows.OWNER_SECURITY_INFORMATION|windows.DACL_SECURITY_INFORMATION|windows.PROTECTED_DACL_SECURITY_INFORMATION,
		owner, nil, dacl, nil); err != nil {
		return false, fmt.Errorf("setting the security descriptor of %s: %w", path, err)
	}
	return true, nil
}

// protectFile gives a file WriteFile creates the directory's descriptor explicitly (protected), so
// that it never depends on what the directory lets its children inherit.
func protectFile(f *os.File, a Access) error {
	sd, err := windows.SecurityDescriptorFromString(SDDL(a))
	if err != nil {
		return fmt.Errorf("building the security descriptor %q: %w", SDDL(a), err)
	}
	dacl, _, err := sd.DACL()
	if err != nil {
		return fmt.Errorf("reading the DACL of %q: %w", SDDL(a), err)
	}
	if err := windows.SetSecurityInfo(windows.Handle(f.Fd()), windows.SE_FILE_OBJECT,
		windows.DACL_SECURITY_INFORMATION|windows.PROTECTED_DACL_SECURITY_INFORMATION, nil, nil, dacl, nil); err != nil {
		return fmt.Errorf("setting the security descriptor of %s: %w", f.Name(), err)
	}
	return nil
}

// readShare lets the writer of a file (the agent's log, opened with appendShare), and whoever
// renames or deletes it, go on while it is read.
const readShare = windows.FILE_SHARE_READ | windows.FILE_SHARE_WRITE | windows.FILE_SHARE_DELETE

// openNoFollow opens path for reading with FILE_FLAG_OPEN_REPARSE_POINT, so that a link (or another
// reparse point) is opened as itself, never followed, and then refused from the open handle: its
// type must be a disk file and its attributes neither a reparse point (ErrLink) nor a directory.
func openNoFollow(path string) (*os.File, error) {
	p, err := windows.UTF16PtrFromString(path)
	if err != nil {
		return nil, err
	}
	h, err := windows.CreateFile(p, windows.GENERIC_READ, readShare, nil,
		windows.OPEN_EXISTING, windows.FILE_ATTRIBUTE_NORMAL|windows.FILE_FLAG_OPEN_REPARSE_POINT, 0)
	if err != nil {
		return nil, err
	}
	if t, err := windows.GetFileType(h); err != nil {
		windows.CloseHandle(h)
		return nil, err
	} else if t != windows.FILE_TYPE_DISK {
		windows.CloseHandle(h)
		return nil, fmt.Errorf("%w (file type %d)", ErrNotRegular, t)
	}
	var info windows.ByHandleFileInformation
	if err := windows.GetFileInformationByHandle(h, &info); err != nil {
		windows.CloseHandle(h)
		return nil, err
	}
	switch {
	case info.FileAttributes&windows.FILE_ATTRIBUTE_REPARSE_POINT != 0:
		windows.CloseHandle(h)
		return nil, fmt.Errorf("%w (attributes %#x)", ErrLink, info.FileAttributes)
	case info.FileAttributes&windows.FILE_ATTRIBUTE_DIRECTORY != 0:
		windows.CloseHandle(h)
		return nil, fmt.Errorf("%w: a directory (attributes %#x)", ErrNotRegular, info.FileAttributes)
	}
	return os.NewFile(uintptr(h), path), nil
}

// createNew creates path with CREATE_NEW, which fails on any existing name, and
// FILE_FLAG_OPEN_REPARSE_POINT, so that a link at path is never followed; the security descriptor
// SDDL(a) (protected: nothing inherited) is given with the creation.
func createNew(path string, a Access) (*os.File, error) {
	return create(path, a, windows.GENERIC_WRITE, 0)
}

// create is createNew with the access and sharing given.
func create(path string, a Access, access, share uint32) (*os.File, error) {
	sa, err := securityAttributes(a)
	if err != nil {
		return nil, err
	}
	p, err := windows.UTF16PtrFromString(path)
	if err != nil {
		return nil, err
	}
	h, err := windows.CreateFile(p, access, share, sa, windows.CREATE_NEW,
		windows.FILE_ATTRIBUTE_NORMAL|windows.FILE_FLAG_OPEN_REPARSE_POINT, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(h), path), nil
}

// appendShare lets others read (an administrator's tail, a log shipper) and rename or delete a log
// the agent holds open; nobody else writes it.
const appendShare = windows.FILE_SHARE_READ | windows.FILE_SHARE_DELETE

// openAppend opens an existing path for appending (FILE_APPEND_DATA only: every write goes to the
// end) with FILE_FLAG_OPEN_REPARSE_POINT, so that a link is opened as itself, never followed, and
// refused.
func openAppend(path string) (*os.File, error) {
	p, err := windows.UTF16PtrFromString(path)
	if err != nil {
		return nil, err
	}
	h, err := windows.CreateFile(p, windows.FILE_APPEND_DATA|windows.SYNCHRONIZE|windows.FILE_READ_ATTRIBUTES, appendShare, nil,
		windows.OPEN_EXISTING, windows.FILE_ATTRIBUTE_NORMAL|windows.FILE_FLAG_OPEN_REPARSE_POINT, 0)
	if err != nil {
		return nil, err
	}
	var info windows.ByHandleFileInformation
	if err := windows.GetFileInformationByHandle(h, &info); err != nil {
		windows.CloseHandle(h)
		return nil, err
	}
	if info.FileAttributes&(windows.FILE_ATTRIBUTE_REPARSE_POINT|windows.FILE_ATTRIBUTE_DIRECTORY) != 0 {
		windows.CloseHandle(h)
		return nil, fmt.Errorf("%s: %w (attributes %#x)", path, ErrLink, info.FileAttributes)
	}
	return os.NewFile(uintptr(h), path), nil
}

// createAppend is createNew, appending and shared for reading (appendShare).
func createAppend(path string, a Access) (*os.File, error) {
	return create(path, a, windows.FILE_APPEND_DATA|windows.SYNCHRONIZE|windows.FILE_READ_ATTRIBUTES, appendShare)
}
