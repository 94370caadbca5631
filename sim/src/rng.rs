//! A small seeded generator (splitmix64) and the duration distributions drawn from it, so a
//! simulation is a pure function of its configuration.

use crate::config::Dist;

#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform integer in [0, n) (n > 0).
    pub fn below(&mut self, n: i64) -> i64 {
        (self.unit() * n as f64) as i64
    }

    fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.unit();
        let u2 = self.unit();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// A duration in ns, at least 0.
    pub fn draw(&mut self, d: &Dist) -> i64 {
        let v = match d {
            Dist::Fixed(v) => *v,
            Dist::Exp(mean) => -mean * (1.0 - self.unit()).ln(),
            Dist::Uniform(a, b) => a + (b - a) * self.unit(),
            Dist::Lognormal(median, sigma) => median * (sigma * self.normal()).exp(),
            Dist::Empirical(samples) => samples[self.below(samples.len() as i64) as usize],
        };
        v.clamp(0.0, 1e15) as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_and_in_range() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        for _ in 0..1000 {
            let x = a.unit();
            assert_eq!(x, b.unit());
            assert!((0.0..1.0).contains(&x));
        }
    }

    #[test]
    fn distribution_means() {
        let mut r = Rng::new(1);
        let n = 200_000;
        let mean = |r: &mut Rng, d: Dist| (0..n).map(|_| r.draw(&d) as f64).sum::<f64>() / n as f64;
        let e = mean(&mut r, Dist::Exp(1000.0));
        assert!((e - 1000.0).abs() < 15.0, "exp mean {e}");
        let u = mean(&mut r, Dist::Uniform(100.0, 300.0));
        assert!((u - 200.0).abs() < 2.0, "uniform mean {u}");
        // log-normal: mean = median * exp(sigma^2 / 2)
        let l = mean(&mut r, Dist::Lognormal(1000.0, 0.5));
        assert!((l - 1000.0 * (0.125f64).exp()).abs() < 15.0, "lognormal mean {l}");
        assert_eq!(r.draw(&Dist::Fixed(42.0)), 42);
        // empirical: every draw is one of the samples, each about equally often
        let samples = vec![10.0, 20.0, 30.0, 40.0];
        let d = Dist::Empirical(samples.clone());
        let mut seen = [0usize; 4];
        for _ in 0..40_000 {
            let v = r.draw(&d);
            let i = samples.iter().position(|&s| s as i64 == v).expect("a drawn value is a sample");
            seen[i] += 1;
        }
        assert!(seen.iter().all(|&n| (9_000..11_000).contains(&n)), "empirical draws {seen:?}");
    }
}
