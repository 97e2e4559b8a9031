package preflight

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// Status is a check's verdict.
type Status string

const (
	// Pass: the node is fit in this respect.
	Pass Status = "PASS"
	// Warn: winnet works, but something deserves a look (the fix says what).
	Warn Status = "WARN"
	// Fail: winnet will not work on this node until the fix is applied.
	Fail Status = "FAIL"
	// Skip: the check means nothing on this platform (a Linux node has no registry, no service
	// control manager): not checked, never a pass. It leaves the exit code alone.
	Skip Status = "SKIP"
)

// Result is what one check found.
type Result struct {
	// Name is the check's name (Check.Name).
	Name   string `json:"name"`
	Status Status `json:"status"`
	// Detail is what was found, in one line.
	Detail string `json:"detail"`
	// Fix is what to do, in one line; empty on PASS and SKIP.
	Fix string `json:"fix,omitempty"`
	// Source names who answered when it is not the node's own Windows (the HNS simulator, the
	// Linux host): the demo and the bundle mark it.
	Source string `json:"source,omitempty"`
}

// Check is one fitness check. Run must not block: it only reads facts.
type Check interface {
	Name() string
	Run(ctx context.Context, f *Facts) Result
}

// Report is the result of every check on one node.
type Report struct {
	Node     string    `json:"node,omitempty"`
	Platform string    `json:"platform"`
	Time     time.Time `json:"time"`
	Results  []Result  `json:"results"`
}

// Run runs the checks against the facts, in order.
func Run(ctx context.Context, checks []Check, f *Facts) Report {
	r := Report{Node: f.NodeName, Platform: f.Platform, Time: f.Now}
	for _, c := range checks {
		res := c.Run(ctx, f)
		res.Name = c.Name()
		r.Results = append(r.Results, res)
	}
	return r
}

// Counts returns how many results have each status.
func (r Report) Counts() map[Status]int {
	n := map[Status]int{}
	for _, res := range r.Results {
		n[res.Status]++
	}
	return n
}

// Worst is FAIL when a check failed, else WARN when one warned, else PASS.
func (r Report) Worst() Status {
	n := r.Counts()
	switch {
	case n[Fail] > 0:
		return Fail
	case n[Warn] > 0:
		return Warn
	}
	return Pass
}

// ExitCode is the command's exit status: 0 when no check failed or warned, 1 with warnings, 2 with
// failures.
func (r Report) ExitCode() int {
	switch r.Worst() {
	case Fail:
		return 2
	case Warn:
		return 1
	}
	return 0
}

// Summary is one line: the counts of each status.
func (r Report) Summary() string {
	n := r.Counts()
	return fmt.Sprintf("%d passed, %d warnings, %d failed, %d not checked on this platform", n[Pass], n[Warn], n[Fail], n[Skip])
}

// WriteText writes one line per check (status, name, detail), the fix on the next line, then the
// summary.
func (r Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "winnet preflight of node %s (%s), %s\n", orNone(r.Node), r.Platform, r.Time.UTC().Format(time.RFC3339))
	for _, res := range r.Results {
		src := ""
		if res.Source != "" {
			src = " [" + res.Source + "]"
		}
		fmt.Fprintf(&b, "%-4s  %-18s %s%s\n", res.Status, res.Name, res.Detail, src)
		if res.Fix != "" {
			fmt.Fprintf(&b, "      %-18s fix: %s\n", "", res.Fix)
		}
	}
	fmt.Fprintf(&b, "%s\n", r.Summary())
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes the report as indented JSON.
func (r Report) WriteJSON(w io.Writer) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

func orNone(s string) string {
	if s == "" {
		return "(no name)"
	}
	return s
}
