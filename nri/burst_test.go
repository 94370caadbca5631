package main

import (
	"strings"
	"testing"
)

func TestParsePolicy(t *testing.T) {
	for text, want := range map[string]Policy{
		"auto": {Mode: "auto"}, "off": {Mode: "off"}, "8000": {Mode: "us", Value: 8000},
		"8000us": {Mode: "us", Value: 8000}, " 0 ": {Mode: "us"},
	} {
		got, err := ParsePolicy(text)
		if err != nil || got != want {
			t.Errorf("ParsePolicy(%q) = %v, %v; want %v", text, got, err, want)
		}
	}
	for _, bad := range []string{"", "banana", "-5", "8ms", "1e3", "auto " + "x"} {
		if _, err := ParsePolicy(bad); err == nil || !strings.Contains(err.Error(), "expected auto, off or microseconds") {
			t.Errorf("ParsePolicy(%q): want a clear error, got %v", bad, err)
		}
	}
}

func TestChoosePrecedence(t *testing.T) {
	node := Policy{Mode: "auto"}
	all := Namespaces{}
	pod := map[string]string{podKey: "off", containerKey + "web": "3000"}
	ctr := map[string]string{containerKey + "web": "5000"}
	if p, src, _ := Choose(node, all, "default", "web", pod, ctr); p.Value != 5000 || !strings.Contains(src, "container.web") {
		t.Errorf("the container's own annotation first: got %v from %s", p, src)
	}
	if p, _, _ := Choose(node, all, "default", "web", pod, nil); p.Value != 3000 {
		t.Errorf("then the pod's annotation for the container: got %v", p)
	}
	if p, _, _ := Choose(node, all, "default", "db", pod, nil); p.Mode != "off" {
		t.Errorf("then the pod-wide annotation: got %v", p)
	}
	if p, src, _ := Choose(node, all, "default", "db", nil, nil); p.Mode != "auto" || src != "node default" {
		t.Errorf("then the node default: got %v from %s", p, src)
	}
	if _, _, err := Choose(node, all, "default", "db", map[string]string{podKey: "lots"}, nil); err == nil {
		t.Error("a malformed annotation must be an error (the caller fails open)")
	}
}

func TestNamespaces(t *testing.T) {
	optIn := Namespaces{Include: []string{"prod"}}
	if !optIn.Allows("prod") || optIn.Allows("dev") {
		t.Error("opt-in list: only its namespaces")
	}
	optOut := Namespaces{Exclude: []string{"kube-system"}}
	if optOut.Allows("kube-system") || !optOut.Allows("dev") {
		t.Error("opt-out list: every namespace but its own")
	}
	p, src, _ := Choose(Policy{Mode: "auto"}, optIn, "dev", "x", map[string]string{podKey: "auto"}, nil)
	if p.Mode != "off" || !strings.Contains(src, "not opted in") {
		t.Errorf("a namespace not opted in gets none, whatever its annotations: %v (%s)", p, src)
	}
}

func TestDecideAuto(t *testing.T) {
	// HZ=250: a 4 ms tick; 2 CPUs under a 50 ms quota: 8 ms
	d := Decide(Policy{Mode: "auto"}, Limit{QuotaUs: 50000, PeriodUs: 100000, CPUs: 2}, 250)
	if d.BurstUs != 8000 || d.Clamp != "" {
		t.Errorf("auto on 2 CPUs at HZ=250: %+v", d)
	}
	// the example: 64 CPUs x 4 ms = 256 ms above a 1-CPU quota of 100 ms
	d = Decide(Policy{Mode: "auto"}, Limit{QuotaUs: 100000, PeriodUs: 100000, CPUs: 64}, 250)
	if d.BurstUs != 100000 || d.Wanted != 256000 {
		t.Fatalf("clamped to the quota: %+v", d)
	}
	for _, want := range []string{"256000 us", "covers 39 % of it", "a period of 256 ms", "at most 25 CPUs", "series"} {
		if !strings.Contains(d.Clamp, want) {
			t.Errorf("clamp message %q lacks %q", d.Clamp, want)
		}
	}
	if d := Decide(Policy{Mode: "auto"}, Limit{QuotaUs: -1, PeriodUs: 100000, CPUs: 4}, 250); d.BurstUs != 0 {
		t.Errorf("no quota, no burst: %+v", d)
	}
	if d := Decide(Policy{Mode: "off"}, Limit{QuotaUs: 50000, PeriodUs: 100000, CPUs: 4}, 250); d.BurstUs != 0 {
		t.Errorf("off: %+v", d)
	}
	if d := Decide(Policy{Mode: "auto"}, Limit{QuotaUs: 50000, PeriodUs: 100000, CPUs: 4}, 1000); d.BurstUs != 4000 {
		t.Errorf("HZ=1000: 1 ms per CPU: %+v", d)
	}
}

func TestDecideValue(t *testing.T) {
	if d := Decide(Policy{Mode: "us", Value: 3000}, Limit{QuotaUs: 50000, PeriodUs: 100000, CPUs: 4}, 250); d.BurstUs != 3000 || d.Clamp != "" {
		t.Errorf("a value that fits: %+v", d)
	}
	d := Decide(Policy{Mode: "us", Value: 90000}, Limit{QuotaUs: 50000, PeriodUs: 100000, CPUs: 4}, 250)
	if d.BurstUs != 50000 || !strings.Contains(d.Clamp, "90000 us asked, above the quota 50000 us") {
		t.Errorf("a value above the quota is clamped and said: %+v", d)
	}
}

func TestUsableCPUs(t *testing.T) {
	online, _ := ParseCPUList("0-3,6")
	for cpuset, want := range map[string]int{"": 5, "0-1": 2, "2-7": 3, "5": 1, "0,2,6": 3} {
		if n, err := UsableCPUs(cpuset, online); err != nil || n != want {
			t.Errorf("UsableCPUs(%q) = %d, %v; want %d", cpuset, n, err, want)
		}
	}
	for _, bad := range []string{"a", "3-1", "1,,2", "-1"} {
		if _, err := UsableCPUs(bad, online); err == nil {
			t.Errorf("UsableCPUs(%q): want an error", bad)
		}
	}
}
