package main

import (
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
)

// Host is the node's cgroup tree as the plugin sees it (the host's /sys mounted at Root in a
// DaemonSet): where the CPU controller is, and how a container's cgroups path maps onto it.
type Host struct {
	Root    string // the cgroup filesystem's mount: /sys/fs/cgroup
	V2      bool   // unified hierarchy with the cpu controller
	CPUDir  string // v1: the cpu controller's mount; v2: Root
	SysRoot string // /sys, for the online CPUs
}

// DetectHost finds the CPU controller under root: cgroup v2 when root's cgroup.controllers
// lists cpu, else a v1 hierarchy named cpu (cpu or cpu,cpuacct).
func DetectHost(root, sysRoot string) (Host, error) {
	h := Host{Root: root, SysRoot: sysRoot}
	if b, err := os.ReadFile(filepath.Join(root, "cgroup.controllers")); err == nil {
		for _, c := range strings.Fields(string(b)) {
			if c == "cpu" {
				h.V2, h.CPUDir = true, root
				return h, nil
			}
		}
	}
	for _, name := range []string{"cpu", "cpu,cpuacct", "cpuacct,cpu"} {
		dir := filepath.Join(root, name)
		if _, err := os.Stat(filepath.Join(dir, "cpu.cfs_quota_us")); err == nil {
			h.CPUDir = dir
			return h, nil
		}
	}
	return h, fmt.Errorf("%s: no cgroup v2 with the cpu controller, nor a v1 cpu hierarchy", root)
}

func (h Host) BurstFile() string {
	if h.V2 {
		return "cpu.max.burst"
	}
	return "cpu.cfs_burst_us"
}

var systemdPath = regexp.MustCompile(`^([^:/]*\.slice):([^:]*):([^:]+)$`)

// GroupDir maps a runtime's cgroups path onto the host's CPU controller: a path
// ("/kubepods/burstable/pod1/abc") under the controller, or systemd's "slice:prefix:name"
// ("kubepods-burstable-pod1.slice:cri-containerd:abc"), whose slice nests by its dashes.
func (h Host) GroupDir(cgroupsPath string) (string, error) {
	if m := systemdPath.FindStringSubmatch(cgroupsPath); m != nil {
		dir, err := sliceDir(m[1])
		if err != nil {
			return "", err
		}
		leaf := m[3]
		if m[2] != "" {
			leaf = m[2] + "-" + m[3] + ".scope"
		}
		return filepath.Join(h.CPUDir, dir, leaf), nil
	}
	if !strings.Contains(cgroupsPath, "/") && strings.HasSuffix(cgroupsPath, ".slice") {
		dir, err := sliceDir(cgroupsPath) // systemd's pod slice: a cgroup parent
		return filepath.Join(h.CPUDir, dir), err
	}
	if cgroupsPath == "" || strings.Contains(cgroupsPath, "..") {
		return "", fmt.Errorf("cgroups path %q: not a path under the cgroup root", cgroupsPath)
	}
	return filepath.Join(h.CPUDir, filepath.Clean("/"+cgroupsPath)), nil
}

// sliceDir: "a-b-c.slice" -> "a.slice/a-b.slice/a-b-c.slice" (systemd.slice(5)).
func sliceDir(slice string) (string, error) {
	name := strings.TrimSuffix(slice, ".slice")
	if name == "" || name == "-" {
		return "", nil
	}
	if strings.HasPrefix(name, "-") || strings.HasSuffix(name, "-") || strings.Contains(name, "--") {
		return "", fmt.Errorf("slice %q: not a valid slice name", slice)
	}
	parts := strings.Split(name, "-")
	dirs := make([]string, len(parts))
	for i := range parts {
		dirs[i] = strings.Join(parts[:i+1], "-") + ".slice"
	}
	return filepath.Join(dirs...), nil
}

// ReadLimit reads a group's quota and period (v2 cpu.max, v1 cfs_quota_us/cfs_period_us).
func (h Host) ReadLimit(dir string) (quota, period int64, err error) {
	if h.V2 {
		text, err := readText(filepath.Join(dir, "cpu.max"))
		if err != nil {
			return 0, 0, err
		}
		f := strings.Fields(text)
		if len(f) != 2 {
			return 0, 0, fmt.Errorf("%s: %q", filepath.Join(dir, "cpu.max"), text)
		}
		if period, err = strconv.ParseInt(f[1], 10, 64); err != nil {
			return 0, 0, err
		}
		if f[0] == "max" {
			return -1, period, nil
		}
		quota, err = strconv.ParseInt(f[0], 10, 64)
		return quota, period, err
	}
	if quota, err = readInt(filepath.Join(dir, "cpu.cfs_quota_us")); err != nil {
		return 0, 0, err
	}
	period, err = readInt(filepath.Join(dir, "cpu.cfs_period_us"))
	return quota, period, err
}

func (h Host) ReadBurst(dir string) (int64, error) {
	return readInt(filepath.Join(dir, h.BurstFile()))
}

// WriteBurst writes the burst, reads it back and, if the kernel refused it or it reads
// otherwise, writes back the value it found: the group is never left half-changed.
func (h Host) WriteBurst(dir string, us int64) (old int64, err error) {
	path := filepath.Join(dir, h.BurstFile())
	if old, err = readInt(path); err != nil {
		return 0, err
	}
	if old == us {
		return old, nil
	}
	if err = writeInt(path, us); err == nil {
		var now int64
		if now, err = readInt(path); err == nil && now != us {
			err = fmt.Errorf("%s reads %d after writing %d", path, now, us)
		}
	}
	if err != nil {
		if now, rerr := readInt(path); rerr == nil && now != old {
			_ = writeInt(path, old)
		}
		return old, err
	}
	return old, nil
}

// OnlineCPUs reads /sys/devices/system/cpu/online.
func (h Host) OnlineCPUs() (map[int]bool, error) {
	text, err := readText(filepath.Join(h.SysRoot, "devices/system/cpu/online"))
	if err != nil {
		return nil, err
	}
	return ParseCPUList(text)
}

// NodeHZ reads CONFIG_HZ from the running kernel's published config (/proc/config.gz or
// /boot/config-RELEASE); 0 when neither says.
func NodeHZ(procRoot, bootRoot string) int {
	var release syscall.Utsname
	_ = syscall.Uname(&release)
	rel := make([]byte, 0, len(release.Release))
	for _, c := range release.Release {
		if c == 0 {
			break
		}
		rel = append(rel, byte(c))
	}
	for _, path := range []string{filepath.Join(procRoot, "config.gz"), filepath.Join(bootRoot, "config-"+string(rel))} {
		if hz := configHZ(path); hz > 0 {
			return hz
		}
	}
	return 0
}

func configHZ(path string) int {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		z, err := gzip.NewReader(f)
		if err != nil {
			return 0
		}
		r = z
	}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CONFIG_HZ="); ok {
			hz, err := strconv.Atoi(v)
			if err == nil && hz > 0 {
				return hz
			}
		}
	}
	return 0
}

func readText(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("%s: no such file", path)
		}
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

func readInt(path string) (int64, error) {
	text, err := readText(path)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: expected a number, got %q", path, text)
	}
	return n, nil
}

func writeInt(path string, v int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(strconv.FormatInt(v, 10))
	cerr := f.Close()
	if werr != nil {
		return fmt.Errorf("the kernel refused %d in %s: %w", v, path, werr)
	}
	return cerr
}
