//! One big rule file read in parts, on every core: a platform's million
//! per-customer rules in one generated file is one long `descriptors:` list,
//! and its items are independent. The file is cut at the list's items into
//! parts of a few MiB, each part is parsed as the file's header followed by
//! its items (padded with blank lines so every line and column is the
//! file's own), checked and read into its domain, and the parts' rules are
//! joined in order. A part's YAML tree is dropped as soon as it is read, so
//! the whole file's tree is never held at once.
//!
//! Only a file whose shape makes the cut safe is cut: one document, its
//! top-level keys all before `descriptors:`, which is a block list whose
//! items all start at one indentation. A line that starts an item at that
//! indentation cannot be inside an item (a block scalar or a plain
//! continuation is indented deeper); a quoted scalar or a flow collection
//! cut in two fails to parse, and an alias whose anchor is in another part
//! fails too. Any part that fails, or parts past the file's node bound,
//! send the file to the whole-file reading, which says what is wrong exactly
//! as it always has.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};

use super::{DescriptorDef, DomainFile, Parser, yaml};
use crate::config::yaml::{FileBounds, Node, Value};

/// Files smaller than this are read whole: cutting pays only for big ones.
pub const MIN_SPLIT_BYTES: usize = 8 << 20;
/// About how much of the file one part holds.
pub const PART_BYTES: usize = 4 << 20;

/// A file cut at its `descriptors:` items: the header (every line up to
/// and including `descriptors:`), how many lines it has, and the parts,
/// each its first line's index in the file and its text.
#[derive(Debug)]
pub struct Parts<'a> {
    header: &'a str,
    header_lines: usize,
    parts: Vec<(usize, &'a str)>,
}

/// Where a line's content starts: its indentation in spaces, and whether it
/// holds anything (not blank, not a comment).
fn indent(line: &str) -> (usize, bool) {
    let n = line.len() - line.trim_start_matches(' ').len();
    let rest = line[n..].trim_end();
    (n, !rest.is_empty() && !rest.starts_with('#'))
}

/// Cuts `text` into parts of about `part_bytes`, when it is at least
/// `min_bytes` and its shape makes the cut safe (see the module's doc).
pub fn split(text: &str, min_bytes: usize, part_bytes: usize) -> Option<Parts<'_>> {
    if text.len() < min_bytes {
        return None;
    }
    let mut header: Option<(usize, usize)> = None; // (end offset, lines)
    let mut item_indent: Option<usize> = None;
    let mut parts = Vec::new();
    let (mut part_start, mut part_line) = (0, 0);
    let mut offset = 0;
    for (number, line) in text.split_inclusive('\n').enumerate() {
        let (n, content) = indent(line);
        let at = offset;
        offset += line.len();
        if line.starts_with("---") || line.starts_with("...") || line.starts_with('%') {
            return None;
        }
        if !content {
            continue;
        }
        if header.is_none() {
            if n == 0 && line.trim_end() == "descriptors:" {
                header = Some((offset, number + 1));
            }
            continue;
        }
        let item = line[n..].starts_with("- ") || line[n..].trim_end() == "-";
        match item_indent {
            None if item && n > 0 => {
                item_indent = Some(n);
                (part_start, part_line) = (at, number);
            }
            Some(i) if n == i && item => {
                if at - part_start >= part_bytes {
                    parts.push((part_line, &text[part_start..at]));
                    (part_start, part_line) = (at, number);
                }
            }
            Some(i) if n > i => {}
            // Another top-level key, an item elsewhere, or no list at all.
            _ => return None,
        }
    }
    let (end, header_lines) = header?;
    item_indent?;
    parts.push((part_line, &text[part_start..]));
    (parts.len() > 1).then(|| Parts {
        header: &text[..end],
        header_lines,
        parts,
    })
}

/// YAML nodes in a tree, as the file's node bound counts them.
fn nodes(node: &Node) -> usize {
    1 + match &node.value {
        Value::Seq(items) => items.iter().map(nodes).sum(),
        Value::Map(entries) => entries.iter().map(|(k, v)| nodes(k) + nodes(v)).sum(),
        _ => 0,
    }
}

/// Reads every part on as many threads as there are cores (one less on a
/// reload: [`crate::background::threads`]) and joins their rules in order;
/// `None` when a part fails or the parts hold more nodes than the file may
/// (the whole-file reading then says why).
pub fn read(file: &Path, parts: &Parts<'_>, bounds: FileBounds) -> Option<DomainFile> {
    let failed = AtomicBool::new(false);
    let total = AtomicUsize::new(0);
    let threads = crate::background::threads().min(parts.parts.len());
    let next = AtomicUsize::new(0);
    let read: Vec<(usize, DomainFile)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    while let Some(part) = parts.parts.get(next.fetch_add(1, Relaxed)) {
                        if failed.load(Relaxed) {
                            break;
                        }
                        match read_part(file, parts, part, bounds, &total) {
                            Some(df) => mine.push((part.0, df)),
                            None => failed.store(true, Relaxed),
                        }
                    }
                    mine
                })
            })
            .collect();
        workers
            .into_iter()
            // A parser that panicked panics here, as it would alone.
            .flat_map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    if failed.load(Relaxed) || read.len() != parts.parts.len() {
        return None;
    }
    join(read)
}

/// One part, read with the file's header and padded to its own lines;
/// `None` when it fails or the nodes read so far pass the bound.
fn read_part(
    file: &Path,
    parts: &Parts<'_>,
    (line, items): &(usize, &str),
    bounds: FileBounds,
    total: &AtomicUsize,
) -> Option<DomainFile> {
    let padding = "\n".repeat(line.saturating_sub(parts.header_lines));
    let text = [parts.header, &padding, items].concat();
    let mut roots = yaml::parse_all(&text, bounds).ok()?;
    drop(text);
    let root = match roots.len() {
        1 => roots.pop()?,
        _ => return None,
    };
    let count = total.fetch_add(nodes(&root), Relaxed) + nodes(&root);
    let mut p = Parser {
        file,
        errors: Vec::new(),
    };
    p.check_generic(&root, "", false);
    let df = p.domain_file(&root);
    (p.errors.is_empty() && count <= bounds.max_nodes).then_some(df)
}

/// The parts' rules in the file's order, as one list. Parts are keyed by
/// their first line, which orders them.
fn join(mut read: Vec<(usize, DomainFile)>) -> Option<DomainFile> {
    read.sort_by_key(|(line, _)| *line);
    // Sized once: a million rules grown by doubling copy and fault in
    // twice their size.
    let total: usize = read.iter().map(|(_, df)| df.descriptors.len()).sum();
    let mut read = read.into_iter().map(|(_, df)| df);
    let mut whole = read.next()?;
    whole
        .descriptors
        .reserve_exact(total - whole.descriptors.len());
    for mut df in read {
        let before = whole.descriptors.len();
        for d in &mut df.descriptors {
            renumber(d, before);
        }
        whole.descriptors.extend(df.descriptors);
    }
    Some(whole)
}

/// A part numbers its items from 0: each of its rules, and every rule
/// under it, is named by its place in the whole list instead
/// (`descriptors[i]...`), as errors and `/rlconfig` name it.
fn renumber(d: &mut DescriptorDef, before: usize) {
    let field = &d.origin.field;
    if let Some(rest) = field.strip_prefix("descriptors[")
        && let Some((i, tail)) = rest.split_once(']')
        && let Ok(i) = i.parse::<usize>()
    {
        d.origin.field = format!("descriptors[{}]{tail}", i + before);
    }
    for child in &mut d.descriptors {
        renumber(child, before);
    }
}

#[cfg(test)]
#[path = "split_tests.rs"]
mod tests;
