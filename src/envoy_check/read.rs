//! Reading what Envoy runs: a bootstrap (YAML or JSON, static listeners
//! and routes) or an admin `/config_dump` (listeners and routes as typed
//! JSON, what Envoy Gateway and Istio generate), down to every HTTP
//! connection manager: its filters in order and its routes (inline, or by
//! RDS name from the dump).

use std::path::Path;

use serde_json::Value;

/// One HTTP connection manager as Envoy runs it.
#[derive(Debug)]
pub(crate) struct Hcm {
    /// The listener's name (or address) and the chain's index.
    pub(crate) listener: String,
    /// `http_filters` in order: name, `@type`, config, whether disabled.
    pub(crate) filters: Vec<Filter>,
    /// The route configuration, when found.
    pub(crate) routes: Option<Value>,
    /// An RDS name the dump did not hold.
    pub(crate) missing_rds: Option<String>,
}

#[derive(Debug)]
pub(crate) struct Filter {
    pub(crate) name: String,
    pub(crate) kind: String,
    pub(crate) config: Value,
    pub(crate) disabled: bool,
}

impl Filter {
    pub(crate) fn is(&self, type_suffix: &str, name: &str) -> bool {
        self.kind.ends_with(type_suffix) || self.name == name
    }
}

/// Why a file could not be read (exit status 2).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    #[error("{0}: not YAML or JSON Envoy understands: {1}")]
    Parse(String, String),
}

/// The document in `path`, YAML or JSON (JSON is YAML), its field names
/// in snake_case whichever way they were written.
pub(crate) fn document(path: &Path) -> Result<Value, ReadError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ReadError::Io(shown.clone(), e))?;
    let doc: Value = if text.trim_start().starts_with('{') {
        serde_json::from_str(&text).map_err(|e| ReadError::Parse(shown, e.to_string()))?
    } else {
        serde_saphyr::from_str(&text).map_err(|e| ReadError::Parse(shown, e.to_string()))?
    };
    Ok(snake_case(doc))
}

/// Protobuf's JSON names are lowerCamelCase (`typedPerFilterConfig`, what
/// Envoy Gateway writes) and Envoy takes both: every field name is read as
/// its snake_case one. Names that are not plain identifiers (filter names
/// with dots, `@type`) are kept as they are.
fn snake_case(v: Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| {
                    let plain = k.starts_with(|c: char| c.is_ascii_lowercase())
                        && k.chars().all(|c| c.is_ascii_alphanumeric());
                    let k = if plain && k.chars().any(|c| c.is_ascii_uppercase()) {
                        k.chars()
                            .fold(String::with_capacity(k.len() + 4), |mut s, c| {
                                if c.is_ascii_uppercase() {
                                    s.push('_');
                                }
                                s.push(c.to_ascii_lowercase());
                                s
                            })
                    } else {
                        k
                    };
                    (k, snake_case(v))
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(snake_case).collect()),
        other => other,
    }
}

fn typed(v: &Value) -> &str {
    v.get("@type").and_then(Value::as_str).unwrap_or_default()
}

fn list(v: Option<&Value>) -> &[Value] {
    v.and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

/// The listeners and route configurations of a bootstrap, a config dump
/// or a list of resources.
fn resources(doc: &Value) -> (Vec<&Value>, Vec<&Value>) {
    let mut listeners: Vec<&Value> = Vec::new();
    let mut routes: Vec<&Value> = Vec::new();
    if let Some(configs) = doc.get("configs").and_then(Value::as_array) {
        for c in configs {
            let t = typed(c);
            if t.ends_with("ListenersConfigDump") {
                for l in list(c.get("static_listeners")) {
                    listeners.extend(l.get("listener"));
                }
                for l in list(c.get("dynamic_listeners")) {
                    listeners.extend(l.pointer("/active_state/listener"));
                }
            } else if t.ends_with("RoutesConfigDump") {
                for r in list(c.get("static_route_configs"))
                    .iter()
                    .chain(list(c.get("dynamic_route_configs")))
                {
                    routes.extend(r.get("route_config"));
                }
            }
        }
    } else if let Some(items) = doc.as_array() {
        // A list of resources, as a control plane's snapshot holds them:
        // listeners, and the route configurations they name by RDS.
        for item in items {
            if item.get("virtual_hosts").is_some() {
                routes.push(item);
            } else if item.get("filter_chains").is_some()
                || item.get("default_filter_chain").is_some()
            {
                listeners.push(item);
            }
        }
    } else {
        listeners.extend(list(doc.pointer("/static_resources/listeners")));
    }
    (listeners, routes)
}

/// Every HCM of a bootstrap, a config dump or a list of resources.
pub(crate) fn managers(doc: &Value) -> Vec<Hcm> {
    let (listeners, routes) = resources(doc);
    let mut out = Vec::new();
    for l in listeners {
        let name = l
            .get("name")
            .and_then(Value::as_str)
            .map_or_else(|| "(unnamed listener)".to_owned(), str::to_owned);
        let chains = list(l.get("filter_chains"))
            .iter()
            .chain(l.get("default_filter_chain"));
        for (i, chain) in chains.enumerate() {
            for f in list(chain.get("filters")) {
                let Some(tc) = f.get("typed_config") else {
                    continue;
                };
                if !typed(tc).ends_with("HttpConnectionManager") {
                    continue;
                }
                let listener = if i == 0 {
                    name.clone()
                } else {
                    format!("{name} (chain {i})")
                };
                out.push(manager(listener, tc, &routes));
            }
        }
    }
    out
}

fn manager(listener: String, hcm: &Value, dumped: &[&Value]) -> Hcm {
    let filters = list(hcm.get("http_filters"))
        .iter()
        .map(|f| {
            let config = f.get("typed_config").cloned().unwrap_or(Value::Null);
            Filter {
                name: f
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                kind: typed(&config).to_owned(),
                config,
                disabled: f.get("disabled").and_then(Value::as_bool).unwrap_or(false),
            }
        })
        .collect();
    let (routes, missing_rds) = match (
        hcm.get("route_config"),
        hcm.pointer("/rds/route_config_name"),
    ) {
        (Some(inline), _) => (Some(inline.clone()), None),
        (None, Some(name)) => {
            let name = name.as_str().unwrap_or_default();
            let found = dumped
                .iter()
                .find(|r| r.get("name").and_then(Value::as_str) == Some(name));
            match found {
                Some(r) => (Some((*r).clone()), None),
                None => (None, Some(name.to_owned())),
            }
        }
        (None, None) => (None, None),
    };
    Hcm {
        listener,
        filters,
        routes,
        missing_rds,
    }
}
