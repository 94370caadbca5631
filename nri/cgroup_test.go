package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestDetectHost(t *testing.T) {
	v2 := t.TempDir()
	write(t, filepath.Join(v2, "cgroup.controllers"), "cpuset cpu io memory pids\n")
	if h, err := DetectHost(v2, "/sys"); err != nil || !h.V2 || h.CPUDir != v2 || h.BurstFile() != "cpu.max.burst" {
		t.Errorf("v2: %+v %v", h, err)
	}
	v1 := t.TempDir()
	write(t, filepath.Join(v1, "unified", "cgroup.controllers"), "")
	write(t, filepath.Join(v1, "cpu,cpuacct", "cpu.cfs_quota_us"), "-1\n")
	if h, err := DetectHost(v1, "/sys"); err != nil || h.V2 || h.CPUDir != filepath.Join(v1, "cpu,cpuacct") || h.BurstFile() != "cpu.cfs_burst_us" {
		t.Errorf("v1: %+v %v", h, err)
	}
	// cgroup v2 without the cpu controller (this lab's host: /sys/fs/cgroup/unified) is not v2
	bare := t.TempDir()
	write(t, filepath.Join(bare, "cgroup.controllers"), "pids\n")
	if _, err := DetectHost(bare, "/sys"); err == nil || !strings.Contains(err.Error(), "no cgroup v2 with the cpu controller") {
		t.Errorf("no cpu controller: %v", err)
	}
}

func TestGroupDir(t *testing.T) {
	h := Host{CPUDir: "/sys/fs/cgroup"}
	for path, want := range map[string]string{
		"/k8s.io/abc":                 "/sys/fs/cgroup/k8s.io/abc",
		"kubepods/burstable/pod1/abc": "/sys/fs/cgroup/kubepods/burstable/pod1/abc",
		"kubepods-burstable-pod1.slice:cri-containerd:abc": "/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/" +
			"kubepods-burstable-pod1.slice/cri-containerd-abc.scope",
		"system.slice:docker:abc": "/sys/fs/cgroup/system.slice/docker-abc.scope",
	} {
		if got, err := h.GroupDir(path); err != nil || got != want {
			t.Errorf("GroupDir(%q) = %q, %v; want %q", path, got, err, want)
		}
	}
	for _, bad := range []string{"", "/a/../../etc", "-bad-.slice:x:y"} {
		if _, err := h.GroupDir(bad); err == nil {
			t.Errorf("GroupDir(%q): want an error", bad)
		}
	}
}

func TestReadLimitAndBurst(t *testing.T) {
	dir := t.TempDir()
	v2 := Host{V2: true}
	write(t, filepath.Join(dir, "cpu.max"), "50000 100000\n")
	write(t, filepath.Join(dir, "cpu.max.burst"), "0\n")
	if q, p, err := v2.ReadLimit(dir); err != nil || q != 50000 || p != 100000 {
		t.Errorf("v2 limit: %d %d %v", q, p, err)
	}
	write(t, filepath.Join(dir, "cpu.max"), "max 100000\n")
	if q, _, err := v2.ReadLimit(dir); err != nil || q != -1 {
		t.Errorf("v2 no quota: %d %v", q, err)
	}
	if old, err := v2.WriteBurst(dir, 8000); err != nil || old != 0 {
		t.Fatalf("write: %d %v", old, err)
	}
	if b, err := v2.ReadBurst(dir); err != nil || b != 8000 {
		t.Errorf("read back: %d %v", b, err)
	}
	if _, err := v2.WriteBurst(filepath.Join(dir, "gone"), 1); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("a missing group: %v", err)
	}
	v1 := Host{}
	write(t, filepath.Join(dir, "cpu.cfs_quota_us"), "-1\n")
	write(t, filepath.Join(dir, "cpu.cfs_period_us"), "10000\n")
	if q, p, err := v1.ReadLimit(dir); err != nil || q != -1 || p != 10000 {
		t.Errorf("v1 limit: %d %d %v", q, p, err)
	}
}

func TestConfigHZ(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config-x")
	write(t, path, "CONFIG_HZ_250=y\nCONFIG_HZ=250\n")
	if hz := configHZ(path); hz != 250 {
		t.Errorf("configHZ: %d", hz)
	}
	if hz := configHZ(path + ".missing"); hz != 0 {
		t.Errorf("a missing config: %d", hz)
	}
}
