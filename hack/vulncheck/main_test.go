package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// report is a govulncheck -format json stream: GO-2026-0001 called (symbol level), GO-2026-0002 only
// imported (package level) and GO-2026-0003 only required (module level).
const report = `{"config":{"protocol_version":"v1.0.0","scanner_name":"govulncheck"}}
{"osv":{"id":"GO-2026-0001","summary":"Crash in Frob"}}
{"osv":{"id":"GO-2026-0002","summary":"Leak in Grob"}}
{"osv":{"id":"GO-2026-0003","summary":"Bug in Hrob"}}
{"finding":{"osv":"GO-2026-0003","fixed_version":"v1.2.0","trace":[{"module":"example.com/h","version":"v1.1.0"}]}}
{"finding":{"osv":"GO-2026-0002","fixed_version":"v0.3.0","trace":[{"module":"example.com/g","version":"v0.2.0","package":"example.com/g"}]}}
{"finding":{"osv":"GO-2026-0001","fixed_version":"v0.9.1","trace":[
 {"module":"example.com/f","version":"v0.9.0","package":"example.com/f","function":"Frob","receiver":"*Thing","position":{"filename":"f.go","line":10}},
 {"module":"github.com/winnet-io/winnet","package":"github.com/winnet-io/winnet/internal/x","function":"Use","position":{"filename":"internal/x/x.go","line":3}}]}}
`

func TestReadReportKeepsCalledSymbolsOnly(t *testing.T) {
	g := NewWithT(t)
	called, err := readReport(strings.NewReader(report))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(called).To(HaveLen(1))
	c := called["GO-2026-0001 in example.com/f"]
	g.Expect(c).NotTo(BeNil())
	g.Expect(*c).To(Equal(Called{Advisory: "GO-2026-0001", Summary: "Crash in Frob", Module: "example.com/f", Version: "v0.9.0", Fixed: "v0.9.1",
		Trace: []string{"example.com/f.Thing.Frob (f.go:10)", "github.com/winnet-io/winnet/internal/x.Use (internal/x/x.go:3)"}}))

	_, err = readReport(strings.NewReader(`{"finding":`))
	g.Expect(err).To(MatchError(ContainSubstring("decoding govulncheck's JSON")))
}

func TestAllowList(t *testing.T) {
	cases := []struct {
		name, list, err string
	}{
		{"valid", "- advisory: GO-2026-0001\n  module: example.com/f\n  reason: no fix yet\n  expires: \"2026-12-31\"\n", ""},
		{"empty", "[]", ""},
		{"no module", "- advisory: GO-2026-0001\n  reason: r\n  expires: \"2026-12-31\"\n", "no module"},
		{"no reason", "- advisory: GO-2026-0001\n  module: example.com/f\n  expires: \"2026-12-31\"\n", "no reason"},
		{"no expiry", "- advisory: GO-2026-0001\n  module: example.com/f\n  reason: r\n", "is not a date"},
		{"bad date", "- advisory: GO-2026-0001\n  module: example.com/f\n  reason: r\n  expires: 31/12/2026\n", "is not a date"},
		{"not an advisory", "- advisory: CVE-2026-1\n  module: stdlib\n  reason: r\n  expires: \"2026-12-31\"\n", "not a Go vulnerability ID"},
		{"unknown field", "- advisory: GO-2026-0001\n  module: example.com/f\n  reason: r\n  expires: \"2026-12-31\"\n  until: ever\n", "unknown field"},
		{"twice", "- advisory: GO-2026-0001\n  module: example.com/f\n  reason: r\n  expires: \"2026-12-31\"\n- advisory: GO-2026-0001\n  module: example.com/f\n  reason: r\n  expires: \"2026-12-31\"\n", "listed twice"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := readAllowList([]byte(tc.list))
			if tc.err == "" {
				g.Expect(err).NotTo(HaveOccurred())
			} else {
				g.Expect(err).To(MatchError(ContainSubstring(tc.err)))
			}
		})
	}
}

// TestRun: a called advisory fails the check unless a live entry allows it; an expired entry fails it
// again; an entry nothing calls is reported stale.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	linux := filepath.Join(dir, "linux.json")
	windows := filepath.Join(dir, "windows.json")
	NewWithT(t).Expect(os.WriteFile(linux, []byte(report), 0o644)).To(Succeed())
	NewWithT(t).Expect(os.WriteFile(windows, []byte(report), 0o644)).To(Succeed())
	entry := "- advisory: GO-2026-0001\n  module: example.com/f\n  reason: only reached with trusted input\n  expires: \"2026-12-31\"\n"
	stale := "- advisory: GO-2025-9999\n  module: stdlib\n  reason: fixed since\n  expires: \"2027-01-31\"\n"
	cases := []struct {
		name, list, today string
		err               string
		out               []string
	}{
		{name: "not allowed", list: "[]", today: "2026-11-26", err: "1 advisories called",
			out: []string{"CALLED: GO-2026-0001 Crash in Frob: example.com/f@v0.9.0, fixed in v0.9.1, on linux, windows (not in the allow-list)",
				"    example.com/f.Thing.Frob (f.go:10)"}},
		{name: "allowed", list: entry, today: "2026-12-31",
			out: []string{"allowed until 2026-12-31: GO-2026-0001", "1 advisories called (1 allowed, 0 refused)"}},
		{name: "expired", list: entry, today: "2027-01-01", err: "1 advisories called",
			out: []string{"(its allow-list entry expired on 2026-12-31)"}},
		{name: "an entry for the advisory in another module", list: strings.Replace(entry, "example.com/f", "stdlib", 1), today: "2026-11-26",
			err: "1 advisories called", out: []string{"(not in the allow-list)", "allow-list entry GO-2026-0001 in stdlib: no build calls it"}},
		{name: "stale entry", list: entry + stale, today: "2026-11-26",
			out: []string{"warning: allow-list entry GO-2025-9999 in stdlib: no build calls it any more"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			allow := filepath.Join(t.TempDir(), "allow.yaml")
			g.Expect(os.WriteFile(allow, []byte(tc.list), 0o644)).To(Succeed())
			var out bytes.Buffer
			err := run(allow, "test", tc.today, []string{"linux=" + linux, "windows=" + windows}, &out)
			if tc.err == "" {
				g.Expect(err).NotTo(HaveOccurred(), out.String())
			} else {
				g.Expect(err).To(MatchError(ContainSubstring(tc.err)))
			}
			for _, want := range tc.out {
				g.Expect(out.String()).To(ContainSubstring(want))
			}
		})
	}
}
