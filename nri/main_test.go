package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"
)

// a plugin on a fake tree: 2 online CPUs, HZ=250 (auto: 8000 us), one container group
func fakePlugin(t *testing.T, v2 bool) (*plugin, string, *strings.Builder) {
	root := t.TempDir()
	write(t, filepath.Join(root, "sys/devices/system/cpu/online"), "0-1\n")
	cpu := filepath.Join(root, "cgroup", "cpu")
	if v2 {
		cpu = filepath.Join(root, "cgroup")
	}
	group := filepath.Join(cpu, "pods", "c1")
	burst := "cpu.cfs_burst_us"
	if v2 {
		burst = "cpu.max.burst"
	}
	write(t, filepath.Join(group, burst), "8000\n")
	out := &strings.Builder{}
	log := logrus.New()
	log.SetOutput(io.MultiWriter(out, io.Discard))
	host := Host{Root: filepath.Join(root, "cgroup"), V2: v2, CPUDir: cpu, SysRoot: filepath.Join(root, "sys")}
	return &plugin{host: host, hz: 250, node: Policy{Mode: "auto"}, log: log, clamps: map[string]string{},
		ceilings: map[string]ceiling{}}, group, out
}

func container(quota int64, ann map[string]string) *api.Container {
	return &api.Container{Id: "c1", Name: "web", Annotations: ann, Linux: &api.LinuxContainer{
		CgroupsPath: "/pods/c1", Resources: resourcesOf(quota)}}
}

func resourcesOf(quota int64) *api.LinuxResources {
	return &api.LinuxResources{Cpu: &api.LinuxCPU{Quota: api.Int64(quota), Period: api.UInt64(uint64(100000))}}
}

func readFile(t *testing.T, path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestUpdateLowersTheBurstBeforeTheRuntimeWritesTheQuota(t *testing.T) {
	p, group, out := fakePlugin(t, false)
	ctx := context.Background()
	updates, err := p.UpdateContainer(ctx, &api.PodSandbox{}, container(50000, nil), resourcesOf(5000))
	if err != nil || updates != nil {
		t.Fatalf("v1: no update of the runtime's, no error: %v %v", updates, err)
	}
	if got := readFile(t, filepath.Join(group, "cpu.cfs_burst_us")); got != "5000" {
		t.Errorf("burst before the new quota: %s, want 5000 (clamped to the new quota)", got)
	}
	if !strings.Contains(out.String(), "burst clamped") || strings.Count(out.String(), "burst clamped") != 1 {
		t.Errorf("the clamp is said once: %s", out.String())
	}
	// raised after the runtime's update, where the new quota allows more
	if err := p.PostUpdateContainer(ctx, &api.PodSandbox{}, container(80000, nil)); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(group, "cpu.cfs_burst_us")); got != "8000" {
		t.Errorf("burst after a higher quota: %s, want 8000", got)
	}
}

func TestV2StartWritesTheGroupAndAStaleSpecBurstIsLoweredInTheUpdate(t *testing.T) {
	p, group, _ := fakePlugin(t, true)
	ctx := context.Background()
	write(t, filepath.Join(group, "cpu.max.burst"), "0\n")
	c := container(50000, nil)
	c.State = api.ContainerState_CONTAINER_RUNNING
	if err := p.StartContainer(ctx, &api.PodSandbox{}, c); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(group, "cpu.max.burst")); got != "8000" {
		t.Fatalf("v2 start: cpu.max.burst %s, want 8000 (written, not in the spec)", got)
	}
	// someone put cpu.max.burst 8000 in the spec: runc re-applies it after cpu.max at every
	// update, and a quota of 6000 would be refused; the update lowers it too
	c.Linux.Resources.Unified = map[string]string{"cpu.max.burst": "8000"}
	updates, err := p.UpdateContainer(ctx, &api.PodSandbox{}, c, resourcesOf(6000))
	if err != nil || len(updates) != 1 || updates[0].Linux.Resources.Unified["cpu.max.burst"] != "6000" {
		t.Fatalf("the spec's burst lowered in the update: %v %v", updates, err)
	}
	if got := readFile(t, filepath.Join(group, "cpu.max.burst")); got != "6000" {
		t.Errorf("the live burst lowered first: %s", got)
	}
}

func TestAnUpdateLeavingTheQuotaUnchangedKeepsTheBurst(t *testing.T) {
	p, group, _ := fakePlugin(t, false)
	memoryOnly := &api.LinuxResources{Cpu: &api.LinuxCPU{Quota: api.Int64(0), Period: api.UInt64(uint64(0))}}
	if _, err := p.UpdateContainer(context.Background(), &api.PodSandbox{}, container(50000, nil), memoryOnly); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(group, "cpu.cfs_burst_us")); got != "8000" {
		t.Errorf("quota 0 in an update means unchanged (CRI): burst %s, want 8000", got)
	}
}

func TestOffStillLowersABurstTheNewQuotaWouldRefuse(t *testing.T) {
	p, group, _ := fakePlugin(t, false)
	off := container(50000, map[string]string{containerKey + "web": "off"})
	if _, err := p.UpdateContainer(context.Background(), &api.PodSandbox{}, off, resourcesOf(5000)); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(group, "cpu.cfs_burst_us")); got != "5000" {
		t.Errorf("off leaves the burst alone, but not above a new quota: %s, want 5000", got)
	}
}

func TestThePodsCeilingAddsUpTheContainersCuts(t *testing.T) {
	p, _, _ := fakePlugin(t, false)
	podDir := filepath.Join(p.host.CPUDir, "pods")
	write(t, filepath.Join(podDir, "cpu.cfs_quota_us"), "100000\n")
	write(t, filepath.Join(podDir, "cpu.cfs_period_us"), "100000\n")
	write(t, filepath.Join(podDir, "cpu.cfs_burst_us"), "8000\n")
	pod := &api.PodSandbox{Id: "p1", Name: "p", Namespace: "default", Linux: &api.LinuxPodSandbox{CgroupParent: "/pods"}}
	ctx := context.Background()
	a, b := container(50000, nil), container(50000, nil)
	b.Id, b.Linux.CgroupsPath = "c2", "/pods/c2"
	write(t, filepath.Join(podDir, "c2", "cpu.cfs_burst_us"), "8000\n")
	// each container 50 -> 47.5 ms: the kubelet will write the pod 100 -> 95 ms
	for _, c := range []*api.Container{a, b} {
		if _, err := p.UpdateContainer(ctx, pod, c, resourcesOf(47500)); err != nil {
			t.Fatal(err)
		}
	}
	if got := p.ceilings["p1"]; got.burstUs != 95000 || got.podQuota != 100000 {
		t.Errorf("ceiling after two cuts of 2.5 ms: %+v, want 95000 against 100000", got)
	}
	// a deeper cut: 50 -> 1 ms each: pod 100 -> 2 ms; the pod's burst must fit under 2 ms
	for _, c := range []*api.Container{a, b} {
		c.Linux.Resources = resourcesOf(47500)
		if _, err := p.UpdateContainer(ctx, pod, c, resourcesOf(1000)); err != nil {
			t.Fatal(err)
		}
	}
	if got := readFile(t, filepath.Join(podDir, "cpu.cfs_burst_us")); got != "2000" {
		t.Errorf("pod burst before the kubelet's 2 ms: %s, want 2000", got)
	}
	// the kubelet writes the pod's quota: the ceiling is dropped, the burst sized for it
	write(t, filepath.Join(podDir, "cpu.cfs_quota_us"), "2000\n")
	if err := p.PostUpdateContainer(ctx, pod, b); err != nil {
		t.Fatal(err)
	}
	if _, held := p.ceilings["p1"]; held {
		t.Error("the ceiling outlived the pod's new quota")
	}
}

func TestFailOpen(t *testing.T) {
	p, group, out := fakePlugin(t, true)
	ctx := context.Background()
	bad := container(50000, map[string]string{containerKey + "web": "lots"})
	bad.State = api.ContainerState_CONTAINER_RUNNING
	if err := p.StartContainer(ctx, &api.PodSandbox{}, bad); err != nil {
		t.Errorf("a malformed annotation: the container as the runtime made it, no error: %v", err)
	}
	gone := container(50000, nil)
	gone.Linux.CgroupsPath, gone.State = "/pods/gone", api.ContainerState_CONTAINER_RUNNING
	if err := p.PostUpdateContainer(ctx, &api.PodSandbox{}, gone); err != nil {
		t.Errorf("a missing group is the plugin's error, not the update's: %v", err)
	}
	if p.errors.Load() != 2 || !strings.Contains(out.String(), `annotation cpu-burst.bwlab.io/container.web: \"lots\"`) {
		t.Errorf("each error logged and counted: %d\n%s", p.errors.Load(), out.String())
	}
	if got := readFile(t, filepath.Join(group, "cpu.max.burst")); got != "8000" {
		t.Errorf("nothing written on error: %s", got)
	}
	off := container(50000, map[string]string{podKey: "off"})
	write(t, filepath.Join(group, "cpu.max.burst"), "0\n")
	if err := p.StartContainer(ctx, &api.PodSandbox{Annotations: off.Annotations}, off); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(group, "cpu.max.burst")); got != "0" {
		t.Errorf("off: no burst: %s", got)
	}
}
