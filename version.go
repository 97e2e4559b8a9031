package winnet

import (
	_ "embed"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

//go:embed VERSION
var versionFile string

// Version is winnet's release, such as "0.2.0": the VERSION file at the root of the repository,
// embedded at build time, so that `go build` of any checkout has it without linker flags.
var Version = strings.TrimSpace(versionFile)

// UnknownRevision is the revision of a build the go command recorded none for (a tree without git
// metadata, such as a source archive, or go build -buildvcs=false).
const UnknownRevision = "unknown"

// BuildInfo is what a winnet binary knows of its build.
type BuildInfo struct {
	// Version is winnet's release (Version).
	Version string
	// Revision is the git commit the binary was built from, with "-modified" when the tree had
	// uncommitted changes (vcs.revision and vcs.modified of the go command), or UnknownRevision.
	Revision string
	// GoVersion is the Go toolchain that built the binary, such as "go1.26.11".
	GoVersion string
}

// Build returns the running binary's build information.
func Build() BuildInfo {
	info := BuildInfo{Version: Version, Revision: UnknownRevision, GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return info
	}
	info.Revision = revision(bi.Settings)
	return info
}

// revision is the commit of the go command's vcs settings, "-modified" appended for a dirty tree.
func revision(settings []debug.BuildSetting) string {
	var rev string
	var modified bool
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev == "" {
		return UnknownRevision
	}
	if modified {
		rev += "-modified"
	}
	return rev
}

// String is what `<command> --version` prints: "winnet-agent 0.2.0 (revision 0123456789ab, go1.26.11)",
// the revision shortened to 12 hexadecimal digits.
func (b BuildInfo) String(command string) string {
	rev := b.Revision
	if hash, modified, found := strings.Cut(rev, "-"); len(hash) > 12 {
		rev = hash[:12]
		if found {
			rev += "-" + modified
		}
	}
	return fmt.Sprintf("%s %s (revision %s, %s)", command, b.Version, rev, b.GoVersion)
}
