//! Properties of the model beyond Fig. 4: nested quotas, slack return, configuration writes,
//! burst accounting, and input errors.

use bwlab_sim::{simulate, Config};

const MS: i64 = 1_000_000;

fn run(json: &str) -> bwlab_sim::Output {
    simulate(Config::from_json(json).unwrap()).unwrap()
}

#[test]
fn a_parent_quota_limits_an_unlimited_child() {
    let out = run(&format!(
        r#"{{"ncpu":2,"hz":1000,"duration_ns":{},"groups":[
            {{"name":"parent","period_ns":{},"quota_ns":{}}},
            {{"name":"child","parent":0,"period_ns":{}}}],
          "threads":[{{"group":1,"behavior":{{"type":"cpu"}}}},{{"group":1,"behavior":{{"type":"cpu"}}}}]}}"#,
        2000 * MS,
        100 * MS,
        100 * MS,
        100 * MS
    ));
    let (parent, child) = (&out.groups[0], &out.groups[1]);
    // one CPU's worth over 2 s: 20 refills, plus the quota the configuration write put in
    // the pool before the first (partial) period, give or take a tick per CPU
    assert!(parent.usage_ns > 1950 * MS && parent.usage_ns < 2110 * MS, "{parent:?}");
    assert_eq!(parent.usage_ns, child.usage_ns);
    assert!(parent.nr_throttled >= 18, "{parent:?}");
    assert_eq!(child.nr_throttled, 0);
}

#[test]
fn sleeping_cfs_rqs_return_slack_to_the_pool() {
    // a thread running 2 ms out of every 10 ms keeps little runtime locally between bursts
    let out = run(&format!(
        r#"{{"ncpu":1,"hz":250,"duration_ns":{},"groups":[{{"name":"g","period_ns":{},"quota_ns":{}}}],
          "threads":[{{"group":0,"behavior":{{"type":"onoff","on":{{"fixed":{}}},"off":{{"fixed":{}}}}}}}],
          "record":{{"events_from_ns":0,"events_to_ns":{}}}}}"#,
        500 * MS,
        100 * MS,
        50 * MS,
        2 * MS,
        8 * MS,
        500 * MS
    ));
    let returns: Vec<_> = out.events.iter().filter(|e| e.kind == "return").collect();
    assert!(!returns.is_empty());
    // what is kept locally after a return is exactly min_cfs_rq_runtime (1 ms)
    assert!(returns.iter().all(|e| e.local_ns == MS), "{returns:?}");
    assert_eq!(out.groups[0].nr_throttled, 0);
}

fn rewrites(features: &str) -> bwlab_sim::Output {
    run(&format!(
        r#"{{"ncpu":2,"hz":250,"duration_ns":{},"features":[{features}],
          "groups":[{{"name":"g","period_ns":{},"quota_ns":{}}}],
          "threads":[{{"group":0,"behavior":{{"type":"cpu"}}}},{{"group":0,"behavior":{{"type":"cpu"}}}}],
          "writes":[{{"group":0,"at_ns":{},"every_ns":{},"period_ns":{},"quota_ns":{}}}],
          "record":{{"events_from_ns":0,"events_to_ns":{}}}}}"#,
        2000 * MS,
        10 * MS,
        10 * MS,
        100 * MS,
        100 * MS,
        10 * MS,
        10 * MS,
        2000 * MS
    ))
}

#[test]
fn identical_writes_refill_unless_noop_update() {
    let mainline = rewrites("");
    let noop = rewrites(r#""BW_NOOP_UPDATE""#);
    let quota_total = 2000 * MS; // one CPU's worth (10 ms per 10 ms) for 2 s
                                 // each write adds a quota to the pool and forgives the local pools' debt
    assert!(mainline.groups[0].usage_ns > quota_total * 102 / 100, "{:?}", mainline.groups[0]);
    assert!(noop.groups[0].usage_ns <= quota_total * 1005 / 1000 + 10 * MS, "{:?}", noop.groups[0]);
    assert_eq!(mainline.events.iter().filter(|e| e.kind == "write").count(), 20);
    assert_eq!(noop.events.iter().filter(|e| e.kind == "write-noop").count(), 19);
}

#[test]
fn burst_is_counted_when_a_period_uses_more_than_its_quota() {
    let cfg = |burst: i64| {
        format!(
            r#"{{"ncpu":2,"hz":250,"duration_ns":{},"seed":3,
              "groups":[{{"name":"g","period_ns":{},"quota_ns":{},"burst_ns":{burst}}}],
              "threads":[{{"group":0,"behavior":{{"type":"onoff","on":{{"exp":20000000}},"off":{{"exp":15000000}}}}}},
                         {{"group":0,"behavior":{{"type":"onoff","on":{{"exp":20000000}},"off":{{"exp":15000000}}}}}}]}}"#,
            5000 * MS,
            100 * MS,
            140 * MS
        )
    };
    let without = run(&cfg(0)).groups[0].clone();
    let with = run(&cfg(100 * MS)).groups[0].clone();
    assert_eq!(without.nr_bursts, 0);
    assert!(with.nr_bursts > 0 && with.burst_ns > 0, "{with:?}");
    assert!(with.nr_throttled < without.nr_throttled, "{with:?} vs {without:?}");
}

#[test]
fn bad_input_names_the_field() {
    let err = |json: &str| Config::from_json(json).unwrap_err();
    let base = r#""ncpu":1,"hz":250,"duration_ns":1000000,"threads":[]"#;
    assert!(err(&format!(r#"{{{base},"groups":[]}}"#)).contains("at least one group"));
    let e = err(&format!(r#"{{{base},"groups":[{{"name":"g","period_ns":10,"quota_ns":null}}]}}"#));
    assert!(e.contains("period must be in 1 ms..1 s"), "{e}");
    let e = err(&format!(
        r#"{{{base},"groups":[{{"name":"g","period_ns":10000000,"quota_ns":1000000,"burst_ns":2000000}}]}}"#
    ));
    assert!(e.contains("burst must be in 0..=quota"), "{e}");
    let e = err(&format!(r#"{{{base},"groups":[{{"name":"g","period_ns":10000000,"bogus":1}}]}}"#));
    assert!(e.contains("unknown field `bogus`"), "{e}");
    let e = err(r#"{"ncpu":1,"hz":250,"duration_ns":1000000,"groups":[{"name":"g","period_ns":10000000}],
                  "threads":[{"group":0,"cpu":4,"behavior":{"type":"cpu"}}]}"#);
    assert!(e.contains("thread 0: cpu 4 is not below ncpu 1"), "{e}");
}

#[test]
fn an_overdue_refill_comes_after_the_old_pool_is_used() {
    // every interrupt 2.5 ms late: the tick due at 8 ms and the period timer due at 10 ms run
    // together at 10.5 ms, the tick first. With BW_EARLY_REFILL the lock-free path (0007)
    // first takes what the old period left; only the locked path then refills early, and the
    // period timer right after does not refill again.
    let out = run(&format!(
        r#"{{"ncpu":1,"hz":250,"duration_ns":{},"slice_ns":{},"tick":{{"phases":[0]}},"latency_ns":[{}],
          "features":["BW_EARLY_REFILL"],
          "groups":[{{"name":"g","period_ns":{},"quota_ns":{},"timer_expires_ns":{}}}],
          "threads":[{{"group":0,"cpu":0,"behavior":{{"type":"cpu"}}}}],
          "record":{{"events_from_ns":{},"events_to_ns":{}}}}}"#,
        40 * MS,
        MS,
        2 * MS + MS / 2,
        10 * MS,
        10 * MS,
        10 * MS,
        10 * MS,
        11 * MS
    ));
    // in microseconds: the write's initial 1 ns local pool is still in there
    let us = |x: i64| (x as f64 / 1e3).round() as i64 * 1000;
    let at: Vec<_> = out
        .events
        .iter()
        .filter(|e| e.kind != "tick")
        .map(|e| (e.kind, us(e.amount_ns), us(e.local_ns), us(e.pool_ns)))
        .collect();
    assert_eq!(
        at,
        vec![
            ("acquire", 2 * MS + MS / 2, -MS / 2, 0), // the old period's last 2.5 ms
            ("refill", 10 * MS, 0, 10 * MS),          // refill_overdue_cfs_bandwidth()
            ("acquire", MS + MS / 2, MS, 8 * MS + MS / 2),
        ],
        "{:?}",
        out.events
    );
}

fn traced(paced: bool) -> bwlab_sim::Output {
    // one CPU, 60 ms of quota per 100 ms; a 70 ms run (throttled at 60 ms, done at 110 ms) due
    // at 0, then 10 ms runs due every 100 ms from 100 ms on (the first after a 30 ms sleep)
    run(&format!(
        r#"{{"ncpu":1,"hz":1000,"duration_ns":{},
          "groups":[{{"name":"g","period_ns":{},"quota_ns":{},"timer_expires_ns":0}}],
          "threads":[{{"group":0,"behavior":{{"type":"trace","paced":{paced},
            "intervals":[[{},{}],[{},{}],[{},{}]]}}}}]}}"#,
        130 * MS,
        100 * MS,
        60 * MS,
        70 * MS,
        30 * MS,
        10 * MS,
        90 * MS,
        10 * MS,
        90 * MS
    ))
}

#[test]
fn a_paced_trace_runs_delayed_work_at_once() {
    // closed: the delayed run is followed by its whole 30 ms sleep (the next run at 140 ms, after
    // this 130 ms run ends); paced: the next run was due at 100 ms, so it starts at 110 ms
    let (closed, paced) = (traced(false), traced(true));
    let (c, p) = (closed.groups[0].usage_ns, paced.groups[0].usage_ns);
    assert!((69 * MS..=72 * MS).contains(&c), "closed used {c} ns");
    assert!((79 * MS..=82 * MS).contains(&p), "paced used {p} ns");
    assert!(closed.groups[0].nr_throttled >= 1 && paced.groups[0].nr_throttled >= 1);
}
