package securefs

import (
	"fmt"
	"strings"
)

// The Windows side of Access, kept free of Windows calls so that its decisions are tested on
// every platform: securefs_windows.go reads a file's owner and DACL into these types.

// Well-known SIDs.
const (
	// SIDSystem is LocalSystem, which the agent, the shim (run by containerd) and OVS run as.
	SIDSystem = "S-1-5-18"
	// SIDAdministrators is BUILTIN\Administrators.
	SIDAdministrators = "S-1-5-32-544"
	// SIDUsers is BUILTIN\Users.
	SIDUsers = "S-1-5-32-545"
)

// Access masks of a file or directory.
const (
	// maskReadExecute is FILE_GENERIC_READ | FILE_GENERIC_EXECUTE (0x1200a9, "read & execute").
	maskReadExecute uint32 = 0x001200a9
	// maskGenericRead and maskGenericExecute are GENERIC_READ and GENERIC_EXECUTE.
	maskGenericRead    uint32 = 0x80000000
	maskGenericExecute uint32 = 0x20000000
)

// ACE is one access control entry of a DACL.
type ACE struct {
	// Allow is true for an access-allowed entry; a denying entry never widens access.
	Allow bool
	// Flags are the ACE's inheritance flags (OBJECT_INHERIT_ACE, ...).
	Flags uint8
	// Mask is the access mask.
	Mask uint32
	// SID is the trustee, as a string ("S-1-5-18").
	SID string
}

// SDDL is the security descriptor winnet gives a directory of Access a (and, through inheritance,
// what is created in it): a protected DACL (nothing inherited from ProgramData or C:\) granting
// full control to SYSTEM and Administrators and, for Public, read and execute to Users. The owner
// is left to the creating token: SYSTEM for the agent and the shim.
func SDDL(a Access) string {
	var b strings.Builder
	b.WriteString("D:P(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)")
	if a == Public {
		b.WriteString("(A;OICI;0x1200a9;;;BU)")
	}
	return b.String()
}

// TrustedOwner reports whether sid may own winnet's directories and files: SYSTEM, or
// Administrators (the owner Windows gives what an elevated administrator creates).
func TrustedOwner(sid string) bool {
	return sid == SIDSystem || sid == SIDAdministrators
}

// CheckDescriptor decides whether an object owned by owner, whose DACL is aces (daclPresent false
// is a NULL DACL: everyone has full control), grants no more than a. It wraps ErrUntrustedOwner
// for an owner that is not SYSTEM or Administrators (refused), ErrTooOpen for a DACL that allows
// anything to anyone else (repaired), and is nil otherwise.
func CheckDescriptor(owner string, daclPresent bool, aces []ACE, a Access) error {
	if !TrustedOwner(owner) {
		return fmt.Errorf("owner %s: %w", owner, ErrUntrustedOwner)
	}
	if !daclPresent {
		return fmt.Errorf("a NULL DACL lets everyone in: %w", ErrTooOpen)
	}
	for _, ace := range aces {
		if !ace.Allow || ace.Mask == 0 || TrustedOwner(ace.SID) {
			continue
		}
		if a == Public && ace.SID == SIDUsers && ace.Mask&^(maskReadExecute|maskGenericRead|maskGenericExecute) == 0 {
			continue
		}
		return fmt.Errorf("the DACL allows %#x to %s: %w", ace.Mask, ace.SID, ErrTooOpen)
	}
	return nil
}
