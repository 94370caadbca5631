//! `bwlab-sim CONFIG.json` runs one simulation and prints its result; `bwlab-sim --bench`
//! measures simulated CPU-ticks per second on one core.

use std::process::ExitCode;
use std::time::Instant;

fn bench() -> Result<(), String> {
    for (ncpu, hz, secs) in [(2usize, 250u32, 3600i64), (64, 1000, 3600)] {
        let threads: Vec<String> =
            (0..ncpu).map(|c| format!(r#"{{"group":0,"cpu":{c},"behavior":{{"type":"cpu"}}}}"#)).collect();
        let cfg = format!(
            r#"{{"ncpu":{ncpu},"hz":{hz},"duration_ns":{},"tick":"random","groups":[{{"name":"g","period_ns":100000000,"quota_ns":{}}}],"threads":[{}],"record":{{"samples":false}}}}"#,
            secs * 1_000_000_000,
            ncpu as i64 * 100_000_000,
            threads.join(",")
        );
        let start = Instant::now();
        let out: serde_json::Value = serde_json::from_str(&bwlab_sim::run_json(&cfg)?).map_err(|e| e.to_string())?;
        let el = start.elapsed().as_secs_f64();
        let ticks = out["ticks"].as_f64().unwrap_or(0.0);
        println!(
            "{ncpu} CPUs, HZ={hz}, {secs} s simulated, demand = quota: {ticks:.0} CPU-ticks in {el:.2} s = {:.1} M ticks/s",
            ticks / el / 1e6
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.as_slice() {
        [flag] if flag == "--bench" => bench(),
        [path] => std::fs::read_to_string(path)
            .map_err(|e| format!("{path}: {e}"))
            .and_then(|text| bwlab_sim::run_json(&text).map_err(|e| format!("{path}: {e}")))
            .map(|out| println!("{out}")),
        _ => Err("usage: bwlab-sim CONFIG.json | --bench".into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bwlab-sim: {e}");
            ExitCode::FAILURE
        }
    }
}
