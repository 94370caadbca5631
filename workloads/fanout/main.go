// fanout: a service whose requests fan out. Requests arrive at a Poisson rate; each is split
// into -fanout parts of -work_us of CPU each, run as goroutines side by side (as many at once
// as GOMAXPROCS lets), and is done when its last part is. Prints, at the end, one JSON line:
// requests done and their latency p50/p99 in microseconds. The load of doctor's thread-count
// what-if test: its width is GOMAXPROCS, its work the same at any width.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"runtime"
	"sort"
	"sync"
	"time"
)

// spin does n rounds of arithmetic: a fixed amount of work, whichever thread runs it and
// however often it is preempted or throttled.
func spin(n int) {
	x := 0
	for r := 0; r < n; r++ {
		for i := 0; i < 1000; i++ {
			x += i * i
		}
	}
	sink = x
}

var sink int

// rounds: how many of spin's rounds take d on this CPU, the best of five tries of 2 ms (at
// the start, before the load: the group has its whole quota). Measured per process it varies
// (9,866 to 11,575 rounds for 3.5 ms here): runs compared with each other take -rounds.
func rounds(d time.Duration) int {
	best := 0.0
	for try := 0; try < 5; try++ {
		n, start := 0, time.Now()
		for time.Since(start) < 2*time.Millisecond {
			spin(10)
			n += 10
		}
		best = max(best, float64(n)/float64(time.Since(start)))
	}
	return max(1, int(best*float64(d)))
}

func main() {
	rps := flag.Float64("rps", 40, "requests per second (Poisson arrivals)")
	fanout := flag.Int("fanout", 4, "parts per request, run side by side")
	workUs := flag.Int("work_us", 3000, "CPU per part, microseconds")
	seconds := flag.Float64("seconds", 10, "how long to serve")
	seed := flag.Int64("seed", 1, "arrivals' seed")
	fixed := flag.Int("rounds", 0, "spin rounds per part (0: as many as take -work_us here, measured at the start)")
	flag.Parse()
	if *rps <= 0 || *fanout < 1 || *workUs < 1 || *seconds <= 0 || *fixed < 0 {
		fmt.Fprintln(os.Stderr, "fanout: -rps, -fanout, -work_us and -seconds must be positive, -rounds at least 0")
		os.Exit(2)
	}
	rng := rand.New(rand.NewSource(*seed))
	var mu sync.Mutex
	var lat []float64
	var all sync.WaitGroup
	work := *fixed
	if work == 0 {
		work = rounds(time.Duration(*workUs) * time.Microsecond)
	}
	end := time.Now().Add(time.Duration(*seconds * float64(time.Second)))
	next := time.Now()
	for {
		next = next.Add(time.Duration(rng.ExpFloat64() / *rps * float64(time.Second)))
		if next.After(end) {
			break
		}
		time.Sleep(time.Until(next))
		arrived := next
		all.Add(1)
		go func() {
			defer all.Done()
			var parts sync.WaitGroup
			for i := 0; i < *fanout; i++ {
				parts.Add(1)
				go func() { defer parts.Done(); spin(work) }()
			}
			parts.Wait()
			mu.Lock()
			lat = append(lat, float64(time.Since(arrived).Microseconds()))
			mu.Unlock()
		}()
	}
	all.Wait()
	sort.Float64s(lat)
	q := func(p float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(p*float64(len(lat))))]
	}
	_ = json.NewEncoder(os.Stdout).Encode(map[string]any{"requests": len(lat), "p50_us": q(0.5), "p99_us": q(0.99),
		"gomaxprocs": runtime.GOMAXPROCS(0), "rounds_per_part": work})
}
