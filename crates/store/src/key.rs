//! Collision-free counter keys.
//!
//! The reference joins parts with `_`, so a value containing `_` can make two
//! descriptors share a counter. Here every part is length-prefixed, and the
//! unit is part of the key, so two different descriptors, or two units on the
//! same entries, never share one whatever bytes the values hold. The window
//! start is kept beside the key by the stores, not in it.

use std::fmt;
use std::sync::Arc;

use crate::limiter::{Algorithm, Period, Unit};

/// What besides the entries tells counters apart: the window's length and
/// the algorithm, whose stored state differs (a count, or a bucket's time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeySpace {
    pub period: Period,
    pub algorithm: Algorithm,
}

impl From<Unit> for KeySpace {
    /// A fixed window of one unit, as every reference rule is.
    fn from(unit: Unit) -> KeySpace {
        KeySpace {
            period: Period::Unit(unit),
            algorithm: Algorithm::FixedWindow,
        }
    }
}

/// Tags above every unit's proto value: shapes other than a fixed window of
/// one unit, followed by the window in seconds.
const SHAPED: u8 = 0x10;

/// The identity of one counter across windows: domain, shape and entries.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct CounterKey(Arc<[u8]>);

impl CounterKey {
    /// Builds the key of `entries` (key, value) under `domain` for `space`.
    /// A fixed window of one unit keeps the bytes it always had, so the
    /// Redis keys of reference rules do not change.
    pub fn new<'a>(
        domain: &str,
        space: impl Into<KeySpace>,
        entries: impl IntoIterator<Item = (&'a str, &'a str), IntoIter: Clone>,
    ) -> CounterKey {
        let space = space.into();
        let entries = entries.into_iter();
        // Sized exactly: a key longer than a guess would be copied as it grows.
        // Most keys are short: built on the stack, they take one allocation
        // (the key's own) instead of two.
        let size = 4
            + domain.len()
            + 5
            + entries
                .clone()
                .map(|(k, v)| 8 + k.len() + v.len())
                .sum::<usize>();
        if size <= INLINE {
            let mut buf = Inline::default();
            write(&mut buf, domain, space, entries.clone());
            if let Some(bytes) = buf.bytes() {
                return CounterKey(Arc::from(bytes));
            }
        }
        let mut buf = Vec::with_capacity(size);
        write(&mut buf, domain, space, entries);
        CounterKey(buf.into())
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The domain and the (key, value) entries the key was built from.
    pub fn parts(&self) -> (&str, Vec<(&str, &str)>) {
        let mut rest: &[u8] = &self.0;
        let domain = take(&mut rest);
        let header = if rest.first().is_some_and(|t| *t >= SHAPED) {
            5
        } else {
            1
        };
        rest = rest.get(header..).unwrap_or_default();
        let mut entries = Vec::new();
        while !rest.is_empty() {
            let k = take(&mut rest);
            let v = take(&mut rest);
            entries.push((k, v));
        }
        (domain, entries)
    }
}

/// Reads one length-prefixed part. Parts were `&str` when the key was built,
/// so the UTF-8 check cannot fail.
fn take<'a>(rest: &mut &'a [u8]) -> &'a str {
    let len = rest
        .get(..4)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map_or(0, |b| u32::from_be_bytes(b) as usize);
    let part = rest.get(4..4 + len).unwrap_or_default();
    *rest = rest.get(4 + len..).unwrap_or_default();
    std::str::from_utf8(part).unwrap_or_default()
}

/// The longest key built on the stack.
const INLINE: usize = 128;

/// Where a key's bytes are written.
trait Sink {
    fn put(&mut self, bytes: &[u8]);
}

impl Sink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

/// A key of at most [`INLINE`] bytes, on the stack.
struct Inline {
    buf: [u8; INLINE],
    len: usize,
    /// More was written than fits (never, when sized first).
    overflow: bool,
}

impl Default for Inline {
    fn default() -> Inline {
        Inline {
            buf: [0; INLINE],
            len: 0,
            overflow: false,
        }
    }
}

impl Inline {
    fn bytes(&self) -> Option<&[u8]> {
        (!self.overflow).then(|| self.buf.get(..self.len)).flatten()
    }
}

impl Sink for Inline {
    fn put(&mut self, bytes: &[u8]) {
        let end = self.len + bytes.len();
        match self.buf.get_mut(self.len..end) {
            Some(dst) => {
                dst.copy_from_slice(bytes);
                self.len = end;
            }
            None => self.overflow = true,
        }
    }
}

/// The key's bytes: the domain, the space's tag, then each entry.
fn write<'a>(
    buf: &mut impl Sink,
    domain: &str,
    space: KeySpace,
    entries: impl Iterator<Item = (&'a str, &'a str)>,
) {
    push(buf, domain.as_bytes());
    match (space.period, space.algorithm) {
        (Period::Unit(unit), Algorithm::FixedWindow) => buf.put(&[unit.proto() as u8]),
        (period, algorithm) => {
            buf.put(&[SHAPED + algorithm.tag()]);
            let seconds = u32::try_from(period.seconds()).unwrap_or(u32::MAX);
            buf.put(&seconds.to_be_bytes());
        }
    }
    for (k, v) in entries {
        push(buf, k.as_bytes());
        push(buf, v.as_bytes());
    }
}

fn push(buf: &mut impl Sink, part: &[u8]) {
    buf.put(&u32::try_from(part.len()).unwrap_or(u32::MAX).to_be_bytes());
    buf.put(part);
}

impl fmt::Debug for CounterKey {
    // Keys hold descriptor values, which may be personal data: never print them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CounterKey({} bytes)", self.0.len())
    }
}

#[cfg(test)]
#[path = "key_tests.rs"]
mod tests;
