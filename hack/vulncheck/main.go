package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// Allowed is one decision of the allow-list: an advisory the code may call in one module, why, and until
// when.
type Allowed struct {
	// Advisory is the Go vulnerability ID (GO-YYYY-NNNN).
	Advisory string `json:"advisory"`
	// Module is the vulnerable module the decision is about ("stdlib" for the standard library): an
	// advisory may name several, and allowing one does not allow the others.
	Module string `json:"module"`
	// Reason says why the call is acceptable or why it cannot be fixed yet.
	Reason string `json:"reason"`
	// Expires is the day (YYYY-MM-DD) after which the decision must be taken again.
	Expires string `json:"expires"`
}

// frame is one frame of a govulncheck trace.
type frame struct {
	Module   string `json:"module"`
	Version  string `json:"version"`
	Package  string `json:"package"`
	Function string `json:"function"`
	Receiver string `json:"receiver"`
	Position *struct {
		Filename string `json:"filename"`
		Line     int    `json:"line"`
	} `json:"position"`
}

func (f frame) String() string {
	s := f.Package + "." + f.Function
	if f.Receiver != "" {
		s = f.Package + "." + strings.TrimPrefix(f.Receiver, "*") + "." + f.Function
	}
	if f.Position != nil {
		s += fmt.Sprintf(" (%s:%d)", f.Position.Filename, f.Position.Line)
	}
	return s
}

// message is one message of govulncheck's JSON stream; only the fields used here.
type message struct {
	OSV *struct {
		ID      string `json:"id"`
		Summary string `json:"summary"`
	} `json:"osv"`
	Finding *struct {
		OSV          string  `json:"osv"`
		FixedVersion string  `json:"fixed_version"`
		Trace        []frame `json:"trace"`
	} `json:"finding"`
}

// key names an advisory in one module.
func key(advisory, module string) string { return advisory + " in " + module }

// Called is an advisory whose vulnerable symbol of one module the code calls, on the platforms listed.
type Called struct {
	Advisory, Summary string
	// Module is the vulnerable module at the version in use, with the version that fixes it.
	Module, Version, Fixed string
	Platforms              []string
	// Trace is one call path, from the vulnerable symbol to winnet's code.
	Trace []string
}

// readReport returns the advisories a govulncheck -format json report finds called (symbol level), by
// key(advisory, module).
func readReport(r io.Reader) (map[string]*Called, error) {
	summaries := map[string]string{}
	called := map[string]*Called{}
	dec := json.NewDecoder(r)
	for {
		var m message
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("decoding govulncheck's JSON: %w", err)
		}
		if m.OSV != nil {
			summaries[m.OSV.ID] = m.OSV.Summary
		}
		// Only symbol-level findings: a trace whose innermost frame names a function the code reaches.
		f := m.Finding
		if f == nil || len(f.Trace) == 0 || f.Trace[0].Function == "" {
			continue
		}
		k := key(f.OSV, f.Trace[0].Module)
		if _, ok := called[k]; ok {
			continue
		}
		c := &Called{Advisory: f.OSV, Module: f.Trace[0].Module, Version: f.Trace[0].Version, Fixed: f.FixedVersion}
		for _, fr := range f.Trace {
			c.Trace = append(c.Trace, fr.String())
		}
		called[k] = c
	}
	for _, c := range called {
		c.Summary = summaries[c.Advisory]
	}
	return called, nil
}

var advisoryID = regexp.MustCompile(`^GO-[0-9]{4}-[0-9]{4,}$`)

// readAllowList reads and checks the allow-list: every entry names an advisory and a module once, with a
// reason and an expiry date. The result is by key(advisory, module).
func readAllowList(b []byte) (map[string]Allowed, error) {
	var entries []Allowed
	if err := yaml.UnmarshalStrict(b, &entries); err != nil {
		return nil, fmt.Errorf("reading the allow-list: %w", err)
	}
	out := map[string]Allowed{}
	for i, e := range entries {
		switch _, err := time.Parse(time.DateOnly, e.Expires); {
		case !advisoryID.MatchString(e.Advisory):
			return nil, fmt.Errorf("allow-list entry %d: advisory %q is not a Go vulnerability ID (GO-YYYY-NNNN)", i+1, e.Advisory)
		case e.Module == "":
			return nil, fmt.Errorf("allow-list entry %s: no module (\"stdlib\" for the standard library)", e.Advisory)
		case strings.TrimSpace(e.Reason) == "":
			return nil, fmt.Errorf("allow-list entry %s: no reason", e.Advisory)
		case err != nil:
			return nil, fmt.Errorf("allow-list entry %s: expires %q is not a date (YYYY-MM-DD): %w", e.Advisory, e.Expires, err)
		}
		k := key(e.Advisory, e.Module)
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("allow-list entry %s: listed twice", k)
		}
		out[k] = e
	}
	return out, nil
}

// Verdict sorts the called advisories by the allow-list on day today.
type Verdict struct {
	// Refused are called and not allowed, or allowed by an expired entry (Expired holds those, by key).
	Refused []*Called
	Expired map[string]Allowed
	// Allowed are called and allowed by a live entry.
	Allowed []*Called
	// Stale are entries of the allow-list that no report calls any more: remove them.
	Stale []Allowed
}

// judge merges the platforms' findings and applies the allow-list.
func judge(reports map[string]map[string]*Called, allow map[string]Allowed, today time.Time) Verdict {
	merged := map[string]*Called{}
	platforms := make([]string, 0, len(reports))
	for p := range reports {
		platforms = append(platforms, p)
	}
	sort.Strings(platforms)
	for _, p := range platforms {
		for id, c := range reports[p] {
			if m, ok := merged[id]; ok {
				m.Platforms = append(m.Platforms, p)
				continue
			}
			cp := *c
			cp.Platforms = []string{p}
			merged[id] = &cp
		}
	}
	v := Verdict{Expired: map[string]Allowed{}}
	ids := make([]string, 0, len(merged))
	for id := range merged {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		e, ok := allow[id]
		switch {
		case !ok:
			v.Refused = append(v.Refused, merged[id])
		case expired(e, today):
			v.Refused = append(v.Refused, merged[id])
			v.Expired[id] = e
		default:
			v.Allowed = append(v.Allowed, merged[id])
		}
	}
	for id, e := range allow {
		if _, ok := merged[id]; !ok {
			v.Stale = append(v.Stale, e)
		}
	}
	slices.SortFunc(v.Stale, func(a, b Allowed) int { return strings.Compare(key(a.Advisory, a.Module), key(b.Advisory, b.Module)) })
	return v
}

// expired: the entry's last day is before today.
func expired(e Allowed, today time.Time) bool {
	last, _ := time.Parse(time.DateOnly, e.Expires)
	return today.Format(time.DateOnly) > last.Format(time.DateOnly)
}

func main() {
	allowFile := flag.String("allow", "hack/vulncheck-allow.yaml", "the allow-list")
	db := flag.String("db", "", "the vulnerability database's name, for the summary")
	todayFlag := flag.String("today", "", "the day the allow-list's expiry dates are judged on (YYYY-MM-DD; default: today, UTC)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: vulncheck [-allow FILE] GOOS=REPORT.json...\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if err := run(*allowFile, *db, *todayFlag, flag.Args(), os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "vulncheck: %v\n", err)
		os.Exit(1)
	}
}

func run(allowFile, db, todayFlag string, args []string, out io.Writer) error {
	today := time.Now().UTC()
	if todayFlag != "" {
		t, err := time.Parse(time.DateOnly, todayFlag)
		if err != nil {
			return fmt.Errorf("-today %q: %w", todayFlag, err)
		}
		today = t
	}
	b, err := os.ReadFile(allowFile)
	if err != nil {
		return fmt.Errorf("reading the allow-list: %w", err)
	}
	allow, err := readAllowList(b)
	if err != nil {
		return fmt.Errorf("%s: %w", allowFile, err)
	}
	if len(args) == 0 {
		return errors.New("no report given (GOOS=FILE)")
	}
	reports := map[string]map[string]*Called{}
	for _, a := range args {
		goos, file, ok := strings.Cut(a, "=")
		if !ok {
			return fmt.Errorf("argument %q is not GOOS=FILE", a)
		}
		f, err := os.Open(file)
		if err != nil {
			return fmt.Errorf("reading the %s report: %w", goos, err)
		}
		called, err := readReport(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s report %s: %w", goos, file, err)
		}
		reports[goos] = called
	}
	v := judge(reports, allow, today)
	for _, c := range v.Allowed {
		e := allow[key(c.Advisory, c.Module)]
		fmt.Fprintf(out, "vulncheck: allowed until %s: %s %s@%s (fixed in %s) on %s: %s\n", e.Expires, c.Advisory, c.Module, c.Version,
			fixed(c), strings.Join(c.Platforms, ", "), e.Reason)
	}
	for _, e := range v.Stale {
		fmt.Fprintf(out, "vulncheck: warning: allow-list entry %s: no build calls it any more: remove it\n", key(e.Advisory, e.Module))
	}
	for _, c := range v.Refused {
		why := "not in the allow-list"
		if e, ok := v.Expired[key(c.Advisory, c.Module)]; ok {
			why = "its allow-list entry expired on " + e.Expires
		}
		fmt.Fprintf(out, "vulncheck: CALLED: %s %s: %s@%s, fixed in %s, on %s (%s)\n", c.Advisory, c.Summary, c.Module, c.Version,
			fixed(c), strings.Join(c.Platforms, ", "), why)
		for _, fr := range c.Trace {
			fmt.Fprintf(out, "    %s\n", fr)
		}
	}
	fmt.Fprintf(out, "vulncheck: database %s: %d advisories called (%d allowed, %d refused)\n", db, len(v.Allowed)+len(v.Refused), len(v.Allowed), len(v.Refused))
	if len(v.Refused) > 0 {
		return fmt.Errorf("%d advisories called that hack/vulncheck-allow.yaml does not allow: upgrade the module (go get MODULE@FIXED) "+
			"or, when there is no fix or it must wait, add an entry (advisory, module, reason, expires)", len(v.Refused))
	}
	return nil
}

func fixed(c *Called) string {
	if c.Fixed == "" {
		return "no version yet"
	}
	return c.Fixed
}
