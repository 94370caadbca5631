//! bwlab-sim: a model of Linux 7.3 CFS bandwidth control (cgroup `cpu.max`), per CPU and tick
//! by tick, with the kernel series' policies (slush fund, no-op updates, ...) as switches.
//!
//! The entry point is [`simulate`]; bwlab calls it through the Python module `bwlab._sim`
//! (built with the `python` feature) with a JSON configuration and gets JSON back.

pub mod config;
pub mod engine;
pub mod rng;

pub use config::Config;
pub use engine::{simulate, Output};

/// Run a simulation from its JSON configuration; the result as JSON.
pub fn run_json(config: &str) -> Result<String, String> {
    let cfg = Config::from_json(config)?;
    let out = simulate(cfg)?;
    serde_json::to_string(&out).map_err(|e| format!("result: {e}"))
}

/// Run several simulations on up to `jobs` threads; results in input order.
pub fn run_many(configs: &[String], jobs: usize) -> Vec<Result<String, String>> {
    let jobs = jobs.clamp(1, configs.len().max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut results: Vec<Option<Result<String, String>>> = vec![None; configs.len()];
    let slots = std::sync::Mutex::new(&mut results);
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= configs.len() {
                    break;
                }
                let r = run_json(&configs[i]);
                if let Ok(mut v) = slots.lock() {
                    v[i] = Some(r);
                }
            });
        }
    });
    results.into_iter().map(|r| r.unwrap_or_else(|| Err("not run".into()))).collect()
}

#[cfg(feature = "python")]
mod python {
    use pyo3::exceptions::PyValueError;
    use pyo3::prelude::*;

    /// run(config_json) -> result_json; ValueError with a one-line message on bad input.
    #[pyfunction]
    fn run(py: Python<'_>, config: String) -> PyResult<String> {
        py.allow_threads(|| super::run_json(&config)).map_err(PyValueError::new_err)
    }

    /// run_many(configs, jobs) -> [result_json]; simulations run in parallel without the GIL.
    #[pyfunction]
    fn run_many(py: Python<'_>, configs: Vec<String>, jobs: usize) -> PyResult<Vec<String>> {
        let results = py.allow_threads(|| super::run_many(&configs, jobs));
        results.into_iter().collect::<Result<Vec<_>, _>>().map_err(PyValueError::new_err)
    }

    #[pymodule]
    fn _sim(m: &Bound<'_, PyModule>) -> PyResult<()> {
        m.add_function(wrap_pyfunction!(run, m)?)?;
        m.add_function(wrap_pyfunction!(run_many, m)?)?;
        m.add("VERSION", env!("CARGO_PKG_VERSION"))?;
        Ok(())
    }
}
