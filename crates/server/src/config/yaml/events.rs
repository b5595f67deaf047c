//! The rule files platforms generate, read straight from the parser's
//! events. Reading through serde costs three times what the parser does
//! (a million per-customer rules: 14 s of CPU against 4), and generated
//! files use a small part of YAML: block and flow maps and lists, quoted
//! strings, and plain scalars that are plainly words or numbers.
//!
//! So this reads only that part and says `None` for anything else: an
//! anchor, an alias, a tag, a directive, a block scalar, a plain scalar
//! whose type YAML 1.1 and 1.2 could read differently (`yes`, `0x1f`,
//! `1.5`, `~`, `True`), a key written twice, more than one document, a
//! syntax error, or a file past its node or depth bound. The serde reading
//! then reads the file as it always has, and says what is wrong. What this
//! does read, it reads as that would, positions included (a test holds the
//! two to each other on every rule file the tests have).

use std::borrow::Cow;

use granit_parser::{Event, Options, Parser, ScalarStyle};

use super::{FileBounds, Location, MAX_DEPTH, Node, Value};

/// Levels short of [`MAX_DEPTH`] at which this reading gives a file up.
const DEPTH_MARGIN: usize = 4;

/// A collection being read, with where it started.
enum Open {
    Seq(Vec<Node>, Location),
    Map(Vec<(Node, Node)>, Option<Node>, Location),
}

/// The one document of `text` as a tree, or `None` when it is not in the
/// part of YAML read here (see the module's doc).
pub(super) fn read(text: &str, bounds: FileBounds) -> Option<Node> {
    let mut options = Options::default();
    options.emit_comments = false;
    let mut parser = Parser::new_from_str_with_options(text, options);
    let mut stack: Vec<Open> = Vec::new();
    let mut doc: Option<Node> = None;
    let mut nodes = 0usize;
    while let Some(next) = parser.next_event() {
        let (event, span) = next.ok()?;
        let at = Location::at(span.start.line(), span.start.col() + 1);
        let done = match event {
            Event::StreamStart | Event::DocumentEnd => None,
            Event::DocumentStart(_, None) if doc.is_none() => None,
            Event::StreamEnd => break,
            Event::Scalar(v, style, 0, None) => Some(Node::new(scalar(v, style)?, at, at)),
            Event::SequenceStart(_, 0, None) => {
                stack.push(Open::Seq(Vec::new(), at));
                None
            }
            Event::MappingStart(_, 0, None) => {
                stack.push(Open::Map(Vec::new(), None, at));
                None
            }
            Event::SequenceEnd | Event::MappingEnd => Some(close(stack.pop()?)?),
            _ => return None,
        };
        // Well inside serde's depth bound however each counts a level, so
        // nothing read here is a file serde's reading would refuse.
        if stack.len() + DEPTH_MARGIN > MAX_DEPTH {
            return None;
        }
        let Some(node) = done else { continue };
        nodes += 1;
        if nodes > bounds.max_nodes {
            return None;
        }
        match stack.last_mut() {
            None if doc.is_none() => doc = Some(node),
            None => return None,
            Some(open) => add(open, node)?,
        }
    }
    doc.filter(|d| matches!(d.value, Value::Map(_)) && stack.is_empty())
}

/// A finished collection as a node; `None` for a map left with a key.
fn close(open: Open) -> Option<Node> {
    Some(match open {
        Open::Seq(items, at) => Node::new(Value::Seq(items), at, at),
        Open::Map(entries, None, at) => Node::new(Value::Map(entries), at, at),
        Open::Map(_, Some(_), _) => return None,
    })
}

/// Adds a node to the collection being read; `None` for a key written
/// twice (serde's reading has its own policy for that).
fn add(open: &mut Open, node: Node) -> Option<()> {
    match open {
        Open::Seq(items, _) => items.push(node),
        Open::Map(_, key @ None, _) => *key = Some(node),
        Open::Map(entries, key, _) => {
            let key = key.take()?;
            if entries.iter().any(|(k, _)| k.value == key.value) {
                return None;
            }
            entries.push((key, node));
        }
    }
    Some(())
}

/// A scalar's value, when its style and text leave no doubt about it.
fn scalar(text: Cow<'_, str>, style: ScalarStyle) -> Option<Value> {
    match style {
        ScalarStyle::SingleQuoted | ScalarStyle::DoubleQuoted => {
            Some(Value::Str(text.into_owned()))
        }
        ScalarStyle::Plain => plain(&text),
        _ => None,
    }
}

/// A plain scalar that is a decimal number without a leading zero, a
/// lowercase `true`, `false` or `null`, or a word (a letter, then letters,
/// digits, `_`, `-`, `.` or `/`) that no YAML schema reads as anything
/// but a string.
fn plain(text: &str) -> Option<Value> {
    let bytes = text.as_bytes();
    let first = *bytes.first()?;
    if bytes.iter().all(u8::is_ascii_digit) {
        if (first == b'0' && bytes.len() > 1) || bytes.len() > 18 {
            return None;
        }
        return text.parse::<i128>().ok().map(Value::Int);
    }
    match text {
        "true" => return Some(Value::Bool(true)),
        "false" => return Some(Value::Bool(false)),
        "null" => return Some(Value::Null),
        _ => {}
    }
    let word = first.is_ascii_alphabetic()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'/'));
    // Words YAML 1.1 reads as booleans or null, and the names Rust's float
    // parsing takes.
    const READ_OTHERWISE: [&str; 12] = [
        "y", "n", "yes", "no", "on", "off", "true", "false", "null", "inf", "infinity", "nan",
    ];
    let doubtful = READ_OTHERWISE.iter().any(|w| text.eq_ignore_ascii_case(w));
    (word && !doubtful).then(|| Value::Str(text.to_owned()))
}

#[cfg(test)]
#[path = "events_tests.rs"]
mod tests;
