package winnet

import (
	"os"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

var semver = regexp.MustCompile(`^([0-9]+)\.([0-9]+)\.([0-9]+)(-[0-9A-Za-z.-]+)?$`)

// TestVersionFile: VERSION is one semantic version, the release the binaries report.
func TestVersionFile(t *testing.T) {
	g := NewWithT(t)
	b, err := os.ReadFile("VERSION")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(b)).To(Equal(Version+"\n"), "VERSION holds the version and a newline, nothing else")
	g.Expect(Version).To(MatchRegexp(semver.String()))
}

// TestPreviousRelease: hack/previous-release names one commit and a version older than VERSION, and
// CHANGELOG.md has a section for both releases.
func TestPreviousRelease(t *testing.T) {
	g := NewWithT(t)
	b, err := os.ReadFile("hack/previous-release")
	g.Expect(err).NotTo(HaveOccurred())
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if l, _, _ = strings.Cut(l, "#"); strings.TrimSpace(l) != "" {
			lines = append(lines, strings.TrimSpace(l))
		}
	}
	g.Expect(lines).To(HaveLen(1), "hack/previous-release holds one line <commit> <version>")
	fields := strings.Fields(lines[0])
	g.Expect(fields).To(HaveLen(2))
	commit, previous := fields[0], fields[1]
	g.Expect(commit).To(MatchRegexp(`^[0-9a-f]{40}$`))
	g.Expect(previous).To(MatchRegexp(semver.String()))
	g.Expect(older(previous, Version)).To(BeTrue(), "the previous release %s is older than VERSION %s", previous, Version)

	changelog, err := os.ReadFile("CHANGELOG.md")
	g.Expect(err).NotTo(HaveOccurred())
	for _, v := range []string{Version, previous} {
		g.Expect(string(changelog)).To(MatchRegexp(`(?m)^## \[`+regexp.QuoteMeta(v)+`\] - `), "CHANGELOG.md has a section for %s", v)
	}
}

// older reports whether version a comes before b (major, minor, patch; a pre-release before its
// release).
func older(a, b string) bool {
	ma, mb := semver.FindStringSubmatch(a), semver.FindStringSubmatch(b)
	for i := 1; i <= 3; i++ {
		x, _ := strconv.Atoi(ma[i])
		y, _ := strconv.Atoi(mb[i])
		if x != y {
			return x < y
		}
	}
	return ma[4] != "" && mb[4] == ""
}

func TestRevision(t *testing.T) {
	const commit = "0123456789abcdef0123456789abcdef01234567"
	cases := []struct {
		name     string
		settings []debug.BuildSetting
		want     string
	}{
		{"none recorded", nil, UnknownRevision},
		{"clean tree", []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: commit}, {Key: "vcs.modified", Value: "false"}}, commit},
		{"modified tree", []debug.BuildSetting{{Key: "vcs.revision", Value: commit}, {Key: "vcs.modified", Value: "true"}}, commit + "-modified"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			NewWithT(t).Expect(revision(c.settings)).To(Equal(c.want))
		})
	}
}

func TestBuildInfoString(t *testing.T) {
	const commit = "0123456789abcdef0123456789abcdef01234567"
	cases := []struct {
		revision, want string
	}{
		{commit, "winnet-agent 0.2.0 (revision 0123456789ab, go1.26.11)"},
		{commit + "-modified", "winnet-agent 0.2.0 (revision 0123456789ab-modified, go1.26.11)"},
		{UnknownRevision, "winnet-agent 0.2.0 (revision unknown, go1.26.11)"},
	}
	for _, c := range cases {
		b := BuildInfo{Version: "0.2.0", Revision: c.revision, GoVersion: "go1.26.11"}
		NewWithT(t).Expect(b.String("winnet-agent")).To(Equal(c.want))
	}
}

func TestBuild(t *testing.T) {
	g := NewWithT(t)
	b := Build()
	g.Expect(b.Version).To(Equal(Version))
	g.Expect(b.GoVersion).To(HavePrefix("go"))
	g.Expect(b.Revision).NotTo(BeEmpty())
}
