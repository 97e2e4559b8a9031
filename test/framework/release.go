package framework

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// PreviousReleaseEnv names the directory of the previous release's build that the upgrade and skew
// tests run: the directory `make previous-release` (hack/build-previous-release.sh) prints.
const PreviousReleaseEnv = "WINNET_PREVIOUS_RELEASE_DIR"

// Release is a build of a winnet release from the git history (bin/release-<version>-<commit>/).
type Release struct {
	// Dir is the build's directory; BinDir holds its linux binaries (winnet-agent, winnet-controller,
	// winnet-cni, kubectl-winnet).
	Dir, BinDir string
	// Version and Commit are the release hack/previous-release names.
	Version, Commit string
}

// PreviousRelease returns the build of hack/previous-release's release that PreviousReleaseEnv
// names. It fails, saying how to make one, when the variable is unset, the build is missing or
// unfinished (no stamp), or it is another release than hack/previous-release names.
func PreviousRelease() (Release, error) {
	howTo := fmt.Sprintf("run 'make previous-release' and set %s to the directory it prints (%s=$(make -s previous-release | tail -1))",
		PreviousReleaseEnv, PreviousReleaseEnv)
	dir := os.Getenv(PreviousReleaseEnv)
	if dir == "" {
		return Release{}, fmt.Errorf("%s is not set: these tests run the previous release's binaries; %s", PreviousReleaseEnv, howTo)
	}
	want, err := previousReleaseLine()
	if err != nil {
		return Release{}, err
	}
	stamp, err := os.ReadFile(filepath.Join(dir, "stamp"))
	if err != nil {
		return Release{}, fmt.Errorf("%s=%s is not a finished build of the previous release (%w); %s", PreviousReleaseEnv, dir, err, howTo)
	}
	r := Release{Dir: dir, BinDir: filepath.Join(dir, "linux")}
	for _, field := range strings.Fields(string(stamp)) {
		k, v, _ := strings.Cut(field, "=")
		switch k {
		case "commit":
			r.Commit = v
		case "version":
			r.Version = v
		}
	}
	if r.Commit != want.Commit || r.Version != want.Version {
		return Release{}, fmt.Errorf("%s=%s holds winnet %s (%s), but hack/previous-release names %s (%s); %s",
			PreviousReleaseEnv, dir, r.Version, r.Commit, want.Version, want.Commit, howTo)
	}
	for _, b := range []string{"winnet-agent", "winnet-controller", "winnet-cni", "kubectl-winnet"} {
		if fi, err := os.Stat(filepath.Join(r.BinDir, b)); err != nil || fi.Mode()&0o111 == 0 {
			return Release{}, fmt.Errorf("the previous release's build %s has no executable %s (%v); %s", dir, b, err, howTo)
		}
	}
	return r, nil
}

// previousReleaseLine reads hack/previous-release: one line "<commit> <version>" besides comments.
func previousReleaseLine() (Release, error) {
	path := filepath.Join(RepoRoot(), "hack", "previous-release")
	b, err := os.ReadFile(path)
	if err != nil {
		return Release{}, err
	}
	var found []Release
	for _, line := range strings.Split(string(b), "\n") {
		line, _, _ = strings.Cut(line, "#")
		if f := strings.Fields(line); len(f) == 2 {
			found = append(found, Release{Commit: f[0], Version: f[1]})
		} else if len(f) != 0 {
			return Release{}, fmt.Errorf("%s: %q is not '<commit> <version>'", path, line)
		}
	}
	if len(found) != 1 {
		return Release{}, errors.New(path + " must name exactly one release")
	}
	return found[0], nil
}
