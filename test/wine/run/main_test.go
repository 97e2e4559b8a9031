package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
)

// TestTheListsHold: packages.txt names every package whose tests build for Windows, once, and
// skips.txt names only tests of packages that are run, each with a reason (the names themselves are
// checked against each binary by make test-windows).
func TestTheListsHold(t *testing.T) {
	g := NewWithT(t)
	root, err := filepath.Abs("../../..")
	g.Expect(err).NotTo(HaveOccurred())
	pkgs, err := readPackages(filepath.Join(root, "test/wine/packages.txt"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(checkCoverage(context.Background(), root, pkgs, "packages.txt")).To(Succeed())
	skips, err := readSkips(filepath.Join(root, "test/wine/skips.txt"), pkgs)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(skips).NotTo(BeEmpty())
	for _, s := range skips {
		g.Expect(s.reason).NotTo(BeEmpty(), "%s %s", s.pkg, s.test)
	}
}

func TestListsRefuseBadLines(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		g.Expect(os.WriteFile(p, []byte(text), 0o644)).To(Succeed())
		return p
	}
	_, err := readPackages(write("p1", "run internal/cni\n"))
	g.Expect(err).To(MatchError(ContainSubstring("want \"run|exclude PACKAGE WHY\"")), "no why")
	_, err = readPackages(write("p2", "run a why\nexclude a why\n"))
	g.Expect(err).To(MatchError(ContainSubstring("listed twice")))
	pkgs := []pkg{{path: "a", run: true}, {path: "b"}}
	_, err = readSkips(write("s1", "a TestX\n"), pkgs)
	g.Expect(err).To(MatchError(ContainSubstring("want \"PACKAGE TestName REASON\"")), "no reason")
	_, err = readSkips(write("s2", "b TestX why\n"), pkgs)
	g.Expect(err).To(MatchError(ContainSubstring("b is not run under Wine")))
	_, err = readSkips(write("s3", "a TestX/sub why\n"), pkgs)
	g.Expect(err).To(HaveOccurred(), "only top-level tests")
	s, err := readSkips(write("s4", "# comment\n\na TestX HNS: no hcn\n"), pkgs)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s).To(Equal([]skip{{pkg: "a", test: "TestX", reason: "HNS: no hcn"}}))
}

func TestFailuresShowsTheFailedTestsOutput(t *testing.T) {
	g := NewWithT(t)
	out := "=== RUN   TestA\n--- PASS: TestA (0.00s)\n=== RUN   TestB\n=== RUN   TestB/sub\n    b_test.go:3: boom\n" +
		"    --- FAIL: TestB/sub (0.00s)\n--- FAIL: TestB (0.00s)\n=== RUN   TestC\n--- PASS: TestC (0.00s)\nFAIL\n"
	g.Expect(failures([]byte(out))).To(Equal("=== RUN   TestB\n=== RUN   TestB/sub\n    b_test.go:3: boom\n" +
		"    --- FAIL: TestB/sub (0.00s)\n--- FAIL: TestB (0.00s)"))
	g.Expect(topPass.FindAllString(out, -1)).To(HaveLen(2))
	g.Expect(topFail.FindAllString(out, -1)).To(HaveLen(1), "a subtest is not counted")
}
