//! The paper's Fig. 4 ("Mitigating unnecessary throttling in Linux CFS bandwidth control"),
//! tick by tick: HZ=250 (4 ms ticks), slice 5 ms, period = quota = 10 ms, one CPU-bound thread.
//!
//! The figure starts with the thread running on an empty local pool at a tick that is also a
//! period boundary. In 7.3 terms: the thread was scheduled 1 ms before that tick with 1 ms
//! left in its local pool, and the period timer expires at the tick (armed earlier, so it
//! fires first). Figure time f is simulation time t - 4 ms.

use bwlab_sim::engine::{simulate, Event};
use bwlab_sim::Config;

const MS: i64 = 1_000_000;

fn fig4(features: &[&str]) -> (Vec<Event>, bwlab_sim::Output) {
    let cfg = format!(
        r#"{{"ncpu":1,"hz":250,"duration_ns":{},"slice_ns":{},"tick":{{"phases":[0]}},
            "features":[{}],
            "groups":[{{"name":"g","period_ns":{},"quota_ns":{},"timer_expires_ns":{},"initial_local_ns":{}}}],
            "threads":[{{"group":0,"cpu":0,"start_ns":{},"behavior":{{"type":"cpu"}}}}],
            "record":{{"events_from_ns":{},"events_to_ns":{}, "periods": true}}}}"#,
        44 * MS,
        5 * MS,
        features.iter().map(|f| format!("\"{f}\"")).collect::<Vec<_>>().join(","),
        10 * MS,
        10 * MS,
        4 * MS,
        MS,
        3 * MS,
        4 * MS,
        40 * MS
    );
    let out = simulate(Config::from_json(&cfg).unwrap()).unwrap();
    let events = out
        .events
        .iter()
        .filter(|e| e.kind != "tick")
        .cloned()
        .map(|mut e| {
            e.t_ns -= 4 * MS;
            e
        })
        .collect();
    (events, out)
}

/// (figure time ms, kind, amount ms, local pool ms after, global pool ms after)
fn summary(events: &[Event]) -> Vec<(f64, &'static str, f64, f64, f64)> {
    let ms = |x: i64| (x as f64 / 1e5).round() / 10.0;
    // global events (cpu -1) have no local pool
    events
        .iter()
        .map(|e| (ms(e.t_ns), e.kind, ms(e.amount_ns), if e.cpu < 0 { 0.0 } else { ms(e.local_ns) }, ms(e.pool_ns)))
        .collect()
}

#[test]
fn mainline_reproduces_fig4() {
    let (events, out) = fig4(&[]);
    let got = summary(&events);
    let expected = vec![
        (0.0, "refill", 10.0, 0.0, 10.0),    // period 1 starts
        (0.0, "acquire", 5.0, 5.0, 5.0),     // tick 0: empty local pool takes a slice
        (8.0, "acquire", 5.0, 2.0, 0.0),     // tick 2: -3 ms debt paid, only 2 ms left
        (10.0, "refill", 10.0, 0.0, 10.0),   // period 2
        (12.0, "acquire", 7.0, 5.0, 3.0),    // tick 3: -2 ms debt paid in the same period
        (20.0, "refill", 10.0, 0.0, 10.0),   // period 3 (3 ms unused are dropped)
        (20.0, "acquire", 8.0, 5.0, 2.0),    // tick 5: -3 ms of period 2 paid from period 3
        (28.0, "acquire", 2.0, -1.0, 0.0),   // tick 7: -3 ms debt, only 2 ms left
        (28.0, "throttle", 0.0, -1.0, 0.0),  // throttled for the rest of period 3
        (30.0, "refill", 10.0, 0.0, 10.0),   // period 4
        (30.0, "distribute", 1.0, 0.0, 9.0), // debt + 1 ns
        (30.0, "unthrottle", 0.0, 0.0, 9.0), // after 2 ms
    ];
    let got: Vec<_> = got.into_iter().filter(|e| e.0 <= 30.0).collect();
    assert_eq!(got, expected);
    // the period timer counted period 3 as throttled, and 2 ms of throttled time
    let g = &out.groups[0];
    assert_eq!(g.nr_throttled, 1, "{g:?}");
    assert_eq!(g.throttled_ns, 2 * MS, "{g:?}");
    // debts seen at the acquiring ticks: local before = after - amount
    let debts: Vec<f64> = events
        .iter()
        .filter(|e| e.kind == "acquire" && e.t_ns > 0 && e.t_ns <= 28 * MS)
        .map(|e| ((e.local_ns - e.amount_ns) as f64 / 1e5).round() / 10.0)
        .collect();
    assert_eq!(debts, vec![-3.0, -2.0, -3.0, -3.0]);
}

#[test]
fn slush_fund_removes_the_fig4_throttle() {
    let (events, out) = fig4(&["BW_SLUSH"]);
    let got = summary(&events);
    // period 2 left 3 ms unused: at t=20 they pay the 3 ms debt instead of period 3's quota
    assert!(got.contains(&(20.0, "slush", 3.0, 0.0, 10.0)), "{got:?}");
    assert!(got.contains(&(20.0, "acquire", 5.0, 5.0, 5.0)), "{got:?}");
    assert!(!got.iter().any(|e| e.1 == "throttle"), "{got:?}");
    assert_eq!(out.groups[0].nr_throttled, 0);
}

#[test]
fn period_rows_account_every_ns() {
    let (_, out) = fig4(&[]);
    // usage per period row adds up to the thread's CPU time up to the last row
    let rows = &out.periods;
    assert!(rows.len() >= 4);
    let used: i64 = rows.iter().map(|r| r.cpus[0][0]).sum();
    assert!(used <= out.thread_cpu_ns[0]);
    // period 3 (the row written at its end, t = 34 ms) was throttled for 2 ms
    let row = rows.iter().find(|r| r.t_ns == 34 * MS).unwrap();
    assert!(row.throttled);
    assert_eq!(row.cpus[0][2], 2 * MS);
    assert_eq!(row.cpus[0][0], 8 * MS);
}
