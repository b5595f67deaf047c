//! One Envoy's demand for one bucket, from its usage reports: smoothed over
//! reports, and read as what it may need rather than what it last did.
//!
//! A quiet Envoy's report holds a handful of requests: 2 or 3 in 5 s reads
//! as 0.4 or 0.6 per second, and a share cut to that refuses the request
//! that comes a little early. So counts and seconds decay over reports (four
//! fifths of their weight kept at each report, about the last five counting:
//! shares move less, so buckets are replaced less), and the
//! demand claimed is one standard deviation over the rate that made those
//! counts (Poisson: `n + √n` requests over the seconds; an idle Envoy claims
//! nothing and gets the split's floor): about 1.4 times
//! the rate for a quiet Envoy and barely more than it for a busy one. The
//! bucket's burst absorbs what is left of the quiet Envoy's jitter; a wider
//! margin (two deviations, as before) kept budget from busy Envoys that the
//! quiet ones never used: on the simulated fleet, one flooding Envoy among
//! nine modest ones got 31% of its fair share.

/// The weight an older report keeps at each new one.
const DECAY: f64 = 0.8;

/// Decayed counts and seconds of one bucket's reports.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct Estimate {
    requests: f64,
    seconds: f64,
}

impl Estimate {
    /// Adds a report of `requests` (allowed and denied) over `seconds`.
    pub(crate) fn add(&mut self, requests: u64, seconds: f64) {
        if !(seconds.is_finite() && seconds > 0.0) {
            return;
        }
        self.requests = self.requests * DECAY + requests as f64;
        self.seconds = self.seconds * DECAY + seconds;
    }

    /// Whether any measured report was added.
    pub(crate) fn known(&self) -> bool {
        self.seconds > 0.0
    }

    /// The rate the reports show, requests per second.
    #[cfg(test)]
    pub(crate) fn rate(&self) -> f64 {
        if self.known() {
            self.requests / self.seconds
        } else {
            0.0
        }
    }

    /// The demand to claim: the highest rate the reports plausibly came
    /// from, requests per second.
    pub(crate) fn claim(&self) -> f64 {
        if !self.known() {
            return 0.0;
        }
        let n = self.requests;
        (n + n.sqrt()) / self.seconds
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quiet_envoy_claims_under_half_again_its_rate_and_a_busy_one_little_more() {
        let mut quiet = Estimate::default();
        let mut busy = Estimate::default();
        // 0.5 and 18 per second, reported every 5 s (2 and 3 requests in
        // turn for the quiet one).
        for i in 0..8 {
            quiet.add(if i % 2 == 0 { 2 } else { 3 }, 5.0);
            busy.add(90, 5.0);
        }
        assert!((quiet.rate() - 0.5).abs() < 0.05, "{}", quiet.rate());
        let q = quiet.claim() / quiet.rate();
        assert!((1.2..1.6).contains(&q), "quiet claims {q}x");
        let b = busy.claim() / busy.rate();
        assert!((1.0..1.2).contains(&b), "busy claims {b}x");
        // Smoothed: one report of 2 and one of 3 move the claim little.
        let mut a = quiet;
        let mut b = quiet;
        a.add(2, 5.0);
        b.add(3, 5.0);
        assert!((a.claim() - b.claim()).abs() / b.claim() < 0.15);
    }

    #[test]
    fn nothing_measured_claims_nothing_and_garbage_is_ignored() {
        let mut e = Estimate::default();
        assert!(!e.known());
        e.add(5, 0.0);
        e.add(5, f64::NAN);
        assert!(!e.known());
        assert_eq!(e.claim(), 0.0);
        e.add(0, 5.0);
        assert!(
            e.known(),
            "an idle Envoy is known, and the split's floor keeps it a share"
        );
        assert_eq!(e.claim(), 0.0);
    }
}
