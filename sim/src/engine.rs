//! The model: Linux 7.3 CFS bandwidth control, event by event.
//!
//! State mirrors the kernel's: `Bw` is `struct cfs_bandwidth` (the global pool of a task
//! group), `Rq` is the bandwidth part of `struct cfs_rq` (a group's local pool on one CPU).
//! Functions are named after the `kernel/sched/fair.c` / `core.c` functions they mirror and
//! keep their order of operations, including the kernel series' sched_feat switches
//! (kernel/patches/0002-0006). What the model leaves out is stated where it matters:
//! remote unthrottles (an IPI in the kernel) and timer callbacks take effect at once; there
//! is no load balancing (each thread stays on its CPU); a woken thread preempts the one
//! running on its CPU; queued threads share a CPU round-robin, switching at ticks once the
//! running one has had `base_slice_ns`.
//!
//! Time is in ns. Ticks of all CPUs are generated in phase order without a heap; all other
//! events (period and slack timers, thread wakeups and completions, request arrivals,
//! configuration writes) go through one binary heap. At equal times heap events run first:
//! in the kernel's hrtimer queue the earlier-armed timer fires first, and the tick is re-armed
//! every tick, after any period timer due at the same instant was armed.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::rc::Rc;

use serde::Serialize;

use crate::config::{Behavior, Config, Dist, TickPhase, DEFAULT_PERIOD_NS};
use crate::rng::Rng;

/// fair.c: a cfs_rq won't donate quota below this amount.
const MIN_CFS_RQ_RUNTIME: i64 = 1_000_000;
/// fair.c: minimum remaining period time to redistribute slack quota.
const MIN_BANDWIDTH_EXPIRATION: i64 = 2_000_000;
/// fair.c: how long we wait to gather additional slack before distributing.
const CFS_BANDWIDTH_SLACK_PERIOD: i64 = 5_000_000;
/// With measured latencies: the run time of the timer interrupt handler between its update_curr() and
/// the local unthrottle, charged to the interrupted task (there is no IRQ time accounting).
/// Its size hardly matters: it only has to exceed the 1 ns an unthrottle grants beyond the debt.
const HANDLER_NS: i64 = 1_000;

#[derive(Debug, Clone, Copy, Default)]
struct Feat {
    unthrottle_retry: bool,
    slush: bool,
    default_burst: bool,
    clip_slice: bool,
    early_refill: bool,
    noop_update: bool,
}

/// `struct cfs_bandwidth`.
#[derive(Debug, Clone)]
struct Bw {
    period: i64,
    quota: Option<i64>, // None: RUNTIME_INF
    burst: i64,
    runtime: i64,
    runtime_snap: i64,
    slush: i64,
    period_seq: u64,
    refilled_early: bool,
    idle: bool,
    period_active: bool,
    expires: i64, // the period timer's expiry (kept while inactive, as the hrtimer does)
    timer_gen: u64,
    timer_cpu: usize, // the period timer is pinned to the CPU that started it
    slack_started: bool,
    throttled_list: VecDeque<usize>, // CPUs whose cfs_rq is on throttled_cfs_rq, in order
    nr_periods: u64,
    nr_throttled: u64,
    throttled_time: i64,
    unthrottle_aborts: u64, // unthrottles that found the grant used up and gave up
    nr_burst: u64,
    burst_time: i64,
    usage: i64,
}

/// The bandwidth fields of `struct cfs_rq` (one group on one CPU).
#[derive(Debug, Clone, Default)]
struct Rq {
    runtime_enabled: bool,
    runtime_remaining: i64,
    runtime_seq: u64,
    throttled: bool,
    throttled_clock: Option<i64>, // set when the throttled cfs_rq has emptied
    throttled_since: Option<i64>, // for the timeline: when the current throttle began
    nr_queued: u32,               // threads of this group's subtree queued or running here
    unthrottle_pending: bool,     // queued for an asynchronous unthrottle
    // timeline accumulators since the last period row
    row_usage: i64,
    row_throttled: i64,
    row_acquired: i64,
    row_carry: i64, // run time not yet charged when the last row was written
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    NotStarted,
    Running,
    Runnable,
    Sleeping,
    Parked, // dequeued by throttling, waits for its hierarchy to be unthrottled
    Finished,
}

#[derive(Debug, Clone)]
struct Thread {
    group: usize,
    cpu: usize,
    // shared, not copied per burst: traces and measured distributions can be large
    behavior: Rc<Behavior>,
    state: State,
    work_left: i64, // of the current CPU burst; i64::MAX: never ends
    run_since: i64,
    gen: u64,
    cpu_ns: i64,
    woke_at: Option<i64>,
    sleep_start: i64,
    trace_idx: usize,
    trace_due: i64, // paced trace: when the current interval was due
    request_arrival: i64,
    throttle_pending: bool, // throttled, still running until it returns to user space
}

#[derive(Debug, Clone, Default)]
struct Cpu {
    curr: Option<usize>,
    exec_start: i64,
    slice_start: i64,
    runq: VecDeque<usize>,
    parked: Vec<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Write(usize),
    PeriodTimer(usize, u64),
    SlackTimer(usize),
    Wake(usize),
    Done(usize, u64),
    Arrival,
    Tick(usize, i64), // with jitter: CPU, nominal time
    ReturnToUser(usize),
    Unthrottle(usize, usize),
}

/// Group totals, as `cpu.stat` reports them.
#[derive(Debug, Clone, Serialize)]
pub struct GroupStat {
    pub name: String,
    pub nr_periods: u64,
    pub nr_throttled: u64,
    pub throttled_ns: i64,
    /// unthrottle_cfs_rq() calls that found runtime_remaining <= 0 and left the cfs_rq
    /// throttled (not in cpu.stat: the model's view of what BW_UNTHROTTLE_RETRY fixes)
    pub unthrottle_aborts: u64,
    pub nr_bursts: u64,
    pub burst_ns: i64,
    pub usage_ns: i64,
}

/// One period of group 0: its pool when the period timer fired (before the refill), whether
/// any local pool was throttled, and per CPU [usage, local pool, throttled, acquired] in ns.
#[derive(Debug, Clone, Serialize)]
pub struct PeriodRow {
    pub t_ns: i64,
    pub pool_ns: i64,
    pub slush_ns: i64,
    pub throttled: bool,
    pub cpus: Vec<[i64; 4]>,
}

/// One accounting event, for `explain`. cpu = -1: the group's global pool.
#[derive(Debug, Clone, Serialize)]
pub struct Event {
    pub t_ns: i64,
    pub group: usize,
    pub cpu: i32,
    pub kind: &'static str,
    pub amount_ns: i64,
    pub local_ns: i64,
    pub pool_ns: i64,
}

#[derive(Debug, Clone, Serialize, Default)]
pub struct Samples {
    /// Sleepers: how long each sleep really took.
    pub sleep_ns: Vec<i64>,
    /// Workers: from wakeup to running.
    pub wakeup_ns: Vec<i64>,
    /// Requests: from arrival to completion.
    pub request_ns: Vec<i64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Output {
    pub groups: Vec<GroupStat>,
    pub thread_cpu_ns: Vec<i64>,
    pub samples: Samples,
    pub requests_done: u64,
    pub requests_queued: u64,
    pub ticks: u64,
    pub duration_ns: i64,
    pub periods: Vec<PeriodRow>,
    pub events: Vec<Event>,
}

pub struct Sim {
    cfg: Config,
    feat: Feat,
    ncpu: usize,
    tick_ns: i64,
    end: i64,
    now: i64,
    // ticks, in phase order: tick k of tick_cpu[i] is at k * tick_ns + tick_phase[i]
    tick_phase: Vec<i64>,
    tick_cpu: Vec<usize>,
    tick_round: i64,
    tick_idx: usize,
    tick_next: Vec<i64>, // with latencies: each CPU's next tick (nominal time)
    ticks: u64,
    heap: BinaryHeap<Reverse<(i64, u64, Ev)>>,
    seq: u64,
    bws: Vec<Bw>,
    rqs: Vec<Rq>,            // [group * ncpu + cpu]
    chains: Vec<Vec<usize>>, // per group: itself and its ancestors, bottom-up
    cpus: Vec<Cpu>,
    threads: Vec<Thread>,
    rng: Rng,
    queue: VecDeque<(i64, i64)>, // requests waiting: (arrival, service)
    idle_workers: Vec<usize>,
    requests_done: u64,
    samples: Samples,
    periods: Vec<PeriodRow>,
    events: Vec<Event>,
    ev_from: i64,
    ev_to: i64,
}

impl Sim {
    pub fn new(cfg: Config) -> Result<Sim, String> {
        cfg.check()?;
        let ncpu = cfg.ncpu;
        let tick_ns = cfg.tick_ns();
        let mut rng = Rng::new(cfg.seed);
        let phases: Vec<i64> = match &cfg.tick {
            TickPhase::Aligned => vec![0; ncpu],
            TickPhase::Skew => (0..ncpu as i64).map(|c| (tick_ns / 2) / ncpu as i64 * c).collect(),
            TickPhase::Random => (0..ncpu).map(|_| rng.below(tick_ns)).collect(),
            TickPhase::Phases(p) => p.clone(),
        };
        let mut order: Vec<usize> = (0..ncpu).collect();
        order.sort_by_key(|&c| (phases[c], c));
        let feat = Feat {
            unthrottle_retry: cfg.features.iter().any(|f| f == "BW_UNTHROTTLE_RETRY"),
            slush: cfg.features.iter().any(|f| f == "BW_SLUSH"),
            default_burst: cfg.features.iter().any(|f| f == "BW_DEFAULT_BURST"),
            clip_slice: cfg.features.iter().any(|f| f == "BW_CLIP_SLICE"),
            early_refill: cfg.features.iter().any(|f| f == "BW_EARLY_REFILL"),
            noop_update: cfg.features.iter().any(|f| f == "BW_NOOP_UPDATE"),
        };
        let chains = (0..cfg.groups.len())
            .map(|g| {
                let mut chain = vec![g];
                let mut p = cfg.groups[g].parent;
                while let Some(x) = p {
                    chain.push(x);
                    p = cfg.groups[x].parent;
                }
                chain
            })
            .collect();
        // init_cfs_bandwidth(): quota RUNTIME_INF, default period, random timer offset
        let bws = cfg
            .groups
            .iter()
            .map(|g| Bw {
                period: DEFAULT_PERIOD_NS,
                quota: None,
                burst: 0,
                runtime: 0,
                runtime_snap: 0,
                slush: 0,
                period_seq: 0,
                refilled_early: false,
                idle: false,
                period_active: false,
                expires: g.timer_expires_ns.unwrap_or_else(|| rng.below(DEFAULT_PERIOD_NS) - DEFAULT_PERIOD_NS),
                timer_gen: 0,
                timer_cpu: 0,
                slack_started: false,
                throttled_list: VecDeque::new(),
                nr_periods: 0,
                nr_throttled: 0,
                throttled_time: 0,
                unthrottle_aborts: 0,
                nr_burst: 0,
                burst_time: 0,
                usage: 0,
            })
            .collect();
        let threads = cfg
            .threads
            .iter()
            .enumerate()
            .map(|(i, t)| Thread {
                group: t.group,
                cpu: t.cpu.unwrap_or(i % ncpu),
                behavior: Rc::new(t.behavior.clone()),
                state: State::NotStarted,
                work_left: 0,
                run_since: 0,
                gen: 0,
                cpu_ns: 0,
                woke_at: None,
                sleep_start: 0,
                trace_idx: 0,
                trace_due: 0,
                request_arrival: 0,
                throttle_pending: false,
            })
            .collect();
        let (ev_from, ev_to) = match (cfg.record.events_from_ns, cfg.record.events_to_ns) {
            (Some(a), Some(b)) => (a, b),
            (Some(a), None) => (a, i64::MAX),
            (None, Some(b)) => (0, b),
            (None, None) => (i64::MAX, i64::MIN),
        };
        Ok(Sim {
            feat,
            ncpu,
            tick_ns,
            end: cfg.duration_ns,
            now: 0,
            tick_phase: order.iter().map(|&c| phases[c]).collect(),
            tick_cpu: order,
            tick_round: 0,
            tick_idx: 0,
            tick_next: phases.clone(),
            ticks: 0,
            heap: BinaryHeap::new(),
            seq: 0,
            bws,
            rqs: vec![Rq::default(); cfg.groups.len() * ncpu],
            chains,
            cpus: vec![Cpu::default(); ncpu],
            threads,
            rng,
            queue: VecDeque::new(),
            idle_workers: Vec::new(),
            requests_done: 0,
            samples: Samples::default(),
            periods: Vec::new(),
            events: Vec::new(),
            ev_from,
            ev_to,
            cfg,
        })
    }

    fn delays(&self) -> bool {
        self.cfg.jitter_ns > 0 || !self.cfg.latency_ns.is_empty()
    }

    /// A timer callback's run time: its expiry plus the interrupt latency.
    fn late(&mut self, t: i64) -> i64 {
        let n = self.cfg.latency_ns.len();
        if n > 0 {
            let i = self.rng.below(n as i64) as usize;
            t + self.cfg.latency_ns[i]
        } else if self.cfg.jitter_ns > 0 {
            t + self.rng.below(self.cfg.jitter_ns)
        } else {
            t
        }
    }

    fn push(&mut self, t: i64, ev: Ev) {
        self.seq += 1;
        self.heap.push(Reverse((t, self.seq, ev)));
    }

    #[inline]
    fn rq(&mut self, g: usize, c: usize) -> &mut Rq {
        &mut self.rqs[g * self.ncpu + c]
    }

    fn log(&mut self, g: usize, cpu: i32, kind: &'static str, amount: i64) {
        if self.now < self.ev_from || self.now > self.ev_to {
            return;
        }
        let local = if cpu >= 0 { self.rqs[g * self.ncpu + cpu as usize].runtime_remaining } else { 0 };
        self.events.push(Event {
            t_ns: self.now,
            group: g,
            cpu,
            kind,
            amount_ns: amount,
            local_ns: local,
            pool_ns: self.bws[g].runtime,
        });
    }

    // ---- global pool -----------------------------------------------------------------

    /// `__refill_cfs_bandwidth_runtime()`, with BW_SLUSH (the lab's slush fund) and
    /// BW_DEFAULT_BURST (0004: while no burst is set, `cfs_b_burst()` is a tick per CPU the
    /// quota buys, DIV_ROUND_UP(quota, period), at most the quota).
    fn refill(&mut self, g: usize) {
        let slush = self.feat.slush;
        let default_burst = self.feat.default_burst;
        let tick_ns = self.tick_ns;
        let b = &mut self.bws[g];
        let Some(quota) = b.quota else { return };
        let burst = if b.burst == 0 && default_burst {
            quota.min((quota + b.period - 1) / b.period * tick_ns)
        } else {
            b.burst
        };
        let cap = quota + burst;
        b.runtime += quota;
        let over = b.runtime_snap - b.runtime;
        if over > 0 {
            b.burst_time += over;
            b.nr_burst += 1;
        }
        b.slush = 0;
        if slush && b.runtime > cap {
            b.slush = b.runtime - cap;
        }
        b.period_seq += 1;
        b.runtime = b.runtime.min(cap);
        b.runtime_snap = b.runtime;
        self.log(g, -1, "refill", quota);
    }

    /// `hrtimer_forward_now()` on the period timer: the new expiry and the overrun count.
    fn forward_now(expires: i64, now: i64, interval: i64) -> (i64, u64) {
        let delta = now - expires;
        if delta < 0 {
            return (expires, 0);
        }
        let mut expires = expires;
        let mut orun = 1u64;
        if delta >= interval {
            orun = (delta / interval) as u64;
            expires += interval * orun as i64;
            if expires > now {
                return (expires, orun);
            }
            orun += 1;
        }
        (expires + interval, orun)
    }

    /// `start_cfs_bandwidth()` on CPU `cpu` (the timer is pinned there).
    fn start_cfs_bandwidth(&mut self, g: usize, cpu: usize) {
        let now = self.now;
        let b = &mut self.bws[g];
        if b.period_active {
            return;
        }
        b.period_active = true;
        b.timer_cpu = cpu;
        b.expires = Self::forward_now(b.expires, now, b.period).0;
        b.timer_gen += 1;
        let (t, gen) = (b.expires, b.timer_gen);
        let t = self.late(t);
        self.push(t, Ev::PeriodTimer(g, gen));
    }

    /// `clip_to_period_end()` (BW_CLIP_SLICE): no clipping once the period end has passed
    /// (the refill is due), else the time left, at least `min_cfs_rq_runtime`.
    fn clip_to_period_end(&self, g: usize, target: i64) -> i64 {
        if !self.feat.clip_slice || target <= MIN_CFS_RQ_RUNTIME {
            return target;
        }
        let left = self.bws[g].expires - self.now;
        if left <= 0 {
            return target;
        }
        left.clamp(MIN_CFS_RQ_RUNTIME, target)
    }

    /// `refill_overdue_cfs_bandwidth()` (0005, BW_EARLY_REFILL).
    fn refill_overdue(&mut self, g: usize) {
        if !self.feat.early_refill || self.bws[g].refilled_early {
            return;
        }
        if self.bws[g].expires - self.now > 0 {
            return;
        }
        self.refill(g);
        self.bws[g].refilled_early = true;
    }

    /// `__pay_cfs_rq_debt()` (0003, BW_SLUSH): once per period, from last period's leftover.
    fn pay_debt(&mut self, g: usize, c: usize) {
        let seq = self.bws[g].period_seq;
        let slush = self.bws[g].slush;
        let rq = self.rq(g, c);
        if rq.runtime_seq == seq {
            return;
        }
        rq.runtime_seq = seq;
        if rq.runtime_remaining >= 0 || slush == 0 {
            return;
        }
        let amount = slush.min(-rq.runtime_remaining);
        rq.runtime_remaining += amount;
        self.bws[g].slush -= amount;
        self.log(g, c as i32, "slush", amount);
    }

    /// `__take_cfs_b_runtime()` (0007; the locked code before it): up to `want` from the pool,
    /// never below zero, granted to the cfs_rq. Returns whether the local pool is positive.
    fn take_runtime(&mut self, g: usize, c: usize, want: i64) -> bool {
        let b = &mut self.bws[g];
        let mut amount = 0;
        if b.runtime > 0 {
            amount = b.runtime.min(want);
            b.runtime -= amount;
            b.idle = false;
        }
        self.grant(g, c, amount)
    }

    fn grant(&mut self, g: usize, c: usize, amount: i64) -> bool {
        let rq = self.rq(g, c);
        rq.runtime_remaining += amount;
        rq.row_acquired += amount;
        let ok = rq.runtime_remaining > 0;
        self.log(g, c as i32, "acquire", amount);
        ok
    }

    /// `__assign_cfs_rq_runtime()`: take up to a slice from the global pool.
    fn assign(&mut self, g: usize, c: usize, target: i64) -> bool {
        self.pay_debt(g, c);
        if self.bws[g].quota.is_none() {
            let amount = target - self.rqs[g * self.ncpu + c].runtime_remaining;
            return self.grant(g, c, amount);
        }
        self.start_cfs_bandwidth(g, c);
        self.refill_overdue(g);
        let target = self.clip_to_period_end(g, target);
        let want = target - self.rqs[g * self.ncpu + c].runtime_remaining;
        self.take_runtime(g, c, want)
    }

    /// `assign_cfs_rq_runtime_lockless()` (0007): once a cfs_rq has been seen in this period,
    /// take from the pool without the lock -- and so without the overdue refill, which only
    /// the locked path does when this falls short. Without BW_EARLY_REFILL it is the same as
    /// `__assign_cfs_rq_runtime()`, so the model takes this path only with that switch.
    fn assign_lockless(&mut self, g: usize, c: usize, target: i64) -> bool {
        let b = &self.bws[g];
        if !self.feat.early_refill
            || b.quota.is_none()
            || !b.period_active
            || b.runtime <= 0
            || self.rqs[g * self.ncpu + c].runtime_seq != b.period_seq
        {
            return false;
        }
        let target = self.clip_to_period_end(g, target);
        let want = target - self.rqs[g * self.ncpu + c].runtime_remaining;
        self.take_runtime(g, c, want)
    }

    // ---- local pools -----------------------------------------------------------------

    /// Is the thread running on c in group g's subtree (`cfs_rq->h_curr`)?
    fn h_curr(&self, g: usize, c: usize) -> bool {
        self.cpus[c].curr.is_some_and(|t| self.chains[self.threads[t].group].contains(&g))
    }

    /// `throttle_cfs_rq()`: try for runtime once more, else put the cfs_rq on the list.
    fn throttle_cfs_rq(&mut self, g: usize, c: usize, curr_on_rq: bool) -> bool {
        let target = if curr_on_rq { self.cfg.slice_ns } else { 1 };
        if self.assign_lockless(g, c, target) || self.assign(g, c, target) {
            return false;
        }
        self.bws[g].throttled_list.push_back(c);
        let now = self.now;
        let rq = self.rq(g, c);
        rq.throttled = true;
        rq.throttled_since = Some(now);
        self.log(g, c as i32, "throttle", 0);
        true
    }

    /// `__account_cfs_rq_runtime()`.
    #[inline]
    fn account(&mut self, g: usize, c: usize, delta: i64, curr_on_rq: bool) -> bool {
        let rq = self.rq(g, c);
        rq.runtime_remaining -= delta;
        if rq.runtime_remaining > 0 {
            return false;
        }
        if rq.throttled {
            return true;
        }
        self.throttle_cfs_rq(g, c, curr_on_rq)
    }

    /// `update_curr()` for every level of the running thread's hierarchy; true when any
    /// level is (now) throttled.
    fn update_curr(&mut self, c: usize) -> bool {
        let Some(t) = self.cpus[c].curr else {
            return false;
        };
        let delta = self.now - self.cpus[c].exec_start;
        if delta <= 0 {
            return false;
        }
        self.cpus[c].exec_start = self.now;
        self.threads[t].cpu_ns += delta;
        let tg = self.threads[t].group;
        let mut throttled = false;
        for i in 0..self.chains[tg].len() {
            let g = self.chains[tg][i];
            self.bws[g].usage += delta;
            let rq = &mut self.rqs[g * self.ncpu + c];
            rq.row_usage += delta;
            if rq.runtime_enabled && self.account(g, c, delta, true) {
                throttled = true;
            }
        }
        throttled
    }

    fn chain_throttled(&self, t: usize) -> bool {
        let c = self.threads[t].cpu;
        self.chains[self.threads[t].group].iter().any(|&g| self.rqs[g * self.ncpu + c].throttled)
    }

    /// `__return_cfs_rq_runtime()`: a cfs_rq going idle gives back all but 1 ms.
    fn return_cfs_rq_runtime(&mut self, g: usize, c: usize) {
        let rq = &self.rqs[g * self.ncpu + c];
        if !rq.runtime_enabled || rq.nr_queued > 0 {
            return;
        }
        let slack = rq.runtime_remaining - MIN_CFS_RQ_RUNTIME;
        if slack <= 0 {
            return;
        }
        let slice = self.cfg.slice_ns;
        if self.bws[g].quota.is_some() {
            self.bws[g].runtime += slack;
            if self.bws[g].runtime > slice && !self.bws[g].throttled_list.is_empty() {
                self.start_cfs_slack_bandwidth(g);
            }
        }
        self.rq(g, c).runtime_remaining -= slack;
        self.log(g, c as i32, "return", slack);
    }

    /// `runtime_refresh_within()`.
    fn runtime_refresh_within(&self, g: usize, min_expire: i64) -> bool {
        self.bws[g].expires - self.now < min_expire
    }

    /// `start_cfs_slack_bandwidth()`.
    fn start_cfs_slack_bandwidth(&mut self, g: usize) {
        if self.runtime_refresh_within(g, CFS_BANDWIDTH_SLACK_PERIOD + MIN_BANDWIDTH_EXPIRATION) {
            return;
        }
        if self.bws[g].slack_started {
            return;
        }
        self.bws[g].slack_started = true;
        let t = self.late(self.now + CFS_BANDWIDTH_SLACK_PERIOD);
        self.push(t, Ev::SlackTimer(g));
    }

    /// `do_sched_cfs_slack_timer()`.
    fn slack_timer(&mut self, g: usize) {
        self.bws[g].slack_started = false;
        if self.runtime_refresh_within(g, MIN_BANDWIDTH_EXPIRATION) {
            return;
        }
        if self.bws[g].quota.is_some() && self.bws[g].runtime > self.cfg.slice_ns {
            self.log(g, -1, "slack", self.bws[g].runtime);
            self.distribute_cfs_runtime(g);
        }
    }

    /// `distribute_cfs_runtime()`, with BW_SLUSH paying carried-over debt first.
    fn distribute_cfs_runtime(&mut self, g: usize) -> bool {
        let mut throttled = false;
        let mut remaining = 1;
        let list: Vec<usize> = self.bws[g].throttled_list.iter().copied().collect();
        for c in list {
            if remaining == 0 {
                throttled = true;
                break;
            }
            let rq = &self.rqs[g * self.ncpu + c];
            if !rq.throttled || rq.unthrottle_pending {
                continue;
            }
            if self.h_curr(g, c) {
                self.update_curr(c);
            }
            self.pay_debt(g, c);
            let mut runtime = -self.rqs[g * self.ncpu + c].runtime_remaining + 1;
            let b = &mut self.bws[g];
            runtime = runtime.min(b.runtime);
            b.runtime -= runtime;
            remaining = b.runtime;
            let rq = self.rq(g, c);
            rq.runtime_remaining += runtime;
            rq.row_acquired += runtime;
            self.log(g, c as i32, "distribute", runtime);
            if self.rqs[g * self.ncpu + c].runtime_remaining <= 0 {
                throttled = true;
                break;
            }
            if self.delays() {
                // unthrottle_cfs_rq_async(): an IPI to another CPU; on this CPU at the end
                // of the handler (__cfsb_csd_unthrottle())
                self.rq(g, c).unthrottle_pending = true;
                let t = if c == self.bws[g].timer_cpu { self.now + HANDLER_NS } else { self.late(self.now) };
                self.push(t, Ev::Unthrottle(g, c));
            } else {
                self.unthrottle_cfs_rq(g, c);
            }
        }
        throttled
    }

    /// `unthrottle_cfs_rq()` (remote ones at once, not after an IPI).
    fn unthrottle_cfs_rq(&mut self, g: usize, c: usize) {
        let now = self.now;
        // catch up on what a still running (throttled) task used since the last update
        if self.h_curr(g, c) {
            self.update_curr(c);
        }
        let rq = &self.rqs[g * self.ncpu + c];
        // BW_UNTHROTTLE_RETRY: ask the pool for the debt and a slice before giving up
        if rq.runtime_enabled
            && rq.runtime_remaining <= 0
            && !(self.feat.unthrottle_retry && self.assign(g, c, self.cfg.slice_ns))
        {
            self.bws[g].unthrottle_aborts += 1;
            self.log(g, c as i32, "abort", 0);
            return;
        }
        let rq = self.rq(g, c);
        rq.throttled = false;
        let clock = rq.throttled_clock.take();
        if let Some(since) = rq.throttled_since.take() {
            rq.row_throttled += now - since;
        }
        let b = &mut self.bws[g];
        if let Some(pos) = b.throttled_list.iter().position(|&x| x == c) {
            b.throttled_list.remove(pos);
        }
        if let Some(clock) = clock {
            b.throttled_time += now - clock;
        }
        self.log(g, c as i32, "unthrottle", 0);
        // tg_unthrottle_up(): throttled tasks whose hierarchy is runnable again are enqueued
        let parked = std::mem::take(&mut self.cpus[c].parked);
        for t in parked {
            if self.chain_throttled(t) {
                self.cpus[c].parked.push(t);
                continue;
            }
            self.enqueue(t, false);
        }
        if self.cpus[c].curr.is_none() {
            self.pick_next(c);
        }
    }

    /// `do_sched_cfs_period_timer()` with BW_EARLY_REFILL (0005); true: deactivate.
    fn do_period_timer(&mut self, g: usize, overrun: u64) -> bool {
        if self.bws[g].quota.is_none() {
            return true;
        }
        let throttled = !self.bws[g].throttled_list.is_empty();
        self.bws[g].nr_periods += overrun;
        if g == 0 && self.cfg.record.periods {
            self.period_row(throttled);
        }
        if self.bws[g].refilled_early {
            self.bws[g].refilled_early = false;
        } else {
            self.refill(g);
        }
        if g == 0 && self.cfg.record.periods {
            if let Some(row) = self.periods.last_mut() {
                row.slush_ns = self.bws[0].slush;
            }
        }
        if self.bws[g].idle && !throttled {
            return true;
        }
        if !throttled {
            self.bws[g].idle = true;
            return false;
        }
        self.bws[g].nr_throttled += overrun;
        let mut throttled = throttled;
        while throttled && self.bws[g].runtime > 0 {
            throttled = self.distribute_cfs_runtime(g);
        }
        self.bws[g].idle = false;
        false
    }

    /// `sched_cfs_period_timer()`: the timer fires exactly at its expiry.
    fn period_timer(&mut self, g: usize, gen: u64) {
        if gen != self.bws[g].timer_gen || !self.bws[g].period_active {
            return;
        }
        let mut idle = false;
        loop {
            let b = &mut self.bws[g];
            let (expires, overrun) = Self::forward_now(b.expires, self.now, b.period);
            b.expires = expires;
            if overrun == 0 {
                break;
            }
            idle = self.do_period_timer(g, overrun);
        }
        if idle {
            self.bws[g].period_active = false;
        } else {
            self.bws[g].timer_gen += 1;
            let (t, gen) = (self.bws[g].expires, self.bws[g].timer_gen);
            let t = self.late(t);
            self.push(t, Ev::PeriodTimer(g, gen));
        }
    }

    fn period_row(&mut self, throttled: bool) {
        let now = self.now;
        let pending: Vec<i64> =
            (0..self.ncpu).map(|c| if self.h_curr(0, c) { now - self.cpus[c].exec_start } else { 0 }).collect();
        let cpus = (0..self.ncpu)
            .map(|c| {
                let rq = &mut self.rqs[c];
                // run time, not charged time: ticks charge the past
                let usage = rq.row_usage + pending[c] - rq.row_carry;
                rq.row_carry = pending[c];
                let mut thr = rq.row_throttled;
                if let Some(since) = rq.throttled_since {
                    thr += now - since;
                    rq.throttled_since = Some(now);
                }
                let row = [usage, rq.runtime_remaining, thr, rq.row_acquired];
                rq.row_usage = 0;
                rq.row_throttled = 0;
                rq.row_acquired = 0;
                row
            })
            .collect();
        self.periods.push(PeriodRow { t_ns: now, pool_ns: self.bws[0].runtime, slush_ns: 0, throttled, cpus });
    }

    /// `tg_set_cfs_bandwidth()`, with BW_NOOP_UPDATE (0006) and 0005's refilled_early reset.
    fn set_bandwidth(&mut self, g: usize, period: i64, quota: Option<i64>, burst: i64) {
        let b = &self.bws[g];
        if self.feat.noop_update && b.period == period && b.quota == quota && b.burst == burst {
            self.log(g, -1, "write-noop", 0);
            return;
        }
        let b = &mut self.bws[g];
        b.period = period;
        b.quota = quota;
        b.burst = burst;
        self.refill(g);
        self.bws[g].refilled_early = false;
        if quota.is_some() {
            self.start_cfs_bandwidth(g, 0);
        }
        self.log(g, -1, "write", quota.unwrap_or(0));
        for c in 0..self.ncpu {
            let rq = self.rq(g, c);
            rq.runtime_enabled = quota.is_some();
            rq.runtime_remaining = 1;
            if rq.throttled {
                self.unthrottle_cfs_rq(g, c);
            }
        }
    }

    // ---- threads ---------------------------------------------------------------------

    /// Enqueue a woken (or unthrottled) thread on its CPU: `enqueue_task_fair()` with
    /// `check_enqueue_throttle()` at each level, then run it or queue it.
    fn enqueue(&mut self, t: usize, preempt: bool) {
        let c = self.threads[t].cpu;
        let tg = self.threads[t].group;
        for i in 0..self.chains[tg].len() {
            let g = self.chains[tg][i];
            self.rq(g, c).nr_queued += 1;
            // check_enqueue_throttle(): only for a cfs_rq that is not running anything
            let rq = &self.rqs[g * self.ncpu + c];
            if rq.runtime_enabled && !rq.throttled && !self.h_curr(g, c) {
                self.account(g, c, 0, false);
            }
        }
        if self.chain_throttled(t) {
            self.park(t);
            return;
        }
        self.threads[t].state = State::Runnable;
        if self.cpus[c].curr.is_none() {
            self.run_thread(t);
            return;
        }
        if !preempt {
            self.cpus[c].runq.push_back(t);
            return;
        }
        // wakeup preemption: the woken thread runs now, the preempted one next
        let cur = self.cpus[c].curr.unwrap_or(t);
        if self.update_curr(c) {
            self.stop(cur);
            self.park(cur);
        } else {
            self.stop(cur);
            self.threads[cur].state = State::Runnable;
            self.cpus[c].runq.push_front(cur);
        }
        self.park_throttled_queued(c);
        if self.chain_throttled(t) {
            self.park(t);
            self.pick_next(c);
        } else {
            self.run_thread(t);
        }
    }

    /// The thread leaves its CPU: account what it ran of its burst.
    fn stop(&mut self, t: usize) {
        let c = self.threads[t].cpu;
        let th = &mut self.threads[t];
        if th.work_left != i64::MAX {
            th.work_left -= self.now - th.run_since;
        }
        th.gen += 1;
        th.throttle_pending = false;
        self.cpus[c].curr = None;
    }

    fn run_thread(&mut self, t: usize) {
        let c = self.threads[t].cpu;
        let now = self.now;
        let cpu = &mut self.cpus[c];
        cpu.curr = Some(t);
        cpu.exec_start = now;
        cpu.slice_start = now;
        let th = &mut self.threads[t];
        th.state = State::Running;
        th.run_since = now;
        if let Some(woke) = th.woke_at.take() {
            if self.cfg.record.samples {
                match *th.behavior {
                    Behavior::Sleeper { .. } => self.samples.sleep_ns.push(now - th.sleep_start),
                    Behavior::Worker => self.samples.wakeup_ns.push(now - woke),
                    _ => {}
                }
            }
        }
        if th.work_left != i64::MAX {
            th.gen += 1;
            let (at, gen) = (now + th.work_left, th.gen);
            self.push(at, Ev::Done(t, gen));
        }
    }

    /// Dequeue accounting when a thread leaves the run queue (sleep or throttle).
    fn dequeue(&mut self, t: usize) {
        let c = self.threads[t].cpu;
        let tg = self.threads[t].group;
        let now = self.now;
        for i in 0..self.chains[tg].len() {
            let g = self.chains[tg][i];
            let rq = self.rq(g, c);
            rq.nr_queued -= 1;
            if rq.nr_queued == 0 {
                if rq.throttled && rq.throttled_clock.is_none() {
                    rq.throttled_clock = Some(now); // record_throttle_clock()
                }
                self.return_cfs_rq_runtime(g, c);
            }
        }
    }

    fn park(&mut self, t: usize) {
        self.dequeue(t);
        self.threads[t].state = State::Parked;
        let c = self.threads[t].cpu;
        self.cpus[c].parked.push(t);
    }

    /// Queued threads whose hierarchy got throttled are dequeued at once (in 7.3 they are
    /// throttled when they next return to user space).
    fn park_throttled_queued(&mut self, c: usize) {
        if self.cpus[c].runq.is_empty() {
            return;
        }
        let q = std::mem::take(&mut self.cpus[c].runq);
        for t in q {
            if self.chain_throttled(t) {
                self.park(t);
            } else {
                self.cpus[c].runq.push_back(t);
            }
        }
    }

    fn pick_next(&mut self, c: usize) {
        while let Some(t) = self.cpus[c].runq.pop_front() {
            if self.chain_throttled(t) {
                self.park(t);
                continue;
            }
            self.run_thread(t);
            return;
        }
    }

    /// The running thread blocks, for `duration` or (None) until something wakes it.
    fn sleep(&mut self, t: usize, duration: Option<i64>) {
        let c = self.threads[t].cpu;
        self.stop(t);
        self.dequeue(t);
        let th = &mut self.threads[t];
        th.state = State::Sleeping;
        th.sleep_start = self.now;
        if let Some(d) = duration {
            self.push(self.now + d, Ev::Wake(t));
        }
        self.pick_next(c);
    }

    /// The next CPU burst of a thread that starts or wakes; None: it sleeps until woken
    /// by a request (worker) or has finished (trace without repeat).
    fn next_burst(&mut self, t: usize) -> Option<i64> {
        match &*Rc::clone(&self.threads[t].behavior) {
            Behavior::Cpu => Some(i64::MAX),
            Behavior::Onoff { on, .. } => Some(self.rng.draw(on)),
            Behavior::Sleeper { run_ns, .. } => Some(*run_ns),
            Behavior::Worker => None,
            Behavior::Trace { intervals, .. } => Some(intervals[self.threads[t].trace_idx].0),
        }
    }

    fn wake(&mut self, t: usize) {
        match self.threads[t].state {
            State::NotStarted => {
                if matches!(*self.threads[t].behavior, Behavior::Worker) {
                    self.threads[t].state = State::Sleeping;
                    self.idle_workers.push(t);
                    return;
                }
            }
            State::Sleeping => {}
            _ => return,
        }
        if self.threads[t].state == State::NotStarted {
            self.threads[t].trace_due = self.now;
        }
        if let Some(w) = self.next_burst(t) {
            self.threads[t].work_left = w;
        }
        self.threads[t].woke_at = Some(self.now);
        self.enqueue(t, true);
    }

    /// The running thread finished its CPU burst.
    fn burst_done(&mut self, t: usize, gen: u64) {
        let th = &self.threads[t];
        if th.gen != gen || th.state != State::Running {
            return;
        }
        let c = th.cpu;
        let throttled = self.update_curr(c);
        match &*Rc::clone(&self.threads[t].behavior) {
            Behavior::Cpu => {}
            Behavior::Onoff { off, .. } => {
                let d = self.rng.draw(off);
                self.sleep(t, Some(d));
            }
            Behavior::Sleeper { sleep_ns, .. } => self.sleep(t, Some(*sleep_ns)),
            Behavior::Trace { intervals, repeat, paced } => {
                let idx = self.threads[t].trace_idx;
                let mut sleep = intervals[idx].1;
                if *paced {
                    let due = self.threads[t].trace_due + intervals[idx].0 + intervals[idx].1;
                    self.threads[t].trace_due = due;
                    sleep = (due - self.now).max(0);
                }
                let next = idx + 1;
                if next == intervals.len() && !*repeat {
                    self.stop(t);
                    self.dequeue(t);
                    self.threads[t].state = State::Finished;
                    self.pick_next(c);
                } else {
                    self.threads[t].trace_idx = next % intervals.len();
                    if sleep > 0 {
                        self.sleep(t, Some(sleep));
                    } else {
                        self.continue_running(t, intervals[next % intervals.len()].0, throttled);
                    }
                }
            }
            Behavior::Worker => {
                self.requests_done += 1;
                if self.cfg.record.samples {
                    self.samples.request_ns.push(self.now - self.threads[t].request_arrival);
                }
                if let Some((arrival, service)) = self.queue.pop_front() {
                    self.threads[t].request_arrival = arrival;
                    self.continue_running(t, service, throttled);
                } else {
                    self.sleep(t, None);
                    self.idle_workers.push(t);
                }
            }
        }
        if throttled && self.cpus[c].curr.is_some() {
            // the running thread's hierarchy was throttled by this update
            if let Some(cur) = self.cpus[c].curr {
                if self.chain_throttled(cur) {
                    self.stop(cur);
                    self.park(cur);
                    self.park_throttled_queued(c);
                    self.pick_next(c);
                }
            }
        }
    }

    fn continue_running(&mut self, t: usize, work: i64, throttled: bool) {
        let th = &mut self.threads[t];
        th.work_left = work;
        th.run_since = self.now;
        th.gen += 1;
        if !throttled {
            let (at, gen) = (self.now + work, th.gen);
            self.push(at, Ev::Done(t, gen));
        }
    }

    fn arrival(&mut self) {
        let Some(req) = self.cfg.requests.clone() else {
            return;
        };
        let service = self.rng.draw(&req.service).max(1);
        self.queue.push_back((self.now, service));
        let gap = self.rng.draw(&Dist::Exp(1e9 / req.rate_per_s)).max(1);
        self.push(self.now + gap, Ev::Arrival);
        if let Some(w) = self.idle_workers.pop() {
            let (arrival, service) = self.queue.pop_front().unwrap_or((self.now, service));
            self.threads[w].request_arrival = arrival;
            self.threads[w].work_left = service;
            self.threads[w].woke_at = Some(self.now);
            self.enqueue(w, true);
        }
    }

    /// A timer interrupt on CPU c, handled at `now`: `hrtimer_interrupt()` runs every timer
    /// of that CPU that has expired by then -- ticks and the period timers pinned there --
    /// in expiry order. A late interrupt can so run a tick and an overdue period timer
    /// back to back, with the interrupted task still current.
    fn timer_interrupt(&mut self, c: usize) {
        loop {
            let mut due: Option<(i64, Option<usize>)> = None;
            if self.tick_next[c] <= self.now {
                due = Some((self.tick_next[c], None));
            }
            for g in 0..self.bws.len() {
                let b = &self.bws[g];
                if b.period_active
                    && b.timer_cpu == c
                    && b.expires <= self.now
                    && due.is_none_or(|(t, _)| b.expires < t)
                {
                    due = Some((b.expires, Some(g)));
                }
            }
            match due {
                None => return,
                Some((_, Some(g))) => {
                    let gen = self.bws[g].timer_gen;
                    self.period_timer(g, gen);
                }
                Some((nominal, None)) => {
                    self.tick(c);
                    // tick_sched_timer() forwards past ticks it was too late for
                    let mut next = nominal + self.tick_ns;
                    while next <= self.now {
                        next += self.tick_ns;
                    }
                    self.tick_next[c] = next;
                    let t = self.late(next);
                    self.push(t, Ev::Tick(c, next));
                }
            }
        }
    }

    fn tick(&mut self, c: usize) {
        self.ticks += 1;
        self.tick_accounting(c);
        // logged after the accounting: the local pool as the tick left it
        if self.now >= self.ev_from && self.now <= self.ev_to {
            self.log(0, c as i32, "tick", 0);
        }
    }

    /// `sched_tick()` for the fair class: account the running thread, throttle or rotate.
    fn tick_accounting(&mut self, c: usize) {
        let Some(cur) = self.cpus[c].curr else { return };
        if self.update_curr(c) {
            if self.delays() {
                // 7.3 dequeues a throttled task when it returns to user space: after this
                // interrupt, whose handler also runs the overdue period timers of this CPU
                if !self.threads[cur].throttle_pending {
                    self.threads[cur].throttle_pending = true;
                    self.push(self.now + 2 * HANDLER_NS, Ev::ReturnToUser(cur));
                }
                return;
            }
            self.stop(cur);
            self.park(cur);
            self.park_throttled_queued(c);
            self.pick_next(c);
        } else if !self.cpus[c].runq.is_empty() && self.now - self.cpus[c].slice_start >= self.cfg.base_slice_ns {
            self.stop(cur);
            self.threads[cur].state = State::Runnable;
            self.cpus[c].runq.push_back(cur);
            self.pick_next(c);
        }
    }

    /// `throttle_cfs_rq_work()`: a throttled task that reaches user space is dequeued,
    /// unless its hierarchy was unthrottled meanwhile.
    fn return_to_user(&mut self, t: usize) {
        let th = &mut self.threads[t];
        if !th.throttle_pending {
            return;
        }
        th.throttle_pending = false;
        let c = th.cpu;
        if th.state != State::Running || self.cpus[c].curr != Some(t) || !self.chain_throttled(t) {
            return;
        }
        self.update_curr(c);
        self.stop(t);
        self.park(t);
        self.park_throttled_queued(c);
        self.pick_next(c);
    }

    fn write(&mut self, i: usize) {
        let w = self.cfg.writes[i].clone();
        self.set_bandwidth(w.group, w.period_ns, w.quota_ns, w.burst_ns);
        if let Some(every) = w.every_ns {
            self.push(self.now + every, Ev::Write(i));
        }
    }

    pub fn run(mut self) -> Output {
        // the scenario's groups are configured at t=0, then local pools set as configured
        for g in 0..self.cfg.groups.len() {
            let gc = self.cfg.groups[g].clone();
            self.set_bandwidth(g, gc.period_ns, gc.quota_ns, gc.burst_ns);
            for c in 0..self.ncpu {
                self.rq(g, c).runtime_remaining = gc.initial_local_ns;
            }
        }
        for i in 0..self.cfg.writes.len() {
            let at = self.cfg.writes[i].at_ns;
            self.push(at, Ev::Write(i));
        }
        for t in 0..self.threads.len() {
            let at = self.cfg.threads[t].start_ns;
            self.push(at, Ev::Wake(t));
        }
        if self.cfg.requests.is_some() {
            self.push(0, Ev::Arrival);
        }
        let jitter = self.cfg.jitter_ns > 0 || !self.cfg.latency_ns.is_empty();
        if jitter {
            // late ticks may overtake each other: they go through the heap
            for i in 0..self.tick_cpu.len() {
                let (c, nominal) = (self.tick_cpu[i], self.tick_phase[i]);
                let t = self.late(nominal);
                self.push(t, Ev::Tick(c, nominal));
            }
        }
        let n = self.tick_cpu.len();
        loop {
            let tick_t =
                if jitter { i64::MAX } else { self.tick_round * self.tick_ns + self.tick_phase[self.tick_idx] };
            let heap_t = self.heap.peek().map_or(i64::MAX, |Reverse((t, _, _))| *t);
            if heap_t <= tick_t {
                if heap_t >= self.end {
                    break;
                }
                let Some(Reverse((t, _, ev))) = self.heap.pop() else {
                    break;
                };
                self.now = t;
                match ev {
                    Ev::Write(i) => self.write(i),
                    Ev::PeriodTimer(g, gen) => {
                        let b = &self.bws[g];
                        if self.delays() && gen == b.timer_gen && b.period_active {
                            let c = b.timer_cpu;
                            self.timer_interrupt(c);
                        } else {
                            self.period_timer(g, gen);
                        }
                    }
                    Ev::SlackTimer(g) => self.slack_timer(g),
                    Ev::Wake(th) => self.wake(th),
                    Ev::Done(th, gen) => self.burst_done(th, gen),
                    Ev::Arrival => self.arrival(),
                    Ev::ReturnToUser(th) => self.return_to_user(th),
                    Ev::Unthrottle(g, c) => {
                        self.rq(g, c).unthrottle_pending = false;
                        if self.rqs[g * self.ncpu + c].throttled {
                            self.unthrottle_cfs_rq(g, c);
                        }
                    }
                    Ev::Tick(c, nominal) => {
                        // stale when an earlier interrupt on c already ran this tick
                        if nominal == self.tick_next[c] {
                            self.timer_interrupt(c);
                        }
                    }
                }
            } else {
                if tick_t >= self.end {
                    break;
                }
                self.now = tick_t;
                let c = self.tick_cpu[self.tick_idx];
                self.tick(c);
                self.tick_idx += 1;
                if self.tick_idx == n {
                    self.tick_idx = 0;
                    self.tick_round += 1;
                }
            }
        }
        self.now = self.end;
        for c in 0..self.ncpu {
            self.update_curr(c);
        }
        let groups = self
            .bws
            .iter()
            .zip(&self.cfg.groups)
            .map(|(b, g)| GroupStat {
                name: g.name.clone(),
                nr_periods: b.nr_periods,
                nr_throttled: b.nr_throttled,
                throttled_ns: b.throttled_time,
                unthrottle_aborts: b.unthrottle_aborts,
                nr_bursts: b.nr_burst,
                burst_ns: b.burst_time,
                usage_ns: b.usage,
            })
            .collect();
        Output {
            groups,
            thread_cpu_ns: self.threads.iter().map(|t| t.cpu_ns).collect(),
            samples: std::mem::take(&mut self.samples),
            requests_done: self.requests_done,
            requests_queued: self.queue.len() as u64,
            ticks: self.ticks,
            duration_ns: self.end,
            periods: std::mem::take(&mut self.periods),
            events: std::mem::take(&mut self.events),
        }
    }
}

/// Run one simulation.
pub fn simulate(cfg: Config) -> Result<Output, String> {
    Ok(Sim::new(cfg)?.run())
}
