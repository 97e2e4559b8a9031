package peertrust

import (
	"errors"
	"net"
	"testing"

	. "github.com/onsi/gomega"
)

func TestCheckSIDs(t *testing.T) {
	const (
		localService   = "S-1-5-19"
		networkService = "S-1-5-20"
		user           = "S-1-5-21-1-2-3-1001"
	)
	for _, tc := range []struct {
		name, user, owner string
		ok                bool
	}{
		{"a service as SYSTEM (the agent, ovsdb-server, ovs-vswitchd)", SIDSystem, SIDAdministrators, true},
		{"SYSTEM owning its token", SIDSystem, SIDSystem, true},
		{"an elevated administrator", user, SIDAdministrators, true},
		{"an administrator, not elevated", user, user, false},
		{"a user", user, user, false},
		{"LocalService", localService, localService, false},
		{"NetworkService", networkService, networkService, false},
		{"nothing read", "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			err := CheckSIDs(tc.user, tc.owner)
			if tc.ok {
				g.Expect(err).NotTo(HaveOccurred())
			} else {
				g.Expect(err).To(MatchError(ErrUntrustedServer))
			}
		})
	}
}

func TestCheckUID(t *testing.T) {
	g := NewWithT(t)
	g.Expect(CheckUID(0, 1000)).To(Succeed())
	g.Expect(CheckUID(1000, 1000)).To(Succeed(), "the caller's own user")
	g.Expect(CheckUID(65534, 0)).To(MatchError(ErrUntrustedServer))
	g.Expect(CheckUID(-1, -1)).To(MatchError(ErrUntrustedServer), "unknown")
}

// fixed is an Identifier that reports id (or err) for every connection.
type fixed struct {
	id  Identity
	err error
}

func (f fixed) ServerIdentity(net.Conn) (Identity, error) { return f.id, f.err }

func TestVerifier(t *testing.T) {
	g := NewWithT(t)
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	g.Expect(Verifier{Identifier: fixed{id: Identity{PID: 7, User: SIDSystem, Owner: SIDAdministrators}}}.Verify(c1)).To(Succeed())
	err := Verifier{Identifier: fixed{id: Identity{PID: 7, User: "S-1-5-21-1-2-3-1001", Owner: "S-1-5-21-1-2-3-1001"}}}.Verify(c1)
	g.Expect(err).To(MatchError(ErrUntrustedServer))
	g.Expect(err.Error()).To(ContainSubstring("process 7"))
	boom := errors.New("no such process")
	g.Expect(Verifier{Identifier: fixed{err: boom}}.Verify(c1)).To(MatchError(boom), "not knowing is not trusting")
}
