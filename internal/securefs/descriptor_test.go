package securefs

import (
	"testing"

	. "github.com/onsi/gomega"
)

// TestCheckDescriptor holds the Windows decisions: who may own winnet's directories and what their
// DACL may grant. The SIDs and masks are the ones Windows reports (ProgramData's inherited ACL
// grants Users 0x1200a9 and "write data/add file" 0x116 on its subfolders through CREATOR OWNER).
func TestCheckDescriptor(t *testing.T) {
	const (
		everyone     = "S-1-1-0"
		creatorOwner = "S-1-3-0"
		authUsers    = "S-1-5-11"
		someUser     = "S-1-5-21-1-2-3-1001"
	)
	full := ACE{Allow: true, Mask: 0x1f01ff}
	with := func(a ACE, sid string) ACE { a.SID = sid; return a }
	ours := []ACE{with(full, SIDSystem), with(full, SIDAdministrators)}
	usersRead := ACE{Allow: true, Mask: maskReadExecute, SID: SIDUsers}
	for _, tc := range []struct {
		name    string
		owner   string
		null    bool
		aces    []ACE
		a       Access
		wantErr error
	}{
		{name: "private as winnet creates it", owner: SIDSystem, aces: ours, a: Private},
		{name: "owned by Administrators", owner: SIDAdministrators, aces: ours, a: Private},
		{name: "owned by a user", owner: someUser, aces: ours, a: Private, wantErr: ErrUntrustedOwner},
		{name: "owned by Users", owner: SIDUsers, aces: ours, a: Public, wantErr: ErrUntrustedOwner},
		{name: "NULL DACL", owner: SIDSystem, null: true, a: Private, wantErr: ErrTooOpen},
		{name: "public as winnet creates it", owner: SIDSystem, aces: append(ours, usersRead), a: Public},
		{name: "users read private state", owner: SIDSystem, aces: append(ours, usersRead), a: Private, wantErr: ErrTooOpen},
		{name: "users read through GENERIC_READ", owner: SIDSystem, aces: append(ours, ACE{Allow: true, Mask: maskGenericRead | maskGenericExecute, SID: SIDUsers}), a: Public},
		{name: "users add files (ProgramData's inherited ACL)", owner: SIDSystem, aces: append(ours, usersRead, ACE{Allow: true, Mask: 0x116, SID: SIDUsers}), a: Public, wantErr: ErrTooOpen},
		{name: "CREATOR OWNER full control", owner: SIDSystem, aces: append(ours, ACE{Allow: true, Flags: 0x0b, Mask: 0x10000000, SID: creatorOwner}), a: Public, wantErr: ErrTooOpen},
		{name: "Everyone read", owner: SIDSystem, aces: append(ours, ACE{Allow: true, Mask: maskReadExecute, SID: everyone}), a: Public, wantErr: ErrTooOpen},
		{name: "Authenticated Users modify", owner: SIDSystem, aces: append(ours, with(full, authUsers)), a: Private, wantErr: ErrTooOpen},
		{name: "a deny entry never widens", owner: SIDSystem, aces: append(ours, ACE{Allow: false, Mask: 0x1f01ff, SID: everyone}), a: Private},
		{name: "an empty mask grants nothing", owner: SIDSystem, aces: append(ours, ACE{Allow: true, SID: everyone}), a: Private},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			err := CheckDescriptor(tc.owner, !tc.null, tc.aces, tc.a)
			if tc.wantErr == nil {
				g.Expect(err).NotTo(HaveOccurred())
			} else {
				g.Expect(err).To(MatchError(tc.wantErr))
			}
		})
	}
}

func TestSDDL(t *testing.T) {
	g := NewWithT(t)
	g.Expect(SDDL(Private)).To(Equal("D:P(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)"))
	g.Expect(SDDL(Public)).To(Equal("D:P(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)(A;OICI;0x1200a9;;;BU)"))
}
