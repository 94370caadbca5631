package main

import (
	"fmt"
	"strconv"
	"strings"
)

// Policy says what a container's burst should be: none (off), one tick per CPU it may run on
// (auto), or a value asked for in microseconds.
type Policy struct {
	Mode  string // "auto", "off" or "us"
	Value int64  // microseconds, for Mode "us"
}

func (p Policy) String() string {
	if p.Mode == "us" {
		return fmt.Sprintf("%d us", p.Value)
	}
	return p.Mode
}

// Annotation keys: the pod-wide one, and a per-container one that takes precedence.
const (
	podKey       = "cpu-burst.bwlab.io/pod"
	containerKey = "cpu-burst.bwlab.io/container." // + the container's name
)

// ParsePolicy reads "auto", "off" or a whole number of microseconds (a "us" suffix allowed).
func ParsePolicy(text string) (Policy, error) {
	t := strings.TrimSpace(text)
	switch t {
	case "auto", "off":
		return Policy{Mode: t}, nil
	}
	n, err := strconv.ParseInt(strings.TrimSuffix(t, "us"), 10, 64)
	if err != nil || n < 0 {
		return Policy{}, fmt.Errorf("%q: expected auto, off or microseconds (e.g. 8000)", text)
	}
	return Policy{Mode: "us", Value: n}, nil
}

// Choose the policy of one container: its own annotation, else its pod's, else the node's
// default; a namespace that is not opted in gets none. A malformed annotation is an error:
// the caller leaves the container as the runtime made it (fail open) and says why.
func Choose(node Policy, ns Namespaces, namespace, container string, podAnn, ctrAnn map[string]string) (Policy, string, error) {
	if !ns.Allows(namespace) {
		return Policy{Mode: "off"}, "namespace " + namespace + " not opted in", nil
	}
	for _, src := range []struct {
		ann map[string]string
		key string
	}{{ctrAnn, containerKey + container}, {podAnn, containerKey + container}, {podAnn, podKey}} {
		if v, ok := src.ann[src.key]; ok {
			p, err := ParsePolicy(v)
			if err != nil {
				return Policy{}, "", fmt.Errorf("annotation %s: %v", src.key, err)
			}
			return p, "annotation " + src.key, nil
		}
	}
	return node, "node default", nil
}

// Namespaces: an opt-in list (empty: every namespace) and an opt-out list.
type Namespaces struct {
	Include []string
	Exclude []string
}

func (n Namespaces) Allows(namespace string) bool {
	for _, x := range n.Exclude {
		if x == namespace {
			return false
		}
	}
	if len(n.Include) == 0 {
		return true
	}
	for _, x := range n.Include {
		if x == namespace {
			return true
		}
	}
	return false
}

// Limit is a container's CPU bandwidth as the runtime will apply it.
type Limit struct {
	QuotaUs  int64 // <= 0: no quota
	PeriodUs int64
	CPUs     int // the CPUs it may run on: its cpuset's online CPUs
}

// Decision is the burst to apply and, where the policy's value did not fit, why.
type Decision struct {
	BurstUs int64
	Wanted  int64  // what the policy asked for before the kernel's burst <= quota rule
	Clamp   string // empty unless Wanted > quota
}

// Decide the burst: auto is one scheduler tick per CPU the group may run on (each of them can
// overrun the period's end by up to a tick before the throttle is noticed, a debt the next
// period pays); the kernel refuses a burst above the quota, so it is clamped there, and the
// clamp names what would cover the rest.
func Decide(p Policy, l Limit, hz int) Decision {
	if l.QuotaUs <= 0 || p.Mode == "off" {
		return Decision{}
	}
	tick := int64(1000000 / hz)
	want := p.Value
	if p.Mode == "auto" {
		want = tick * int64(l.CPUs)
	}
	if want <= l.QuotaUs {
		return Decision{BurstUs: want, Wanted: want}
	}
	d := Decision{BurstUs: l.QuotaUs, Wanted: want}
	if p.Mode == "auto" {
		// the same CPUs in a longer period: quota/period kept, quota >= one tick per CPU
		cover := want * l.PeriodUs / l.QuotaUs
		fit := l.QuotaUs / tick // CPUs whose tick the quota covers
		cpuset := ""
		if fit >= 1 {
			cpuset = ", a cpuset of at most " + plural(fit, "CPU")
		}
		d.Clamp = fmt.Sprintf("one tick (%d us) on each of %s is %d us, above the quota %d us: burst %d us "+
			"covers %d %% of it; a period of %d ms at the same CPU share%s, or the bwlab kernel series would "+
			"cover the rest", tick, plural(int64(l.CPUs), "CPU"), want, l.QuotaUs, l.QuotaUs,
			100*l.QuotaUs/want, (cover+999)/1000, cpuset)
	} else {
		d.Clamp = fmt.Sprintf("%d us asked, above the quota %d us (the kernel allows at most the quota)", want, l.QuotaUs)
	}
	return d
}

func plural(n int64, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// ParseCPUList reads a cpuset list ("0-3,8,10-11"); an empty list is an empty set.
func ParseCPUList(text string) (map[int]bool, error) {
	set := map[int]bool{}
	t := strings.TrimSpace(text)
	if t == "" {
		return set, nil
	}
	for _, part := range strings.Split(t, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("cpu list %q: bad entry %q", text, part)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("cpu list %q: bad range %q", text, part)
			}
		}
		for c := a; c <= b; c++ {
			set[c] = true
		}
	}
	return set, nil
}

// UsableCPUs is |cpuset ∩ online|; an empty cpuset means every online CPU.
func UsableCPUs(cpuset string, online map[int]bool) (int, error) {
	want, err := ParseCPUList(cpuset)
	if err != nil {
		return 0, err
	}
	if len(want) == 0 {
		return max(len(online), 1), nil
	}
	n := 0
	for c := range want {
		if online[c] {
			n++
		}
	}
	return max(n, 1), nil
}
