//! A pushed `RateLimitConfig` as the reference's YAML model, so xDS rules
//! compile exactly as a file with the same content would.

use std::path::PathBuf;

use envoy_types::pb::ratelimit::config::ratelimit::v3::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy,
};

use crate::config::{ConfigError, DescriptorDef, DomainFile, LimitDef, Origin, RateLimitDef};
use crate::limiter::{Algorithm, Period, Unit};

/// One `RateLimitConfig` as the model a YAML file becomes, checked as the
/// YAML loader checks it.
pub(super) fn domain_file(config: &RateLimitConfig) -> Result<DomainFile, Vec<ConfigError>> {
    let mut errors = Vec::new();
    let file = PathBuf::from(format!("xds:{}", config.name));
    if config.domain.is_empty() {
        errors.push(ConfigError {
            file: file.clone(),
            position: None,
            field: "domain".into(),
            message: "config file cannot have empty domain".into(),
        });
    }
    let descriptors = config
        .descriptors
        .iter()
        .enumerate()
        .map(|(i, d)| {
            Box::new(descriptor(
                d,
                &file,
                &format!("descriptors[{i}]"),
                &mut errors,
            ))
        })
        .collect();
    if errors.is_empty() {
        Ok(DomainFile {
            domain: config.domain.clone(),
            descriptors,
        })
    } else {
        Err(errors)
    }
}

fn descriptor(
    d: &RateLimitDescriptor,
    file: &PathBuf,
    path: &str,
    errors: &mut Vec<ConfigError>,
) -> DescriptorDef {
    let mut err = |field: &str, message: String| {
        errors.push(ConfigError {
            file: file.clone(),
            position: None,
            field: format!("{path}.{field}"),
            message,
        });
    };
    if d.key.is_empty() {
        err("key", "descriptor has empty key".into());
    }
    let rate_limit = d.rate_limit.as_ref().and_then(|p| policy(p, &mut err));
    let children = d
        .descriptors
        .iter()
        .enumerate()
        .map(|(i, c)| {
            Box::new(descriptor(
                c,
                file,
                &format!("{path}.descriptors[{i}]"),
                errors,
            ))
        })
        .collect();
    DescriptorDef {
        key: d.key.clone(),
        value: (!d.value.is_empty()).then(|| d.value.clone()),
        rate_limit,
        rate_limits: Vec::new(),
        shadow_mode: d.shadow_mode,
        quota_mode: d.quota_mode,
        detailed_metric: d.detailed_metric,
        value_to_metric: false,
        share_threshold: false,
        metadata: d.metadata.clone(),
        descriptors: children,
        origin: Origin {
            file: file.clone(),
            position: None,
            field: path.to_owned(),
        },
    }
}

fn policy(p: &RateLimitPolicy, err: &mut impl FnMut(&str, String)) -> Option<RateLimitDef> {
    let limit = if p.unlimited {
        LimitDef::Unlimited
    } else {
        let Some(unit) = Unit::from_proto(p.unit) else {
            err(
                "rate_limit.unit",
                format!("invalid rate limit unit '{}'", p.unit),
            );
            return None;
        };
        LimitDef::Limited {
            requests_per_unit: p.requests_per_unit,
            period: Period::Unit(unit),
            algorithm: Algorithm::FixedWindow,
        }
    };
    let name = (!p.name.is_empty()).then(|| p.name.clone());
    for r in &p.replaces {
        if r.name.is_empty() {
            err(
                "rate_limit.replaces",
                "should not have an empty replaces entry".into(),
            );
        } else if name.as_deref() == Some(r.name.as_str()) {
            err(
                "rate_limit.replaces",
                "replaces should not contain name of same descriptor".into(),
            );
        }
    }
    Some(RateLimitDef {
        limit,
        name,
        replaces: p.replaces.iter().map(|r| r.name.clone()).collect(),
        on_failure: None,
        refundable: false,
        leased_allowance: true,
        count_after: None,
    })
}
