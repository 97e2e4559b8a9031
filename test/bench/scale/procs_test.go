//go:build linux && bench

package scale

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// cpuSnapshot is the CPU time of the benchmark's processes (the test process and every process
// under it: etcd, kube-apiserver, kube-controller-manager, winnet-controller, the agents, the
// switches) by command name, and the machine's busy time, at one moment.
type cpuSnapshot struct {
	at      time.Time
	byName  map[string]time.Duration
	machine time.Duration
}

// takeCPU reads the CPU time of the test process and its descendants and of the whole machine.
func takeCPU() cpuSnapshot {
	s := cpuSnapshot{at: time.Now(), byName: map[string]time.Duration{}}
	for pid, name := range descendants(os.Getpid()) {
		if d, err := cpuTime(pid); err == nil {
			if pid == os.Getpid() {
				name = "bench(writers,watches)"
			}
			s.byName[name] += d
		}
	}
	s.machine = machineBusy()
	return s
}

// coresSince says, by command name, how many cores the benchmark's processes used on average
// since before, the largest first, then the machine's busy cores and what of them was not the
// benchmark's (the machine is shared).
func (s cpuSnapshot) coresSince(before cpuSnapshot) string {
	wall := s.at.Sub(before.at).Seconds()
	if wall <= 0 {
		return ""
	}
	type use struct {
		name  string
		cores float64
	}
	var uses []use
	var ours float64
	for name, d := range s.byName {
		c := (d - before.byName[name]).Seconds() / wall
		ours += c
		if c >= 0.005 {
			uses = append(uses, use{name, c})
		}
	}
	sort.Slice(uses, func(i, j int) bool { return uses[i].cores > uses[j].cores })
	var b strings.Builder
	for _, u := range uses {
		fmt.Fprintf(&b, "%s=%.2f ", u.name, u.cores)
	}
	machine := (s.machine - before.machine).Seconds() / wall
	fmt.Fprintf(&b, "(benchmark %.2f, machine %.2f, others %.2f cores)", ours, machine, max(0, machine-ours))
	return b.String()
}

// descendants returns pid and every process under it, by command name (/proc/<pid>/stat's comm).
func descendants(root int) map[int]string {
	children := map[int][]int{}
	names := map[int]string{}
	entries, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, e := range entries {
		data, err := os.ReadFile(e)
		if err != nil {
			continue
		}
		open, closing := strings.IndexByte(string(data), '('), strings.LastIndexByte(string(data), ')')
		if open < 0 || closing < open {
			continue
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(string(data[:open])))
		f := strings.Fields(string(data[closing+1:]))
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		names[pid] = string(data[open+1 : closing])
		children[ppid] = append(children[ppid], pid)
	}
	out := map[int]string{}
	queue := []int{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		if _, seen := out[pid]; seen {
			continue
		}
		out[pid] = names[pid]
		queue = append(queue, children[pid]...)
	}
	return out
}

// machineBusy is the machine's CPU time not idle (/proc/stat's first line, USER_HZ 100).
func machineBusy() time.Duration {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	var busy int64
	for i, v := range f[1:] {
		n, _ := strconv.ParseInt(v, 10, 64)
		if i != 3 && i != 4 && i < 8 { // not idle, iowait, nor guest (counted in user)
			busy += n
		}
	}
	return time.Duration(busy) * 10 * time.Millisecond
}
