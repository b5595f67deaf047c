//! The edge: protobuf `RateLimitRequest` into sluice's own request type, with
//! every malformed input turned into one [`RequestError`].

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;

use crate::limiter::{Unit, hits};
use crate::privacy::Privacy;

/// A validated request. Domain code never sees prost types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub domain: String,
    pub descriptors: Vec<Descriptor>,
    /// The request-level `hits_addend` as sent (0 when Envoy leaves it unset).
    pub hits_addend: u32,
}

/// One descriptor of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor {
    pub entries: Vec<(String, String)>,
    /// A limit sent by Envoy that replaces the configured one.
    pub limit: Option<Override>,
    /// The per-descriptor `hits_addend`, when present.
    pub hits_addend: Option<u64>,
    /// What this descriptor adds to its counter, or gives back (`refund`).
    pub hits: u64,
    /// `is_negative_hits`: the hits are given back, not spent.
    pub refund: bool,
}

/// Envoy's per-descriptor `limit` override.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Override {
    pub requests_per_unit: u32,
    pub unit: Unit,
}

/// The most a request may carry (each a `--max-*` flag), so that no request
/// can make sluice hold unbounded memory or build unbounded keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    pub descriptors: usize,
    pub entries: usize,
    /// Bytes of one entry key, and of the domain.
    pub key_bytes: usize,
    pub value_bytes: usize,
    /// Bytes of one descriptor's whole counter key: domain, keys and values.
    pub descriptor_bytes: usize,
    /// The most hits one request or descriptor may add (`hits_addend`).
    pub hits: u64,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            descriptors: 64,
            entries: 32,
            key_bytes: 256,
            value_bytes: 1024,
            descriptor_bytes: 4096,
            // More than any limit can hold (`requests_per_unit` is 32-bit),
            // and far from where a store's 64-bit counter would overflow.
            hits: u64::from(u32::MAX),
        }
    }
}

/// Why a request cannot be answered. Each becomes gRPC INVALID_ARGUMENT (and
/// HTTP 400 on `/json`); the wording of the first two is the reference's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("rate limit domain must not be empty")]
    EmptyDomain,
    #[error("rate limit descriptor list must not be empty")]
    NoDescriptors,
    #[error("descriptor {descriptor}: limit override has unknown unit {unit}")]
    OverrideUnit { descriptor: usize, unit: i32 },
    #[error("descriptor {descriptor}: entry {entry} has an empty key")]
    EmptyKey { descriptor: usize, entry: usize },
    #[error("{count} descriptors in one request, more than the {max} allowed (--max-descriptors)")]
    TooManyDescriptors { count: usize, max: usize },
    #[error(
        "descriptor {descriptor}: {count} entries, more than the {max} allowed (--max-entries)"
    )]
    TooManyEntries {
        descriptor: usize,
        count: usize,
        max: usize,
    },
    #[error("domain of {len} bytes, more than the {max} allowed (--max-key-bytes)")]
    DomainTooLong { len: usize, max: usize },
    #[error(
        "descriptor {descriptor}: entry {entry} key of {len} bytes, more than the {max} allowed (--max-key-bytes)"
    )]
    KeyTooLong {
        descriptor: usize,
        entry: usize,
        len: usize,
        max: usize,
    },
    #[error(
        "descriptor {descriptor}: entry {entry} value of {len} bytes, more than the {max} allowed (--max-value-bytes)"
    )]
    ValueTooLong {
        descriptor: usize,
        entry: usize,
        len: usize,
        max: usize,
    },
    #[error(
        "descriptor {descriptor}: {len} bytes of domain, keys and values, more than the {max} allowed (--max-descriptor-bytes)"
    )]
    DescriptorTooLong {
        descriptor: usize,
        len: usize,
        max: usize,
    },
    #[error("hits_addend of {hits}, more than the {max} allowed (--max-hits)")]
    TooManyHits { hits: u64, max: u64 },
    #[error(
        "descriptor {descriptor}: hits_addend of {hits}, more than the {max} allowed (--max-hits)"
    )]
    TooManyDescriptorHits {
        descriptor: usize,
        hits: u64,
        max: u64,
    },
}

/// Checks every bound before anything is copied out of the message.
fn check(r: &RateLimitRequest, limits: &Bounds) -> Result<(), RequestError> {
    let max = limits;
    if u64::from(r.hits_addend) > max.hits {
        return Err(RequestError::TooManyHits {
            hits: u64::from(r.hits_addend),
            max: max.hits,
        });
    }
    if r.domain.len() > max.key_bytes {
        return Err(RequestError::DomainTooLong {
            len: r.domain.len(),
            max: max.key_bytes,
        });
    }
    if r.descriptors.len() > max.descriptors {
        return Err(RequestError::TooManyDescriptors {
            count: r.descriptors.len(),
            max: max.descriptors,
        });
    }
    for (i, d) in r.descriptors.iter().enumerate() {
        check_descriptor(i, d, r.domain.len(), max)?;
    }
    Ok(())
}

/// Descriptor `i`'s hits, entries and bytes (the domain's `domain_len`
/// counting towards its total).
fn check_descriptor(
    i: usize,
    d: &RateLimitDescriptor,
    domain_len: usize,
    max: &Bounds,
) -> Result<(), RequestError> {
    if let Some(h) = d.hits_addend.as_ref().filter(|h| h.value > max.hits) {
        return Err(RequestError::TooManyDescriptorHits {
            descriptor: i,
            hits: h.value,
            max: max.hits,
        });
    }
    if d.entries.len() > max.entries {
        return Err(RequestError::TooManyEntries {
            descriptor: i,
            count: d.entries.len(),
            max: max.entries,
        });
    }
    let mut total = domain_len;
    for (j, e) in d.entries.iter().enumerate() {
        if e.key.len() > max.key_bytes {
            return Err(RequestError::KeyTooLong {
                descriptor: i,
                entry: j,
                len: e.key.len(),
                max: max.key_bytes,
            });
        }
        if e.value.len() > max.value_bytes {
            return Err(RequestError::ValueTooLong {
                descriptor: i,
                entry: j,
                len: e.value.len(),
                max: max.value_bytes,
            });
        }
        total += e.key.len() + e.value.len();
    }
    if total > max.descriptor_bytes {
        return Err(RequestError::DescriptorTooLong {
            descriptor: i,
            len: total,
            max: max.descriptor_bytes,
        });
    }
    Ok(())
}

impl TryFrom<RateLimitRequest> for Request {
    type Error = RequestError;

    /// Converts under the default [`Bounds`].
    fn try_from(r: RateLimitRequest) -> Result<Self, Self::Error> {
        Request::parse(r, &Bounds::default())
    }
}

impl Request {
    /// Replaces every email value with its normalised hash, before anything
    /// else (matching, keys, metrics, logs) sees it.
    pub fn protect(&mut self, privacy: &Privacy) {
        self.protect_unless(privacy, |_| false);
    }

    /// As [`Request::protect`], leaving alone the email values `keep` says
    /// are already digests (an operator's lookup of a key read off the top).
    pub(crate) fn protect_unless(&mut self, privacy: &Privacy, keep: impl Fn(&str) -> bool) {
        for d in &mut self.descriptors {
            for (k, v) in &mut d.entries {
                if privacy.is_email_key(k) && !keep(v) {
                    *v = privacy.protect(v);
                }
            }
        }
    }

    /// Validates and converts a protobuf request under `limits`.
    pub fn parse(r: RateLimitRequest, limits: &Bounds) -> Result<Request, RequestError> {
        if r.domain.is_empty() {
            return Err(RequestError::EmptyDomain);
        }
        if r.descriptors.is_empty() {
            return Err(RequestError::NoDescriptors);
        }
        check(&r, limits)?;
        let request_hits = r.hits_addend;
        let descriptors = r
            .descriptors
            .into_iter()
            .enumerate()
            .map(|(i, d)| descriptor(i, d, request_hits))
            .collect::<Result<_, _>>()?;
        Ok(Request {
            domain: r.domain,
            descriptors,
            hits_addend: r.hits_addend,
        })
    }
}

/// Descriptor `i` as sluice's own: its override, its entries (no empty
/// key) and the hits it adds.
fn descriptor(
    i: usize,
    d: RateLimitDescriptor,
    request_hits: u32,
) -> Result<Descriptor, RequestError> {
    let limit = d
        .limit
        .map(|l| {
            Unit::from_proto(l.unit)
                .map(|unit| Override {
                    requests_per_unit: l.requests_per_unit,
                    unit,
                })
                .ok_or(RequestError::OverrideUnit {
                    descriptor: i,
                    unit: l.unit,
                })
        })
        .transpose()?;
    let entries = d
        .entries
        .into_iter()
        .enumerate()
        .map(|(j, e)| {
            if e.key.is_empty() {
                Err(RequestError::EmptyKey {
                    descriptor: i,
                    entry: j,
                })
            } else {
                Ok((e.key, e.value))
            }
        })
        .collect::<Result<_, _>>()?;
    let hits_addend = d.hits_addend.map(|h| h.value);
    Ok(Descriptor {
        entries,
        limit,
        hits_addend,
        hits: hits(request_hits, hits_addend),
        refund: d.is_negative_hits,
    })
}

#[cfg(test)]
#[path = "request_tests.rs"]
mod tests;
