// Command run builds the Windows test binaries of the packages test/wine/packages.txt names
// (GOOS=windows go test -c) and runs each under Wine in the prefix hack/setup-wine.sh made, passing
// the tests test/wine/skips.txt names to -test.skip. It prints every skipped test with its reason,
// each package's counts and time, and fails on a failed test, on a test that skipped itself (only
// the list may skip), on a list entry that names no test, and on a package that builds for Windows
// with tests but is on no line of packages.txt. make test-windows runs it.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/winnet-io/winnet/test/hostcmd"
)

const module = "github.com/winnet-io/winnet/"

func main() {
	root, err := os.Getwd()
	if err != nil {
		fail(err)
	}
	prefix := flag.String("prefix", filepath.Join(root, "bin/wine/prefix"), "the Wine prefix (hack/setup-wine.sh makes it)")
	out := flag.String("out", filepath.Join(root, "bin/wine"), "where the test binaries and their logs go")
	packages := flag.String("packages", filepath.Join(root, "test/wine/packages.txt"), "the packages to run and to leave out")
	skips := flag.String("skips", filepath.Join(root, "test/wine/skips.txt"), "the tests that cannot run under Wine, with their reasons")
	timeout := flag.Duration("timeout", 5*time.Minute, "the time one package's tests may take")
	only := flag.String("run", "", "run only this package of the list (for a person; make test-windows runs all)")
	flag.Parse()

	ctx := context.Background()
	pkgs, err := readPackages(*packages)
	if err != nil {
		fail(err)
	}
	t0 := time.Now()
	if err := checkCoverage(ctx, root, pkgs, *packages); err != nil {
		fail(err)
	}
	fmt.Printf("test-windows: every package with Windows tests is in %s (checked in %.1fs)\n", *packages, time.Since(t0).Seconds())
	skipList, err := readSkips(*skips, pkgs)
	if err != nil {
		fail(err)
	}
	if _, err := os.Stat(filepath.Join(*prefix, "system.reg")); err != nil {
		fail(fmt.Errorf("no Wine prefix at %s: run hack/setup-wine.sh (make test-windows does): %w", *prefix, err))
	}

	// One wineserver for the whole run (each binary would otherwise start its own, seconds each),
	// staying 2 minutes after the last process at most, and stopped at the end.
	server := hostcmd.Command("wineserver64", "-p120")
	server.Env = append(os.Environ(), "WINEPREFIX="+*prefix)
	// Its output goes to /dev/null (no pipe): the daemon it forks would hold a pipe open.
	if err := server.Run(); err != nil {
		fail(fmt.Errorf("starting the prefix's wineserver: %w", err))
	}

	fmt.Println("test-windows: tests that cannot run under Wine (test/wine/skips.txt):")
	for _, s := range skipList {
		fmt.Printf("  skip %-26s %-48s %s\n", s.pkg, s.test, s.reason)
	}
	start := time.Now()
	var total result
	failed := false
	for _, p := range pkgs {
		if !p.run || (*only != "" && p.path != *only) {
			continue
		}
		r, err := runPackage(ctx, root, *out, *prefix, p.path, skipsOf(skipList, p.path), *timeout)
		total.add(r)
		fmt.Printf("test-windows %-26s %3d passed, %d failed, %d skipped by the list  build %5.1fs  list %4.1fs  run %5.1fs\n",
			p.path, r.passed, len(r.failed), r.listed, r.build.Seconds(), r.list.Seconds(), r.run.Seconds())
		if err != nil {
			failed = true
			fmt.Printf("test-windows %s: %v\n", p.path, err)
		}
	}
	fmt.Printf("test-windows: under Wine in %.0fs (building %.0fs, running %.0fs)\n",
		time.Since(start).Seconds(), total.build.Seconds(), total.run.Seconds())
	// Stop the prefix's wineserver now rather than when it times out.
	stop := hostcmd.Command("wineserver64", "-k")
	stop.Env = append(os.Environ(), "WINEPREFIX="+*prefix)
	_ = stop.Run()
	fmt.Printf("wine: %d passed, %d failed, %d skipped\n", total.passed, len(total.failed), total.listed)
	if failed || total.passed == 0 {
		os.Exit(1)
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "test-windows: %v\n", err)
	os.Exit(1)
}

type pkg struct {
	path string
	run  bool
}

// readPackages reads packages.txt: "run|exclude PACKAGE WHY", each package once, each with a why.
func readPackages(file string) ([]pkg, error) {
	var pkgs []pkg
	seen := map[string]bool{}
	err := eachLine(file, func(n int, f []string) error {
		if len(f) < 3 || (f[0] != "run" && f[0] != "exclude") {
			return fmt.Errorf("%s:%d: want \"run|exclude PACKAGE WHY\"", file, n)
		}
		if seen[f[1]] {
			return fmt.Errorf("%s:%d: %s is listed twice", file, n, f[1])
		}
		seen[f[1]] = true
		pkgs = append(pkgs, pkg{path: f[1], run: f[0] == "run"})
		return nil
	})
	return pkgs, err
}

// checkCoverage fails when a package whose tests build for Windows is on no line of the list, or
// when the list names a package without such tests.
func checkCoverage(ctx context.Context, root string, pkgs []pkg, file string) error {
	cmd := hostcmd.CommandContext(ctx, "go", "list", "-f", "{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}", "./...")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS=windows")
	b, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("listing the packages with tests for Windows: %w", err)
	}
	listed := map[string]bool{}
	for _, p := range pkgs {
		listed[p.path] = true
	}
	var errs []error
	for _, line := range strings.Fields(string(b)) {
		p := strings.TrimPrefix(line, module)
		if line+"/" == module {
			p = "." // the module's root package (package winnet)
		}
		if !listed[p] {
			errs = append(errs, fmt.Errorf("%s has tests that build for Windows but is not in %s: add it (run or exclude, with why)", p, file))
		}
		delete(listed, p)
	}
	for p := range listed {
		errs = append(errs, fmt.Errorf("%s names %s, which has no tests that build for Windows", file, p))
	}
	return errors.Join(errs...)
}

type skip struct {
	pkg, test, reason string
}

// readSkips reads skips.txt: "PACKAGE TestName REASON", of packages that are run.
func readSkips(file string, pkgs []pkg) ([]skip, error) {
	run := map[string]bool{}
	for _, p := range pkgs {
		run[p.path] = p.run
	}
	var out []skip
	seen := map[string]bool{}
	testName := regexp.MustCompile(`^Test[A-Za-z0-9_]*$`)
	err := eachLine(file, func(n int, f []string) error {
		if len(f) < 3 || !testName.MatchString(f[1]) {
			return fmt.Errorf("%s:%d: want \"PACKAGE TestName REASON\"", file, n)
		}
		if !run[f[0]] {
			return fmt.Errorf("%s:%d: %s is not run under Wine (test/wine/packages.txt)", file, n, f[0])
		}
		if seen[f[0]+" "+f[1]] {
			return fmt.Errorf("%s:%d: %s %s is listed twice", file, n, f[0], f[1])
		}
		seen[f[0]+" "+f[1]] = true
		out = append(out, skip{pkg: f[0], test: f[1], reason: strings.Join(f[2:], " ")})
		return nil
	})
	return out, err
}

func skipsOf(l []skip, p string) []string {
	var out []string
	for _, s := range l {
		if s.pkg == p {
			out = append(out, s.test)
		}
	}
	return out
}

func eachLine(file string, fn func(n int, fields []string) error) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for n := 1; s.Scan(); n++ {
		line := strings.TrimSpace(s.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := fn(n, strings.Fields(line)); err != nil {
			return err
		}
	}
	return s.Err()
}

type result struct {
	passed, listed   int
	failed           []string
	build, list, run time.Duration
}

func (r *result) add(o result) {
	r.passed += o.passed
	r.listed += o.listed
	r.failed = append(r.failed, o.failed...)
	r.build += o.build
	r.list += o.list
	r.run += o.run
}

var (
	topPass = regexp.MustCompile(`(?m)^--- PASS: (\S+)`)
	topFail = regexp.MustCompile(`(?m)^--- FAIL: (\S+)`)
	topSkip = regexp.MustCompile(`(?m)^--- SKIP: (\S+)`)
)

// runPackage builds p's Windows test binary and runs it under Wine with the listed tests skipped;
// the binary's output goes to OUT/<name>.log.
func runPackage(ctx context.Context, root, out, prefix, p string, skipped []string, timeout time.Duration) (result, error) {
	var r result
	name := strings.ReplaceAll(p, "/", "_")
	exe := filepath.Join(out, "tests", name+".test.exe")
	if err := os.MkdirAll(filepath.Dir(exe), 0o755); err != nil {
		return r, err
	}
	t0 := time.Now()
	build := hostcmd.CommandContext(ctx, "go", "test", "-c", "-o", exe, "./"+p)
	build.Dir = root
	build.Env = append(os.Environ(), "GOOS=windows", "GOARCH=amd64")
	if b, err := build.CombinedOutput(); err != nil {
		return r, fmt.Errorf("building the Windows test binary: %w\n%s", err, b)
	}
	r.build = time.Since(t0)

	env := append(os.Environ(), "WINEPREFIX="+prefix, "WINEDEBUG=-all")
	// Every listed name must be a test of the binary: a stale entry would hide nothing and say so.
	listFile := filepath.Join(out, name+".list")
	b, err := runToFile(ctx, env, "", listFile, exe, "-test.list", ".")
	if err != nil {
		return r, fmt.Errorf("listing the tests under Wine: %w", err)
	}
	have := map[string]bool{}
	for _, t := range strings.Fields(string(b)) {
		have[t] = true
	}
	for _, s := range skipped {
		if !have[s] {
			return r, fmt.Errorf("test/wine/skips.txt names %s, which is no test of %s", s, p)
		}
	}
	r.listed = len(skipped)
	r.list = time.Since(t0) - r.build

	args := []string{exe, "-test.v", "-test.count=1", "-test.timeout", timeout.String()}
	if len(skipped) > 0 {
		sort.Strings(skipped)
		args = append(args, "-test.skip", "^("+strings.Join(skipped, "|")+")$")
	}
	rctx, cancel := context.WithTimeout(ctx, timeout+time.Minute)
	defer cancel()
	t1 := time.Now()
	logFile := filepath.Join(out, name+".log")
	// In the package's directory, as go test does: a test finds its testdata.
	output, runErr := runToFile(rctx, env, filepath.Join(root, p), logFile, args...)
	r.run = time.Since(t1)
	if output == nil {
		return r, runErr
	}
	r.passed = len(topPass.FindAll(output, -1))
	for _, m := range topFail.FindAllSubmatch(output, -1) {
		r.failed = append(r.failed, string(m[1]))
	}
	var errs []error
	for _, m := range topSkip.FindAllSubmatch(output, -1) {
		errs = append(errs, fmt.Errorf("%s skipped itself under Wine: only test/wine/skips.txt may skip, with a reason", m[1]))
	}
	if len(r.failed) > 0 {
		errs = append(errs, fmt.Errorf("failed: %s (log: %s)\n%s", strings.Join(r.failed, " "), logFile, failures(output)))
	} else if runErr != nil {
		errs = append(errs, fmt.Errorf("%w (log: %s)\n%s", runErr, logFile, tail(output, 30)))
	}
	if r.passed == 0 && len(errs) == 0 {
		errs = append(errs, fmt.Errorf("no test passed (log: %s)", logFile))
	}
	return r, errors.Join(errs...)
}

// failures returns the output of the failed tests (from each "=== RUN" of a test that failed to its
// "--- FAIL"), at most 80 lines.
func failures(output []byte) string {
	lines := strings.Split(string(output), "\n")
	var keep []string
	var cur []string
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "=== RUN"):
			if !strings.Contains(l, "/") {
				cur = nil
			}
			cur = append(cur, l)
		case strings.HasPrefix(l, "--- FAIL"):
			keep = append(keep, cur...)
			keep = append(keep, l)
			cur = nil
		default:
			cur = append(cur, l)
		}
	}
	if len(keep) > 80 {
		keep = keep[len(keep)-80:]
	}
	return strings.Join(keep, "\n")
}

func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// runToFile runs wine64 ARGS with its output in file, and returns what it wrote. A file, not a pipe:
// the prefix's services (started by the first program) inherit the output and outlive the program,
// and a pipe would be read until they exit.
func runToFile(ctx context.Context, env []string, dir, file string, args ...string) ([]byte, error) {
	f, err := os.Create(file)
	if err != nil {
		return nil, err
	}
	cmd := hostcmd.CommandContext(ctx, "wine64", args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = f, f
	runErr := cmd.Run()
	if err := f.Close(); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	return b, runErr
}
