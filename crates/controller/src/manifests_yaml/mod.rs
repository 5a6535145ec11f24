//! A fast reader for the YAML Kubernetes tools write: libyaml through serde_norway spent most of a
//! 100k-Service render reading the manifests.
//!
//! It reads a conservative subset (block mappings and sequences, one-line flow collections,
//! one-line plain and quoted scalars) and gives a document up (`None`) at the first thing outside
//! it, for serde_norway to read exactly as before; so the subset only has to be read right, never
//! completely. It builds the `serde_norway::Value` serde_norway would have built, not a
//! `serde_json::Value`: the two decode differently (serde_json's reads a sequence as a struct,
//! serde_norway's reads null as an empty map), and only the same Value keeps every decoded object
//! and every problem message as it was.

use scalar::{double_quoted, flow_key, flow_plain_end, key, plain_block, resolve, single_quoted};
use serde_norway::{Mapping, Value};
use std::ops::Range;

mod scalar;

/// One document of a file, as libyaml counts them.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Span {
    /// All of its text, markers included: what serde_norway reads when the fast reader gives up.
    pub whole: Range<usize>,
    /// Its content without the marker lines; `None` when content shares the `---` line.
    pub body: Option<Range<usize>>,
}

/// Splits a file's text into documents at `---` and `...` lines, or `None` when the split
/// might not be libyaml's (then the whole file goes to serde_norway).
pub(crate) fn split(text: &str) -> Option<Vec<Span>> {
    // Tabs, CRs, BOMs and Unicode line breaks change what counts as an empty line.
    if text.bytes().any(|b| b == b'\t' || b == b'\r')
        || (!text.is_ascii() && text.contains(['\u{feff}', '\u{85}', '\u{2028}', '\u{2029}']))
    {
        return None;
    }
    let mut docs = Vec::new();
    // The open document: where it starts, where its content starts, whether `---` opened it
    // (then it is a document even if empty) and whether its marker line is free of content.
    let (mut start, mut body, mut explicit, mut clean) = (0, 0, false, true);
    let mut pos = 0;
    while pos < text.len() {
        let end = text[pos..].find('\n').map_or(text.len(), |n| pos + n);
        let next = (end + 1).min(text.len());
        let line = &text[pos..end];
        let marker = line.len() >= 3 && (line.len() == 3 || line.as_bytes()[3] == b' ');
        if marker && line.starts_with("---") {
            close(&mut docs, text, start..pos, body..pos, explicit, clean)?;
            (start, body, explicit) = (pos, next, true);
            clean = blank(&line[3..]);
        } else if marker && line.starts_with("...") {
            if !blank(&line[3..]) || !(explicit || has_content(&text[body..pos])) {
                return None;
            }
            close(&mut docs, text, start..next, body..pos, explicit, clean)?;
            (start, body, explicit, clean) = (next, next, false, true);
        } else if line.starts_with('%') {
            return None;
        }
        pos = next;
    }
    close(&mut docs, text, start..text.len(), body..text.len(), explicit, clean)?;
    Some(docs)
}

/// Ends the open document: `---` makes one even if empty, otherwise only content does, and
/// only at the start of the file (libyaml wants `---` before any later document, `...` or not).
fn close(
    docs: &mut Vec<Span>,
    text: &str,
    whole: Range<usize>,
    body: Range<usize>,
    explicit: bool,
    clean: bool,
) -> Option<()> {
    if explicit || has_content(&text[body.clone()]) {
        if !explicit && whole.start != 0 {
            return None;
        }
        docs.push(Span { whole, body: clean.then_some(body) });
    }
    Some(())
}

/// Whether any line holds more than spaces and a comment.
fn has_content(text: &str) -> bool {
    text.split('\n').any(|line| !blank(line))
}

/// Only spaces, then perhaps a comment (callers see to it that a space or the line's start
/// precedes the `#`).
fn blank(rest: &str) -> bool {
    let content = rest.trim_start_matches(' ');
    content.is_empty() || content.starts_with('#')
}

/// Reads one document's content (a `Span::body`), or `None` when it is outside the subset.
pub(crate) fn read(body: &str) -> Option<Value> {
    if !printable(body) {
        return None;
    }
    let mut r = Reader { pos: 0, next: 0, depth: 0 };
    let value = match r.peek(body) {
        None => Value::Null,
        Some((indent, line)) => {
            r.consume();
            r.block_node(body, indent, line).ok()?
        }
    };
    r.peek(body).is_none().then_some(value)
}

/// The characters libyaml reads as themselves; the rest it rejects or reads as line breaks.
fn printable(text: &str) -> bool {
    text.bytes().all(|b| b == b'\n' || (b' '..=b'~').contains(&b))
        || text.chars().all(|c| {
            matches!(c, '\n' | ' '..='~' | '\u{a0}'..='\u{d7ff}' | '\u{e000}'..='\u{fefe}' | '\u{ff00}'..='\u{fffd}' | '\u{10000}'..)
                && c != '\u{2028}'
                && c != '\u{2029}'
        })
}

/// Outside the subset: the document goes to serde_norway.
pub(super) struct Unsupported;

pub(super) type Read<T> = Result<T, Unsupported>;

/// serde_norway's recursion limit is 128; deeper documents are its to reject.
const MAX_DEPTH: usize = 64;

/// A cursor over the lines of a document's content.
struct Reader {
    pos: usize,
    next: usize,
    depth: usize,
}

impl Reader {
    /// The next line with content, as (indentation, line), skipping blank and comment lines.
    fn peek<'a>(&mut self, text: &'a str) -> Option<(usize, &'a str)> {
        while self.pos < text.len() {
            let rest = &text[self.pos..];
            let len = rest.find('\n').unwrap_or(rest.len());
            let line = &rest[..len];
            let content = line.trim_start_matches(' ');
            if content.is_empty() || content.starts_with('#') {
                self.pos += len + 1;
                continue;
            }
            self.next = self.pos + len + 1;
            return Some((line.len() - content.len(), line));
        }
        None
    }

    fn consume(&mut self) {
        self.pos = self.next;
    }

    fn enter(&mut self) -> Read<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH { Err(Unsupported) } else { Ok(()) }
    }

    /// A block sequence or mapping starting at column `col` of `line`.
    fn block_node(&mut self, text: &str, col: usize, line: &str) -> Read<Value> {
        let s = &line[col..];
        if seq_item(s) {
            return self.block_seq(text, col, line);
        }
        match key(s)? {
            Some(first) => self.block_mapping(text, col, first),
            None => Err(Unsupported),
        }
    }

    fn block_seq(&mut self, text: &str, col: usize, first: &str) -> Read<Value> {
        self.enter()?;
        let mut items = Vec::new();
        let mut line = first;
        loop {
            items.push(self.item(text, col, line)?);
            match self.peek(text) {
                Some((indent, next)) if indent == col && seq_item(&next[col..]) => {
                    self.consume();
                    line = next;
                }
                Some((indent, _)) if indent > col => return Err(Unsupported),
                _ => break,
            }
        }
        self.depth -= 1;
        Ok(Value::Sequence(items))
    }

    /// The item of the `- ` at column `col` of `line`.
    fn item(&mut self, text: &str, col: usize, line: &str) -> Read<Value> {
        let content = line[col + 1..].trim_start_matches(' ');
        let inner = line.len() - content.len();
        if content.is_empty() || content.starts_with('#') {
            return self.below(text, col, false);
        }
        if seq_item(content) {
            return self.block_seq(text, inner, line);
        }
        match key(content)? {
            Some(first) => self.block_mapping(text, inner, first),
            None => self.inline(content),
        }
    }

    fn block_mapping(&mut self, text: &str, col: usize, first: (String, &str)) -> Read<Value> {
        self.enter()?;
        let mut map = Mapping::new();
        let (mut name, mut after) = first;
        loop {
            let content = after.trim_start_matches(' ');
            let value = if content.is_empty() || content.starts_with('#') {
                self.below(text, col, true)?
            } else {
                self.inline(content)?
            };
            if map.insert(Value::String(name), value).is_some() {
                return Err(Unsupported);
            }
            match self.peek(text) {
                Some((indent, line)) if indent == col => {
                    self.consume();
                    let (next_name, next_after) = key(&line[col..])?.ok_or(Unsupported)?;
                    (name, after) = (next_name, next_after);
                }
                Some((indent, _)) if indent > col => return Err(Unsupported),
                _ => break,
            }
        }
        self.depth -= 1;
        Ok(Value::Mapping(map))
    }

    /// The value of a key or `- ` at column `col` with nothing after it on its line: a node
    /// indented further on the next lines, a sequence at the key's own column, or null.
    fn below(&mut self, text: &str, col: usize, indentless: bool) -> Read<Value> {
        match self.peek(text) {
            Some((indent, line)) if indent > col => {
                self.consume();
                self.block_node(text, indent, line)
            }
            Some((indent, line)) if indentless && indent == col && seq_item(&line[col..]) => {
                self.consume();
                self.block_seq(text, col, line)
            }
            _ => Ok(Value::Null),
        }
    }

    /// A value that ends its line (`s` starts with its first character).
    fn inline(&mut self, s: &str) -> Read<Value> {
        let (value, rest) = match s.as_bytes()[0] {
            b'"' => double_quoted(s).map(|(v, rest)| (Value::String(v), rest))?,
            b'\'' => single_quoted(s).map(|(v, rest)| (Value::String(v), rest))?,
            b'[' | b'{' => self.flow(s)?,
            _ => return plain_block(s),
        };
        if blank(rest) && (rest.is_empty() || rest.starts_with(' ')) { Ok(value) } else { Err(Unsupported) }
    }

    /// A one-line flow collection; returns it and the text after it.
    fn flow<'a>(&mut self, s: &'a str) -> Read<(Value, &'a str)> {
        self.enter()?;
        let seq = s.starts_with('[');
        let close = if seq { ']' } else { '}' };
        let mut rest = s[1..].trim_start_matches(' ');
        let (mut items, mut map) = (Vec::new(), Mapping::new());
        if let Some(after) = rest.strip_prefix(close) {
            rest = after;
        } else {
            loop {
                if seq {
                    let (value, after) = self.flow_node(rest)?;
                    items.push(value);
                    rest = after;
                } else {
                    let (name, after) = flow_key(rest)?;
                    let (value, after) = self.flow_node(after.trim_start_matches(' '))?;
                    if map.insert(Value::String(name), value).is_some() {
                        return Err(Unsupported);
                    }
                    rest = after;
                }
                rest = rest.trim_start_matches(' ');
                if let Some(after) = rest.strip_prefix(',') {
                    rest = after.trim_start_matches(' ');
                    // A trailing comma, or a line break inside the collection.
                    if rest.is_empty() || rest.starts_with(close) {
                        return Err(Unsupported);
                    }
                } else if let Some(after) = rest.strip_prefix(close) {
                    rest = after;
                    break;
                } else {
                    return Err(Unsupported);
                }
            }
        }
        self.depth -= 1;
        Ok((if seq { Value::Sequence(items) } else { Value::Mapping(map) }, rest))
    }

    fn flow_node<'a>(&mut self, s: &'a str) -> Read<(Value, &'a str)> {
        match s.as_bytes().first() {
            Some(b'[' | b'{') => self.flow(s),
            Some(b'"') => double_quoted(s).map(|(v, rest)| (Value::String(v), rest)),
            Some(b'\'') => single_quoted(s).map(|(v, rest)| (Value::String(v), rest)),
            Some(_) => {
                let end = flow_plain_end(s)?;
                Ok((resolve(&s[..end])?, &s[end..]))
            }
            None => Err(Unsupported),
        }
    }
}

/// `- ` (or a lone `-`) opening a sequence item.
fn seq_item(s: &str) -> bool {
    s == "-" || s.starts_with("- ")
}

#[cfg(test)]
mod writer;

#[cfg(test)]
mod tests;
