//! Small helpers over prometheus-client's encoder for families whose values
//! sluice keeps in its own atomics: the request path bumps a plain counter,
//! and a scrape reads it through a [`Collector`](prometheus_client::collector::Collector).
//!
//! Names are written without `_total`: the encoder adds it to counters.

use prometheus_client::encoding::{
    DescriptorEncoder, EncodeGaugeValue, EncodeLabelSet, EncodeMetric, NoLabelSet,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use super::stats::{BUCKETS, Histogram};

pub(crate) type Result = std::result::Result<(), std::fmt::Error>;

/// One unlabelled counter.
pub(crate) fn counter(enc: &mut DescriptorEncoder<'_>, name: &str, help: &str, v: u64) -> Result {
    ConstCounter::new(v).encode(enc.encode_descriptor(name, help, None, MetricType::Counter)?)
}

/// One unlabelled gauge.
pub(crate) fn gauge(enc: &mut DescriptorEncoder<'_>, name: &str, help: &str, v: i64) -> Result {
    ConstGauge::new(v).encode(enc.encode_descriptor(name, help, None, MetricType::Gauge)?)
}

/// A counter family: one series per label set.
pub(crate) fn counters<L: EncodeLabelSet>(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    series: impl IntoIterator<Item = (L, u64)>,
) -> Result {
    let mut family = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, v) in series {
        ConstCounter::new(v).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// A gauge family: one series per label set.
pub(crate) fn gauges<L: EncodeLabelSet, V: EncodeGaugeValue + std::fmt::Debug>(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    series: impl IntoIterator<Item = (L, V)>,
) -> Result {
    let mut family = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, v) in series {
        ConstGauge::new(v).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// A latency histogram in seconds, from its per-bucket counts.
pub(super) fn histogram(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    h: &Histogram,
) -> Result {
    let (buckets, count, sum_nanos) = h.read();
    let buckets: Vec<(f64, u64)> = BUCKETS.iter().copied().zip(buckets).collect();
    enc.encode_descriptor(name, help, None, MetricType::Histogram)?
        .encode_histogram::<NoLabelSet>(sum_nanos as f64 / 1e9, count, &buckets, None)
}
