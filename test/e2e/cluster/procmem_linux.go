//go:build linux

package cluster

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ProcMemory is a process's resident memory, in MiB, from /proc/<pid>/status: RSS (VmRSS) and its
// parts. A Go program's RSS can grow while its heap does not: Anon is what the runtime (heap,
// stacks, its own structures) and any C code hold; File is the binary's and libraries' pages read
// in as code runs for the first time, which grows with new code paths and is given back under memory
// pressure. A leak shows in Anon; a slow rise in File alone is not one.
type ProcMemory struct {
	RSS, Anon, File float64
	// Threads are the process's OS threads: each holds a stack and the C library's per-thread state
	// outside the Go heap, so a count that climbs is RSS the heap does not show.
	Threads int
}

// ReadProcMemory reads a process's ProcMemory.
func ReadProcMemory(pid int) (ProcMemory, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ProcMemory{}, err
	}
	var m ProcMemory
	found := 0
	for _, line := range strings.Split(string(data), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		if name == "Threads" {
			if m.Threads, err = strconv.Atoi(strings.TrimSpace(rest)); err != nil {
				return ProcMemory{}, fmt.Errorf("pid %d: Threads: %w", pid, err)
			}
			continue
		}
		var into *float64
		switch name {
		case "VmRSS":
			into = &m.RSS
		case "RssAnon":
			into = &m.Anon
		case "RssFile":
			into = &m.File
		default:
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) != 2 || fields[1] != "kB" {
			return ProcMemory{}, fmt.Errorf("pid %d: unexpected %s line %q", pid, name, line)
		}
		kb, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return ProcMemory{}, fmt.Errorf("pid %d: %s: %w", pid, name, err)
		}
		*into = kb / 1024
		found++
	}
	if found != 3 || m.Threads == 0 {
		return ProcMemory{}, fmt.Errorf("pid %d: /proc status lacks VmRSS, RssAnon, RssFile or Threads", pid)
	}
	return m, nil
}
