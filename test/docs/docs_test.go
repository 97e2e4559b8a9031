package docs

import (
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/yaml"
)

const root = "../.."

// quoted returns the code of every Markdown page of the repository's docs (README.md and docs/):
// the inline code spans and the fenced blocks, each with the page it is on. Prose is not checked:
// only what a reader would copy.
func quoted(t *testing.T) map[string][]string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, filepath.Join(root, "README.md"))
	fence := regexp.MustCompile("(?s)```[a-z]*\n(.*?)```")
	span := regexp.MustCompile("`([^`\n]+)`")
	out := map[string][]string{}
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		name := strings.TrimPrefix(p, root+"/")
		for _, m := range fence.FindAllStringSubmatch(text, -1) {
			out[name] = append(out[name], strings.Split(m[1], "\n")...)
		}
		for _, m := range span.FindAllStringSubmatch(fence.ReplaceAllString(text, ""), -1) {
			out[name] = append(out[name], m[1])
		}
	}
	return out
}

// TestMakeTargets: every `make TARGET` the docs quote is a target of the Makefile.
func TestMakeTargets(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([a-zA-Z0-9_-]+):`).FindAllStringSubmatch(string(b), -1) {
		targets[m[1]] = true
	}
	use := regexp.MustCompile(`(?:^|[\s;&|(])make\s+((?:[A-Z_]+=\S+\s+)*)([a-z][a-z0-9-]*)(\*?)`)
	checked := 0
	for page, lines := range quoted(t) {
		for _, l := range lines {
			for _, m := range use.FindAllStringSubmatch(l, -1) {
				checked++
				if m[3] == "*" { // `make bench-*`: some target has the prefix
					if !slices.ContainsFunc(slices.Collect(maps.Keys(targets)), func(s string) bool { return strings.HasPrefix(s, m[2]) }) {
						t.Errorf("%s quotes `make %s*`: no target of the Makefile starts with %q", page, m[2], m[2])
					}
				} else if !targets[m[2]] {
					t.Errorf("%s quotes `make %s`: the Makefile has no target %q", page, m[2], m[2])
				}
			}
		}
	}
	t.Logf("%d quoted make commands checked", checked)
	if checked < 10 {
		t.Fatalf("only %d quoted make commands found: the docs' parser is broken", checked)
	}
}

// commands are winnet's binaries as the docs quote them.
var commands = []string{"winnet-agent", "winnet-controller", "winnet-cni", "kubectl-winnet"}

// TestCommands: every subcommand and flag quoted with one of winnet's commands exists. The flags
// and subcommands are read from the commands' sources (both platforms': the Windows service's
// flags too) and from the logging flags every command binds (controller-runtime's zap options).
// A flag is accepted when any winnet command declares it.
func TestCommands(t *testing.T) {
	flags, subcommands := declared(t)
	// A command at the start of a line or after a space, a quote or a parenthesis, or run from a
	// path (./, /, bin/, C:\...); not an image (REGISTRY/winnet-controller) or an object
	// (ds/winnet-agent) that merely has its name.
	invocation := regexp.MustCompile(`(?:^|[\s'"(])(?:(?:\./|/|bin/|[A-Z]:\\)[\w./\\-]*)?(winnet-agent|winnet-controller|winnet-cni|kubectl[ -]winnet)((?:\.exe)?(?:\s+[^\s|;&<>` + "`" + `]+)*)`)
	checked := 0
	for page, lines := range quoted(t) {
		for _, l := range lines {
			for _, m := range invocation.FindAllStringSubmatch(l, -1) {
				cmd := strings.Replace(m[1], "kubectl winnet", "kubectl-winnet", 1)
				args := strings.Fields(strings.TrimPrefix(m[2], ".exe"))
				for i, a := range args {
					switch {
					case a == "--":
						args = nil // what follows is another command's (the agent's flags after the service's)
					case strings.HasPrefix(a, "-"):
						name := strings.TrimLeft(strings.SplitN(a, "=", 2)[0], "-")
						if name == "" || strings.ContainsAny(name, "<>[]{}$") {
							continue
						}
						checked++
						if !flags[name] {
							t.Errorf("%s quotes `%s ... %s`: no winnet command declares the flag %q", page, cmd, a, name)
						}
					case i == 0 && regexp.MustCompile(`^[a-z][a-z-]*$`).MatchString(a):
						checked++
						if !slices.Contains(subcommands[cmd], a) {
							t.Errorf("%s quotes `%s %s`: %s has no subcommand %q (it has %v)", page, cmd, a, cmd, a, subcommands[cmd])
						}
					}
					if args == nil {
						break
					}
				}
			}
		}
	}
	t.Logf("%d quoted subcommands and flags checked", checked)
	if checked < 5 {
		t.Fatalf("only %d quoted subcommands and flags found: the docs' parser is broken", checked)
	}
}

// declared reads the flags and subcommands of winnet's commands from their sources.
func declared(t *testing.T) (map[string]bool, map[string][]string) {
	t.Helper()
	flags := map[string]bool{"help": true, "h": true}
	fs := flag.NewFlagSet("zap", flag.ContinueOnError)
	(&zap.Options{}).BindFlags(fs)
	fs.VisitAll(func(f *flag.Flag) { flags[f.Name] = true })

	define := regexp.MustCompile(`\.(?:String|Bool|Int|Int64|Uint|Uint64|Float64|Duration|Func|BoolFunc|TextVar|StringVar|BoolVar|IntVar|Int64Var|UintVar|Uint64Var|Float64Var|DurationVar|Var)\((?:&?[\w.\[\]]+,\s*)?"([a-z][a-z0-9-]*)"`)
	sub := regexp.MustCompile(`cmdline\.Subcommand\("([a-z-]+) ([a-z-]+)"|args\[0\] [!=]= "([a-z-]+)"`)
	subcommands := map[string][]string{}
	// kubectl-winnet's code is in internal/kubectlwinnet, one FlagSet per subcommand.
	kubectlSub := regexp.MustCompile(`cmdline\.FlagSet\("([a-z-]+)"`)
	for _, dir := range []string{"cmd", "internal/cmdline", "internal/kubectlwinnet"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for _, m := range define.FindAllStringSubmatch(string(b), -1) {
				flags[m[1]] = true
			}
			cmd := filepath.Base(filepath.Dir(p))
			if dir == "internal/kubectlwinnet" {
				for _, m := range kubectlSub.FindAllStringSubmatch(string(b), -1) {
					subcommands["kubectl-winnet"] = append(subcommands["kubectl-winnet"], m[1])
				}
			}
			for _, m := range sub.FindAllStringSubmatch(string(b), -1) {
				if m[1] != "" {
					subcommands[m[1]] = append(subcommands[m[1]], m[2])
				} else {
					subcommands[cmd] = append(subcommands[cmd], m[3])
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for c := range subcommands {
		slices.Sort(subcommands[c])
		subcommands[c] = slices.Compact(subcommands[c])
	}
	for _, want := range []string{"node-name", "kubeconfig", "dry-run"} {
		if !flags[want] {
			t.Fatalf("the flag %q was not found in the sources: the sources' parser is broken", want)
		}
	}
	if !slices.Contains(subcommands["winnet-agent"], "reset") {
		t.Fatalf("winnet-agent's subcommand reset was not found in the sources (found %v): the sources' parser is broken", subcommands)
	}
	return flags, subcommands
}

// TestHelmValues: every value the docs set with `--set KEY=...` is a key of the chart's values.yaml.
func TestHelmValues(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "config/helm/winnet/values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(b, &values); err != nil {
		t.Fatal(err)
	}
	set := regexp.MustCompile(`--set(?:-string|-file)?[ =]([A-Za-z0-9_.]+)=`)
	checked := 0
	for page, lines := range quoted(t) {
		for _, l := range lines {
			for _, m := range set.FindAllStringSubmatch(l, -1) {
				checked++
				var node any = values
				found := true
				for _, k := range strings.Split(m[1], ".") {
					mp, ok := node.(map[string]any)
					if !ok {
						found = false
						break
					}
					if node, found = mp[k]; !found {
						break
					}
				}
				if !found {
					t.Errorf("%s quotes `--set %s=`: the chart's values.yaml has no %s", page, m[1], m[1])
				}
			}
		}
	}
	t.Logf("%d --set values checked", checked)
}

// TestMetricsDocumented: every winnet_ metric the code declares (a prometheus *Opts literal with
// Namespace "winnet") is named in the docs, so that an operator can find what it means.
func TestMetricsDocumented(t *testing.T) {
	var docs strings.Builder
	for _, lines := range quoted(t) {
		docs.WriteString(strings.Join(lines, "\n"))
	}
	metrics := declaredMetrics(t)
	if len(metrics) < 8 {
		t.Fatalf("only %d metrics found in the sources (%v): the sources' parser is broken", len(metrics), metrics)
	}
	for _, m := range metrics {
		if !strings.Contains(docs.String(), m) {
			t.Errorf("the metric %s is not named (as code) in README.md or docs/", m)
		}
	}
	t.Logf("%d metrics checked", len(metrics))
}

// declaredMetrics finds the prometheus option literals of the non-test sources and joins their
// Namespace, Subsystem and Name as prometheus does.
func declaredMetrics(t *testing.T) []string {
	t.Helper()
	var out []string
	fset := token.NewFileSet()
	for _, dir := range []string{"cmd", "controllers", "internal"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(fset, p, nil, 0)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				lit, ok := n.(*ast.CompositeLit)
				if !ok {
					return true
				}
				sel, ok := lit.Type.(*ast.SelectorExpr)
				if !ok || !strings.HasSuffix(sel.Sel.Name, "Opts") {
					return true
				}
				fields := map[string]string{}
				for _, e := range lit.Elts {
					kv, ok := e.(*ast.KeyValueExpr)
					if !ok {
						continue
					}
					k, kok := kv.Key.(*ast.Ident)
					v, vok := kv.Value.(*ast.BasicLit)
					if kok && vok && v.Kind == token.STRING {
						fields[k.Name], _ = strconv.Unquote(v.Value)
					}
				}
				name := fields["Name"]
				if fields["Subsystem"] != "" {
					name = fields["Subsystem"] + "_" + name
				}
				if fields["Namespace"] != "" {
					name = fields["Namespace"] + "_" + name
				}
				if strings.HasPrefix(name, "winnet_") {
					out = append(out, name)
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TestLinks: every relative link of README.md and docs/ names a file of the repository, and its
// #anchor, if any, a heading of that page (GitHub's anchors: lower case, punctuation dropped, spaces
// as hyphens).
func TestLinks(t *testing.T) {
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, filepath.Join(root, "README.md"), filepath.Join(root, "SECURITY.md"))
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	fence := regexp.MustCompile("(?s)```.*?```")
	checked := 0
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(p, root+"/")
		for _, m := range link.FindAllStringSubmatch(fence.ReplaceAllString(string(b), ""), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := p
			if file != "" {
				path = filepath.Join(filepath.Dir(p), file)
			}
			checked++
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s links to %s, which does not exist", name, target)
				continue
			}
			if anchor != "" && !slices.Contains(anchors(t, path), anchor) {
				t.Errorf("%s links to %s: %s has no heading with the anchor #%s", name, target, file, anchor)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("checked %d links; expected the docs' links (is the pattern still right?)", checked)
	}
}

// anchors returns the GitHub anchors of a Markdown page's headings.
func anchors(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fence := regexp.MustCompile("(?s)```.*?```")
	var out []string
	for _, m := range regexp.MustCompile(`(?m)^#+ +(.+)$`).FindAllStringSubmatch(fence.ReplaceAllString(string(b), ""), -1) {
		var s strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(m[1])) {
			switch {
			case r == ' ':
				s.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				s.WriteRune(r)
			}
		}
		out = append(out, s.String())
	}
	return out
}
