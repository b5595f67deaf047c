//! `count_after`: a rule whose counters an instance answers from its own
//! credit and counts in the store after (the store crate's `credit`), a
//! stated amount of exactness traded for local speed. Only a fixed window
//! that is not refundable can: its count is a sum the store adds up late.

use super::super::yaml::Node;
use super::{LimitDef, Parser, join};
use crate::limiter::Algorithm;

impl Parser<'_> {
    /// `count_after:` as written, refused where it cannot apply.
    pub(super) fn count_after(
        &mut self,
        path: &str,
        given: Option<(bool, &Node)>,
        limit: &LimitDef,
        refundable: bool,
    ) -> Option<bool> {
        let (on, node) = given?;
        let fixed = matches!(
            limit,
            LimitDef::Limited {
                algorithm: Algorithm::FixedWindow,
                ..
            }
        );
        let why = if !on {
            None
        } else if !fixed {
            Some(
                "count_after is only for fixed windows (a shape's state is no sum to add up later)",
            )
        } else if refundable {
            Some("count_after cannot be refundable (a refund must see the store's count)")
        } else {
            None
        };
        if let Some(msg) = why {
            self.error(&node.referenced, &join(path, "count_after"), msg);
            return None;
        }
        Some(on)
    }
}

/// `--count-after`: every fixed window that is not refundable and does not
/// say otherwise counts after.
pub(crate) fn by_default(defs: &mut [Box<super::DescriptorDef>]) {
    for d in defs {
        for r in d.rate_limit.iter_mut().chain(d.rate_limits.iter_mut()) {
            let fixed = matches!(
                r.limit,
                LimitDef::Limited {
                    algorithm: Algorithm::FixedWindow,
                    ..
                }
            );
            if r.count_after.is_none() && fixed && !r.refundable {
                r.count_after = Some(true);
            }
        }
        by_default(&mut d.descriptors);
    }
}

impl crate::config::Rules {
    /// Per domain, how many of its rules count after (`sluice check` says
    /// so: they trade exactness); domains with none are left out.
    pub fn counted_after(&self) -> Vec<(String, usize)> {
        self.domains()
            .into_iter()
            .map(|(name, d)| {
                (
                    name.to_owned(),
                    d.rules().iter().filter(|r| r.count_after).count(),
                )
            })
            .filter(|(_, n)| *n > 0)
            .collect()
    }
}
