package benchutil

import (
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// MS is d in milliseconds, to the microsecond: how the benchmarks' lines print durations.
func MS(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// LoadAverage is the machine's 1, 5 and 15 minute load as uptime prints it ("unknown" where
// /proc/loadavg cannot be read): every benchmark line carries it, since a loaded machine changes
// the numbers.
func LoadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// Parallel runs f(i) for every i in [from, to) on the given number of goroutines (the benchmarks
// write their objects to the API server this way) and returns the first error; after an error no
// new i is started.
func Parallel(from, to, workers int, f func(i int) error) error {
	var next atomic.Int64
	next.Store(int64(from))
	var once sync.Once
	var first error
	var failed atomic.Bool
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !failed.Load() {
				i := int(next.Add(1) - 1)
				if i >= to {
					return
				}
				if err := f(i); err != nil {
					once.Do(func() { first = err })
					failed.Store(true)
				}
			}
		}()
	}
	wg.Wait()
	return first
}
