//go:build democheck

package docs

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/winnet-io/winnet/test/hostcmd"
)

var demoDir = flag.String("demo-dir", "", "the directory of a running demo (make docs-check passes bin/demo)")

// The demo's printed status (its ready file) and the page that describes it, docs/demo.md.
const (
	demoReady = "ready"
	demoPage  = "docs/demo.md"
	tryHeader = "The demo keeps running. Try:"
)

// TestDemoAsDocumented runs against a demo `make demo` left running (make docs-check starts one):
// every line docs/demo.md shows of the demo's output is in what the demo printed, and every command
// the demo tells its user to try succeeds as printed.
func TestDemoAsDocumented(t *testing.T) {
	if *demoDir == "" {
		t.Fatal("-demo-dir is required: run `make docs-check`, which starts the demo and passes it")
	}
	b, err := os.ReadFile(filepath.Join(*demoDir, demoReady))
	if err != nil {
		t.Fatalf("the demo is not up (%v): run `make demo` first", err)
	}
	printed := string(b)
	page, err := os.ReadFile(filepath.Join(root, demoPage))
	if err != nil {
		t.Fatal(err)
	}

	t.Run("page matches output", func(t *testing.T) {
		shown := documentedOutput(string(page))
		if len(shown) < 10 {
			t.Fatalf("found %d lines of demo output in %s; expected its output block (the one holding %q)", len(shown), demoPage, tryHeader)
		}
		lines := strings.Split(printed, "\n")
		for _, want := range shown {
			re := docLinePattern(want)
			found := false
			for _, l := range lines {
				if re.MatchString(squeeze(l)) {
					found = true
					break
				}
			}
			if !found {
				t.Errorf("%s shows a line the demo no longer prints (digits and ... match anything):\n  %s", demoPage, want)
			}
		}
	})

	t.Run("try commands", func(t *testing.T) {
		prelude, cmds := tryCommands(t, printed)
		for _, c := range cmds {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			cmd := hostcmd.CommandContext(ctx, "bash", "-c", "set -o pipefail\n"+prelude+"\n"+c)
			out, err := cmd.CombinedOutput()
			cancel()
			if err != nil {
				t.Errorf("a command the demo tells its user to try failed (%v):\n  %s\n%s", err, c, indent(string(out)))
				continue
			}
			t.Logf("ok: %s", c)
		}
	})
}

// documentedOutput returns the lines of docs/demo.md's block of demo output (the fenced block holding
// tryHeader) that are the demo's: table rows and headers, section titles and commands; the lines the
// page elides ("...") are left out.
func documentedOutput(page string) []string {
	var blocks [][]string
	var cur []string
	in := false
	for _, l := range strings.Split(page, "\n") {
		switch {
		case strings.HasPrefix(l, "```") && !in:
			in, cur = true, nil
		case strings.HasPrefix(l, "```"):
			in = false
			blocks = append(blocks, cur)
		case in:
			cur = append(cur, l)
		}
	}
	for _, b := range blocks {
		if !slices.Contains(b, tryHeader) {
			continue
		}
		var out []string
		for _, l := range b {
			if s := strings.TrimSpace(l); s != "" && s != "..." {
				out = append(out, l)
			}
		}
		return out
	}
	return nil
}

// docLinePattern turns a line of the page into a pattern over a squeezed line of output: "..." and
// "<word>" match anything, a run of digits matches any run of digits (addresses, ports and counts
// differ between runs).
func docLinePattern(line string) *regexp.Regexp {
	q := regexp.QuoteMeta(squeeze(line))
	q = strings.ReplaceAll(q, `\.\.\.`, `.*`)
	q = regexp.MustCompile(`<[a-z-]+>`).ReplaceAllString(q, `.*`)
	q = regexp.MustCompile(`[0-9]+`).ReplaceAllString(q, `[0-9]+`)
	return regexp.MustCompile(`^` + q + `$`)
}

func squeeze(s string) string { return strings.Join(strings.Fields(s), " ") }

// tryCommands parses the demo's "Try:" block: its first line sets KUBECONFIG and aliases kubectl
// (returned as a prelude a script can use), each further indented line is a command (its comment,
// on the line or the next, kept), until the first line that is not indented.
func tryCommands(t *testing.T, printed string) (string, []string) {
	t.Helper()
	_, block, ok := strings.Cut(printed, tryHeader+"\n")
	if !ok {
		t.Fatalf("the demo's output has no %q block", tryHeader)
	}
	lines := strings.Split(block, "\n")
	first := strings.TrimSpace(lines[0])
	m := regexp.MustCompile(`^export KUBECONFIG=(\S+); alias kubectl=(\S+)$`).FindStringSubmatch(first)
	if m == nil {
		t.Fatalf("the Try block's first line is %q; expected `export KUBECONFIG=...; alias kubectl=...`", first)
	}
	prelude := "export KUBECONFIG=" + m[1] + "\nkubectl() { " + m[2] + ` "$@"; }`
	var cmds []string
	for _, l := range lines[1:] {
		if !strings.HasPrefix(l, "  ") {
			break
		}
		if strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue // the comment of the command before
		}
		cmds = append(cmds, strings.TrimSpace(l))
	}
	if len(cmds) < 5 {
		t.Fatalf("found %d commands in the demo's Try block; expected its list", len(cmds))
	}
	return prelude, cmds
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}
