//! What a simulation runs: CPUs, tick rate, groups with their bandwidth, threads and their
//! behaviour, timed configuration writes, and what to record. Deserialized from JSON (bwlab
//! builds it from a scenario); `Config::check` rejects what the model cannot run.

use serde::Deserialize;

/// Default period of a new group (`default_bw_period_us()`, 100 ms): the period timer's
/// random initial offset is drawn below it (`init_cfs_bandwidth()`).
pub const DEFAULT_PERIOD_NS: i64 = 100_000_000;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub ncpu: usize,
    pub hz: u32,
    pub duration_ns: i64,
    #[serde(default)]
    pub seed: u64,
    /// `sysctl kernel.sched_cfs_bandwidth_slice_us`, in ns.
    #[serde(default = "default_slice")]
    pub slice_ns: i64,
    /// Time-sharing slice between threads queued on one CPU (switches happen at ticks).
    #[serde(default = "default_base_slice")]
    pub base_slice_ns: i64,
    #[serde(default)]
    pub tick: TickPhase,
    /// Interrupt latency: every tick and timer callback runs up to this late (uniform).
    /// 0 on real hardware to within microseconds; large under emulation (QEMU TCG).
    #[serde(default)]
    pub jitter_ns: i64,
    /// Measured interrupt latencies (ns): when given, every tick and timer callback runs late
    /// by one of these, drawn at random (instead of `jitter_ns`).
    #[serde(default)]
    pub latency_ns: Vec<i64>,
    /// The kernel series' sched_feat switches that are on ("BW_SLUSH", ...).
    #[serde(default)]
    pub features: Vec<String>,
    pub groups: Vec<GroupCfg>,
    pub threads: Vec<ThreadCfg>,
    #[serde(default)]
    pub requests: Option<RequestsCfg>,
    #[serde(default)]
    pub writes: Vec<WriteCfg>,
    #[serde(default)]
    pub record: Record,
}

fn default_slice() -> i64 {
    5_000_000
}

fn default_base_slice() -> i64 {
    3_000_000
}

/// Where each CPU's tick falls within the tick interval.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TickPhase {
    /// Every CPU ticks at the same instants (the kernel's default, `skew_tick=0`).
    #[default]
    Aligned,
    /// `skew_tick=1`: CPU c is offset by c × (tick / 2) / ncpu.
    Skew,
    /// Each CPU's phase drawn uniformly from the tick interval (seeded).
    Random,
    /// Explicit phase per CPU, in ns.
    Phases(Vec<i64>),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupCfg {
    pub name: String,
    #[serde(default)]
    pub parent: Option<usize>,
    pub period_ns: i64,
    /// None: no limit ("max", RUNTIME_INF).
    #[serde(default)]
    pub quota_ns: Option<i64>,
    #[serde(default)]
    pub burst_ns: i64,
    /// Initial expiry of the period timer. The kernel draws it below the default period at
    /// group creation, long before t=0 here; None draws it in [-100 ms, 0) from the seed.
    #[serde(default)]
    pub timer_expires_ns: Option<i64>,
    /// Each CPU's local pool right after the configuration write (the kernel sets 1 ns).
    #[serde(default = "one")]
    pub initial_local_ns: i64,
}

fn one() -> i64 {
    1
}

/// A duration distribution (ns).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dist {
    Fixed(f64),
    /// Exponential with this mean.
    Exp(f64),
    Uniform(f64, f64),
    /// Log-normal with this median and shape sigma.
    Lognormal(f64, f64),
    /// Drawn uniformly from measured values (e.g. `noise`'s burst sizes).
    Empirical(Vec<f64>),
}

impl Dist {
    pub fn check(&self, what: &str) -> Result<(), String> {
        let ok = match self {
            Dist::Fixed(v) | Dist::Exp(v) => v.is_finite() && *v >= 0.0,
            Dist::Uniform(a, b) => a.is_finite() && b.is_finite() && 0.0 <= *a && a <= b,
            Dist::Lognormal(m, s) => m.is_finite() && s.is_finite() && *m > 0.0 && *s >= 0.0,
            Dist::Empirical(v) => !v.is_empty() && v.iter().all(|x| x.is_finite() && *x >= 0.0),
        };
        match (ok, self) {
            (true, _) => Ok(()),
            (false, Dist::Empirical(_)) => Err(format!("{what}: empirical values must be finite, >= 0, at least one")),
            (false, _) => Err(format!("{what}: invalid distribution {self:?}")),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum Behavior {
    /// Always runnable (sysbench cpu, a burner).
    Cpu,
    /// Runs for `on`, sleeps for `off`, repeatedly.
    Onoff { on: Dist, off: Dist },
    /// Sleeps `sleep_ns`, then runs `run_ns`; records how long each sleep really took
    /// (Uber's cgroup-lat).
    Sleeper {
        sleep_ns: i64,
        #[serde(default = "sleeper_run")]
        run_ns: i64,
    },
    /// Serves requests from the shared queue (see `RequestsCfg`).
    Worker,
    /// Replays (run_ns, sleep_ns) intervals, recorded elsewhere. `paced`: each interval is
    /// due when the recorded ones before it add up to (a run delayed by throttling shortens
    /// the sleep after it, and work past its time runs at once: work that arrives on its
    /// own clock, as requests do); otherwise each sleep is slept in full after its run, and
    /// a delay moves everything after it.
    Trace {
        intervals: Vec<(i64, i64)>,
        #[serde(default)]
        repeat: bool,
        #[serde(default)]
        paced: bool,
    },
}

fn sleeper_run() -> i64 {
    2_000
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ThreadCfg {
    pub group: usize,
    /// The CPU the thread runs on; None: round-robin over the CPUs.
    #[serde(default)]
    pub cpu: Option<usize>,
    #[serde(default)]
    pub start_ns: i64,
    pub behavior: Behavior,
}

/// Requests arriving at `rate_per_s` (Poisson) into one queue, served by the Worker threads.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestsCfg {
    pub rate_per_s: f64,
    pub service: Dist,
}

/// A write of cpu.max (and cpu.max.burst) at `at_ns`, repeated every `every_ns` if given.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteCfg {
    pub group: usize,
    pub at_ns: i64,
    #[serde(default)]
    pub every_ns: Option<i64>,
    pub period_ns: i64,
    #[serde(default)]
    pub quota_ns: Option<i64>,
    #[serde(default)]
    pub burst_ns: i64,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    /// One row per period of group 0 with per-CPU pool levels, usage and throttled time.
    #[serde(default)]
    pub periods: bool,
    /// Every accounting event (ticks, acquisitions, refills, throttles) in this window.
    #[serde(default)]
    pub events_from_ns: Option<i64>,
    #[serde(default)]
    pub events_to_ns: Option<i64>,
    /// Keep latency samples (sleepers, request wakeups and completions).
    #[serde(default = "yes")]
    pub samples: bool,
}

fn yes() -> bool {
    true
}

pub const FEATURES: [&str; 6] =
    ["BW_UNTHROTTLE_RETRY", "BW_NOOP_UPDATE", "BW_CLIP_SLICE", "BW_DEFAULT_BURST", "BW_EARLY_REFILL", "BW_SLUSH"];

impl Config {
    pub fn from_json(text: &str) -> Result<Config, String> {
        let cfg: Config = serde_json::from_str(text).map_err(|e| format!("simulation config: {e}"))?;
        cfg.check()?;
        Ok(cfg)
    }

    pub fn tick_ns(&self) -> i64 {
        1_000_000_000 / i64::from(self.hz)
    }

    pub fn check(&self) -> Result<(), String> {
        if self.ncpu == 0 || self.ncpu > 4096 {
            return Err(format!("ncpu must be in 1..4096, got {}", self.ncpu));
        }
        if ![100, 250, 300, 1000].contains(&self.hz) {
            return Err(format!("hz must be one of 100, 250, 300, 1000 (CONFIG_HZ), got {}", self.hz));
        }
        if self.duration_ns <= 0 {
            return Err(format!("duration_ns must be positive, got {}", self.duration_ns));
        }
        if self.slice_ns < 1_000 {
            return Err(format!("slice_ns must be at least 1000 (1 us), got {}", self.slice_ns));
        }
        if self.jitter_ns < 0 || self.jitter_ns >= self.tick_ns() {
            return Err(format!("jitter_ns must be in 0..{} (one tick), got {}", self.tick_ns(), self.jitter_ns));
        }
        if self.latency_ns.iter().any(|&l| !(0..1_000_000_000).contains(&l)) {
            return Err("latency_ns: every sample must be in 0..1 s".into());
        }
        if self.base_slice_ns <= 0 {
            return Err(format!("base_slice_ns must be positive, got {}", self.base_slice_ns));
        }
        if let TickPhase::Phases(p) = &self.tick {
            if p.len() != self.ncpu || p.iter().any(|&x| x < 0 || x >= self.tick_ns()) {
                return Err(format!("tick phases: need {} values in [0, {})", self.ncpu, self.tick_ns()));
            }
        }
        for f in &self.features {
            if !FEATURES.contains(&f.as_str()) {
                return Err(format!("unknown feature {f:?} (known: {})", FEATURES.join(", ")));
            }
        }
        if self.groups.is_empty() {
            return Err("at least one group is needed".into());
        }
        for (i, g) in self.groups.iter().enumerate() {
            if let Some(p) = g.parent {
                if p >= i {
                    return Err(format!("group {}: parent {p} must be an earlier group", g.name));
                }
            }
            check_bandwidth(&format!("group {}", g.name), g.period_ns, g.quota_ns, g.burst_ns)?;
        }
        for (i, t) in self.threads.iter().enumerate() {
            if t.group >= self.groups.len() {
                return Err(format!("thread {i}: no group {}", t.group));
            }
            if t.cpu.is_some_and(|c| c >= self.ncpu) {
                return Err(format!("thread {i}: cpu {} is not below ncpu {}", t.cpu.unwrap_or(0), self.ncpu));
            }
            if t.start_ns < 0 {
                return Err(format!("thread {i}: start_ns must not be negative"));
            }
            match &t.behavior {
                Behavior::Onoff { on, off } => {
                    on.check(&format!("thread {i} on"))?;
                    off.check(&format!("thread {i} off"))?;
                }
                Behavior::Sleeper { sleep_ns, run_ns } => {
                    if *sleep_ns <= 0 || *run_ns <= 0 {
                        return Err(format!("thread {i}: sleeper needs positive sleep_ns and run_ns"));
                    }
                }
                Behavior::Trace { intervals, .. } => {
                    if intervals.is_empty() {
                        return Err(format!("thread {i}: trace has no intervals"));
                    }
                    if intervals.iter().any(|&(r, s)| r < 0 || s < 0 || r + s == 0) {
                        return Err(format!("thread {i}: trace intervals need run, sleep >= 0, not both 0"));
                    }
                }
                Behavior::Worker => {
                    if self.requests.is_none() {
                        return Err(format!("thread {i}: a worker needs a requests section"));
                    }
                }
                Behavior::Cpu => {}
            }
        }
        if let Some(r) = &self.requests {
            if !(r.rate_per_s.is_finite() && r.rate_per_s > 0.0) {
                return Err(format!("requests: rate_per_s must be positive, got {}", r.rate_per_s));
            }
            r.service.check("requests service")?;
            if !self.threads.iter().any(|t| matches!(t.behavior, Behavior::Worker)) {
                return Err("requests: no worker threads".into());
            }
        }
        for (i, w) in self.writes.iter().enumerate() {
            if w.group >= self.groups.len() {
                return Err(format!("write {i}: no group {}", w.group));
            }
            if w.every_ns.is_some_and(|e| e <= 0) {
                return Err(format!("write {i}: every_ns must be positive"));
            }
            check_bandwidth(&format!("write {i}"), w.period_ns, w.quota_ns, w.burst_ns)?;
        }
        Ok(())
    }
}

/// The limits `tg_set_cfs_bandwidth()` / `__cfs_schedulable()` enforce.
fn check_bandwidth(what: &str, period: i64, quota: Option<i64>, burst: i64) -> Result<(), String> {
    if !(1_000_000..=1_000_000_000).contains(&period) {
        return Err(format!("{what}: period must be in 1 ms..1 s, got {period} ns"));
    }
    if let Some(q) = quota {
        if q < 1_000_000 {
            return Err(format!("{what}: quota must be at least 1 ms, got {q} ns"));
        }
    }
    // cpu.max.burst: 0..=quota, and only with a quota
    if burst < 0 || (burst > 0 && quota.is_none_or(|q| burst > q)) {
        return Err(format!("{what}: burst must be in 0..=quota (and needs a quota), got {burst} ns"));
    }
    Ok(())
}
