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
#[path = "estimate_tests.rs"]
mod tests;
