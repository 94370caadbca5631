// bwlab-nri: an NRI plugin that gives each container with a CPU quota a burst of one scheduler
// tick per CPU it may run on (clamped to its quota), and its pod's group one too, so that the
// tick's overrun of a period's end is not paid for by throttling the next period. It writes
// the live groups itself (never the container's spec: a burst in the spec would be re-applied
// by every later update, and refuse a lower quota even once the plugin is gone), lowers the
// burst before the runtime writes a lower quota so that a resize is never refused, raises it
// after, synchronizes with the running containers when it (re)connects, and fails open: an
// error of its own is logged and counted, and the container runs as the runtime made it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"github.com/sirupsen/logrus"
)

type plugin struct {
	stub   stub.Stub
	host   Host
	hz     int
	node   Policy
	ns     Namespaces
	log    *logrus.Logger
	errors atomic.Int64      // errors of the plugin's own, each one logged; the container ran as made
	mu     sync.Mutex        // one container's hooks at a time: pre-lowering and raising never interleave
	clamps map[string]string // the clamp last said of each container (said once, not at every hook)
	// ceilings: a pod's burst may not exceed this until its group's quota is seen at or below
	// it: a container's quota was lowered, and the kubelet lowers the pod's quota after
	ceilings map[string]ceiling
}

// ceiling: the most a pod's burst may be until the kubelet writes the pod's lower quota; it
// holds while the pod's quota is still the one it was recorded against.
type ceiling struct {
	burstUs  int64
	podQuota int64
}

func (p *plugin) fail(c *api.Container, what string, err error) {
	n := p.errors.Add(1)
	p.log.WithFields(logrus.Fields{"container": name(c), "errors": n}).Errorf("%s: %v (left as the runtime made it)", what, err)
}

func name(c *api.Container) string {
	if c == nil {
		return "?"
	}
	return c.Name + "/" + shortID(c.Id)
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// plan: the burst one container should have with these resources, or ok=false when the
// plugin leaves it alone (its policy is off and it never set one, or an error, logged).
// effective: the resources an update leaves the container with. In an update a quota or
// period of 0 and an empty cpuset mean "unchanged" (CRI): they are the container's current ones.
func effective(c *api.Container, res *api.LinuxResources) (quota, period int64, cpus string) {
	quota, period = quotaOf(resources(c))
	if cur := resources(c); cur != nil && cur.Cpu != nil {
		cpus = cur.Cpu.Cpus
	}
	if res == nil || res.Cpu == nil {
		return quota, period, cpus
	}
	if q := res.Cpu.Quota.Get(); q != nil && *q != 0 {
		quota = *q
	}
	if per := res.Cpu.Period.Get(); per != nil && *per != 0 {
		period = int64(*per)
	}
	if res.Cpu.Cpus != "" {
		cpus = res.Cpu.Cpus
	}
	return quota, period, cpus
}

func (p *plugin) plan(pod *api.PodSandbox, c *api.Container, res *api.LinuxResources) (Decision, Policy, bool) {
	var podAnn map[string]string
	namespace := ""
	if pod != nil {
		podAnn, namespace = pod.Annotations, pod.Namespace
	}
	pol, source, err := Choose(p.node, p.ns, namespace, c.Name, podAnn, c.Annotations)
	if err != nil {
		p.fail(c, "policy", err)
		return Decision{}, pol, false
	}
	lim := Limit{}
	var cpuset string
	lim.QuotaUs, lim.PeriodUs, cpuset = effective(c, res)
	online, err := p.host.OnlineCPUs()
	if err != nil {
		p.fail(c, "online CPUs", err)
		return Decision{}, pol, false
	}
	if lim.CPUs, err = UsableCPUs(cpuset, online); err != nil {
		p.fail(c, "cpuset", err)
		return Decision{}, pol, false
	}
	d := Decide(pol, lim, p.hz)
	if d.Clamp != p.clamps[c.Id] {
		if d.Clamp != "" {
			p.log.WithField("container", name(c)).Warnf("burst clamped: %s", d.Clamp)
		}
		p.clamps[c.Id] = d.Clamp
	}
	p.log.WithFields(logrus.Fields{"container": name(c), "policy": pol.String(), "from": source,
		"quota_us": lim.QuotaUs, "period_us": lim.PeriodUs, "cpus": lim.CPUs}).Debugf("burst %d us", d.BurstUs)
	return d, pol, true
}

func resources(c *api.Container) *api.LinuxResources {
	if c == nil || c.Linux == nil {
		return nil
	}
	return c.Linux.Resources
}

// apply writes the burst into the container's live group (verified; the old value kept on
// failure) and logs the change. A group not made yet (a container created, not started: the
// runtime makes its group at start) is no error: StartContainer will write it.
func (p *plugin) apply(c *api.Container, burst int64, why string) {
	if c.Linux == nil {
		p.fail(c, why, fmt.Errorf("no Linux section: no cgroups path"))
		return
	}
	dir, err := p.host.GroupDir(c.Linux.CgroupsPath)
	if err == nil {
		if _, serr := os.Stat(dir); errors.Is(serr, os.ErrNotExist) && c.State != api.ContainerState_CONTAINER_RUNNING {
			return
		}
		var old int64
		if old, err = p.host.WriteBurst(dir, burst); err == nil && old != burst {
			p.log.WithField("container", name(c)).Infof("%s: burst %d -> %d us (%s)", why, old, burst, dir)
		}
	}
	if err != nil {
		p.fail(c, why, err)
	}
}

func (p *plugin) Configure(_ context.Context, config, runtime, version string) (api.EventMask, error) {
	p.log.Infof("connected to %s %s; HZ %d, %s, default %s, namespaces %s", runtime, version, p.hz,
		p.host.BurstFile(), p.node, p.ns.describe())
	return 0, nil // the events of the handlers below
}

// podDir: the pod's own group (its cgroup parent), where the kubelet sets the sum of its
// containers' limits as the pod's quota; "" when the runtime did not say where it is.
func (p *plugin) podDir(pod *api.PodSandbox) string {
	if pod == nil || pod.Linux == nil || pod.Linux.CgroupParent == "" {
		return ""
	}
	dir, err := p.host.GroupDir(pod.Linux.CgroupParent)
	if err != nil {
		return ""
	}
	return dir
}

// sizePod gives the pod's group its own burst. Without it a container's burst is spent in
// vain: the pod's group, at the same quota, throttles where the container's would not. Its
// policy is the pod's annotation or the node's default; its CPUs every online CPU; at most
// the pod's pending ceiling (a container's quota was lowered: UpdateContainer).
func (p *plugin) sizePod(pod *api.PodSandbox, why string) {
	dir := p.podDir(pod)
	if dir == "" {
		return
	}
	pol, _, err := Choose(p.node, p.ns, pod.Namespace, "", pod.Annotations, nil)
	if err != nil || pol.Mode == "off" {
		return // said at the container's hook
	}
	quota, period, err := p.host.ReadLimit(dir)
	if err != nil || quota <= 0 {
		return // no pod-level limit (a container without one, or a runtime without kubelet's pod groups)
	}
	online, err := p.host.OnlineCPUs()
	if err != nil {
		return
	}
	d := Decide(pol, Limit{QuotaUs: quota, PeriodUs: period, CPUs: max(len(online), 1)}, p.hz)
	burst := d.BurstUs
	if c, ok := p.ceilings[pod.Id]; ok {
		if quota != c.podQuota {
			delete(p.ceilings, pod.Id) // the pod's quota was written since: size for it
		} else {
			burst = min(burst, c.burstUs)
		}
	}
	if d.Clamp != p.clamps[pod.Id] {
		if d.Clamp != "" {
			p.log.WithField("pod", pod.Namespace+"/"+pod.Name).Warnf("pod burst clamped: %s", d.Clamp)
		}
		p.clamps[pod.Id] = d.Clamp
	}
	old, err := p.host.WriteBurst(dir, burst)
	if err != nil {
		n := p.errors.Add(1)
		p.log.WithFields(logrus.Fields{"pod": pod.Namespace + "/" + pod.Name, "errors": n}).Errorf("%s: %v (left as it was)", why, err)
	} else if old != burst {
		p.log.WithField("pod", pod.Namespace+"/"+pod.Name).Infof("%s: pod burst %d -> %d us (%s)", why, old, burst, dir)
	}
}

// lowerPodFor: a container's quota goes from old to new (same period). The kubelet lowers the
// pod's quota by as much after the containers': the pod's burst must already fit under it, or
// the kubelet's write is refused and the resize stalls.
func (p *plugin) lowerPodFor(pod *api.PodSandbox, c *api.Container, res *api.LinuxResources) {
	dir := p.podDir(pod)
	oldQ, oldP := quotaOf(resources(c))
	newQ, newP, _ := effective(c, res)
	if dir == "" || oldQ <= 0 || newQ <= 0 || newQ >= oldQ || oldP != newP {
		return
	}
	quota, _, err := p.host.ReadLimit(dir)
	if err != nil || quota <= 0 {
		return
	}
	// the kubelet lowers every container's quota, then the pod's by their sum: the cuts add up
	next := ceiling{burstUs: max(quota-(oldQ-newQ), 0), podQuota: quota}
	if prev, ok := p.ceilings[pod.Id]; ok && prev.podQuota == quota {
		next.burstUs = max(prev.burstUs-(oldQ-newQ), 0)
	}
	p.ceilings[pod.Id] = next
	// whatever the pod's policy: a burst above the pod's next quota would refuse the kubelet's write
	if cur, err := p.host.ReadBurst(dir); err == nil && cur > next.burstUs {
		if _, err := p.host.WriteBurst(dir, next.burstUs); err != nil {
			n := p.errors.Add(1)
			p.log.WithFields(logrus.Fields{"pod": pod.Namespace + "/" + pod.Name, "errors": n}).Errorf("update: %v", err)
		} else {
			p.log.WithField("pod", pod.Namespace+"/"+pod.Name).Infof("update (lowered before the pod's quota): "+
				"pod burst %d -> %d us (%s)", cur, next.burstUs, dir)
		}
	}
}

func quotaOf(res *api.LinuxResources) (quota, period int64) {
	quota, period = -1, 100000
	if res != nil && res.Cpu != nil {
		if q := res.Cpu.Quota.Get(); q != nil {
			quota = *q
		}
		if per := res.Cpu.Period.Get(); per != nil && *per > 0 {
			period = int64(*per)
		}
	}
	return quota, period
}

// PostUpdatePodSandbox: the kubelet has set the pod's new resources (its quota among them).
func (p *plugin) PostUpdatePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.ceilings, pod.Id)
	p.sizePod(pod, "pod update")
	return nil
}

// Synchronize: the containers already running get their burst (the plugin started after them,
// or restarted); nothing is asked of the runtime, the groups are written directly.
func (p *plugin) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	byID := map[string]*api.PodSandbox{}
	for _, pod := range pods {
		byID[pod.Id] = pod
	}
	for _, c := range ctrs {
		if c.State != api.ContainerState_CONTAINER_RUNNING {
			continue // a created container's group is made at its start (StartContainer)
		}
		// off: the plugin leaves the group as it is (what others set stays)
		if d, pol, ok := p.plan(byID[c.PodSandboxId], c, resources(c)); ok && pol.Mode != "off" {
			p.apply(c, d.BurstUs, "synchronize")
		}
	}
	for _, pod := range pods {
		p.sizePod(pod, "synchronize")
	}
	p.log.Infof("synchronized with %d containers", len(ctrs))
	return nil, nil
}

// StartContainer: the runtime has made the container's group (containerd's CRI creates the
// task at start, then calls the plugins, then starts it): its burst and its pod's are written.
func (p *plugin) StartContainer(_ context.Context, pod *api.PodSandbox, c *api.Container) error {
	p.size(pod, c, "create")
	return nil
}

// size writes the container's burst for its resources as they are now, then its pod's.
func (p *plugin) size(pod *api.PodSandbox, c *api.Container, why string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if d, pol, ok := p.plan(pod, c, resources(c)); ok && pol.Mode != "off" {
		p.apply(c, d.BurstUs, why)
	}
	p.sizePod(pod, why)
}

// UpdateContainer runs before the runtime applies new resources. The kernel refuses a quota
// below the group's burst, so a burst above what the new quota allows is lowered now, before
// the runtime writes the quota, whatever the policy (a burst set before, by the plugin or
// anyone, must not make the owner's resize fail). A cpu.max.burst in the container's spec
// (unified; runc re-applies it after cpu.max at every update) is lowered in the same update.
// PostUpdateContainer raises the burst where the new quota allows more.
func (p *plugin) UpdateContainer(_ context.Context, pod *api.PodSandbox, c *api.Container, res *api.LinuxResources) ([]*api.ContainerUpdate, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lowerPodFor(pod, c, res)
	newQ, _, _ := effective(c, res)
	allowed := newQ // the most the kernel will take with the new quota
	if d, pol, ok := p.plan(pod, c, res); ok && pol.Mode != "off" && newQ > 0 {
		allowed = min(allowed, d.BurstUs)
	}
	if newQ <= 0 || c.Linux == nil {
		return nil, nil
	}
	if dir, err := p.host.GroupDir(c.Linux.CgroupsPath); err != nil {
		p.fail(c, "update", err)
	} else if cur, err := p.host.ReadBurst(dir); err == nil && cur > allowed {
		p.apply(c, allowed, "update (lowered before the new quota)")
	}
	spec, ok := resources(c).GetUnified()["cpu.max.burst"]
	if v, err := strconv.ParseInt(spec, 10, 64); !ok || err != nil || v <= allowed {
		return nil, nil
	}
	u := &api.ContainerUpdate{}
	u.SetContainerId(c.Id)
	u.AddLinuxUnified("cpu.max.burst", strconv.FormatInt(allowed, 10))
	return []*api.ContainerUpdate{u}, nil
}

func (p *plugin) PostUpdateContainer(_ context.Context, pod *api.PodSandbox, c *api.Container) error {
	p.size(pod, c, "update")
	return nil
}

// RemovePodSandbox forgets the pod.
func (p *plugin) RemovePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.clamps, pod.Id)
	delete(p.ceilings, pod.Id)
	return nil
}

// RemoveContainer forgets what was said of the container.
func (p *plugin) RemoveContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.clamps, c.Id)
	return nil
}

func (n Namespaces) describe() string {
	s := "all"
	if len(n.Include) > 0 {
		s = strings.Join(n.Include, ",")
	}
	if len(n.Exclude) > 0 {
		s += " except " + strings.Join(n.Exclude, ",")
	}
	return s
}

func splitList(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

func main() {
	fs := flag.NewFlagSet("bwlab-nri", flag.ContinueOnError)
	socket := fs.String("socket", api.DefaultSocketPath, "the runtime's NRI socket")
	idx := fs.String("idx", "50", "the plugin's index (its order among NRI plugins)")
	def := fs.String("default", "auto", "the burst of a container without an annotation: auto, off or microseconds")
	include := fs.String("namespaces", "", "comma-separated namespaces opted in (empty: all)")
	exclude := fs.String("exclude-namespaces", "", "comma-separated namespaces opted out")
	root := fs.String("cgroup-root", "/sys/fs/cgroup", "the host's cgroup filesystem")
	sysRoot := fs.String("sys-root", "/sys", "the host's /sys (online CPUs)")
	hz := fs.Int("hz", 0, "the node kernel's CONFIG_HZ (0: read from /proc/config.gz or -boot's config-RELEASE)")
	boot := fs.String("boot", "/boot", "the host's /boot (its kernel config, for CONFIG_HZ)")
	verbose := fs.Bool("verbose", false, "log every decision")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	log := logrus.New()
	log.SetFormatter(&logrus.TextFormatter{DisableColors: true, FullTimestamp: true})
	if *verbose {
		log.SetLevel(logrus.DebugLevel)
	}
	node, err := ParsePolicy(*def)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bwlab-nri: -default %v\n", err)
		os.Exit(2)
	}
	if *hz < 0 || (*hz > 0 && 1000000%*hz != 0 && *hz != 300) {
		fmt.Fprintf(os.Stderr, "bwlab-nri: -hz %d: expected the kernel's CONFIG_HZ (100, 250, 300, 1000)\n", *hz)
		os.Exit(2)
	}
	if *hz == 0 {
		if *hz = NodeHZ("/proc", *boot); *hz == 0 {
			*hz = 250
			log.Warnf("CONFIG_HZ not published (/proc/config.gz, %s/config-*): assuming 250; set -hz", *boot)
		}
	}
	host, err := DetectHost(*root, *sysRoot)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bwlab-nri: %v\n", err)
		os.Exit(1)
	}
	p := &plugin{host: host, hz: *hz, node: node, ns: Namespaces{splitList(*include), splitList(*exclude)}, log: log,
		clamps: map[string]string{}, ceilings: map[string]ceiling{}}
	// reconnect: the runtime restarts (an upgrade, a crash); exiting instead would put the
	// DaemonSet in a crash loop's back-off, resizes unprotected meanwhile
	for wait := time.Second; ; wait = min(2*wait, 30*time.Second) {
		closed := make(chan struct{})
		p.stub, err = stub.New(p, stub.WithPluginName("bwlab-nri"), stub.WithPluginIdx(*idx),
			stub.WithSocketPath(*socket), stub.WithOnClose(func() { close(closed) }))
		if err != nil {
			fmt.Fprintf(os.Stderr, "bwlab-nri: %v\n", err)
			os.Exit(1)
		}
		if err := p.stub.Start(context.Background()); err != nil {
			log.Warnf("cannot connect to %s: %v (again in %s)", *socket, err, wait)
		} else {
			wait = time.Second
			<-closed
			p.stub.Stop()
			log.Warnf("the runtime closed the connection (again in %s)", wait)
		}
		time.Sleep(wait)
	}
}
