//! The scalars and keys of the fast YAML reader: where they end, what they hold, and the type
//! serde_norway gives them.

use super::{Read, Unsupported};
use serde_norway::{Number, Value};

/// libyaml rejects a simple key longer than 1024 characters.
const MAX_KEY: usize = 1000;

/// The key at the start of `s` and the text after its `:`, `None` if `s` is not a key.
pub(super) fn key(s: &str) -> Read<Option<(String, &str)>> {
    let (name, after) = match s.as_bytes()[0] {
        b'"' | b'\'' => {
            let (name, rest) = if s.starts_with('"') { double_quoted(s)? } else { single_quoted(s)? };
            match rest.strip_prefix(':') {
                Some(after) if after.is_empty() || after.starts_with(' ') => (name, after),
                _ => return Ok(None),
            }
        }
        b'[' | b'{' => return Ok(None),
        _ => {
            plain_start(s, false)?;
            let bytes = s.as_bytes();
            let Some(colon) = (0..bytes.len())
                .take_while(|&i| !(bytes[i] == b'#' && bytes[i - 1] == b' '))
                .find(|&i| bytes[i] == b':' && bytes.get(i + 1).is_none_or(|&b| b == b' '))
            else {
                return Ok(None);
            };
            match resolve(s[..colon].trim_end_matches(' '))? {
                // A merge key is only a key to serde_norway; keep it away from anything that merges.
                Value::String(name) if name != "<<" => (name, &s[colon + 1..]),
                _ => return Err(Unsupported),
            }
        }
    };
    if s.len() - after.len() > MAX_KEY {
        return Err(Unsupported);
    }
    Ok(Some((name, after)))
}

/// A plain scalar in block context running to the end of its line (or a comment).
pub(super) fn plain_block(s: &str) -> Read<Value> {
    plain_start(s, false)?;
    let bytes = s.as_bytes();
    let mut end = s.len();
    for i in 0..bytes.len() {
        match bytes[i] {
            b':' if bytes.get(i + 1).is_none_or(|&b| b == b' ') => return Err(Unsupported),
            b'#' if bytes[i - 1] == b' ' => {
                end = i;
                break;
            }
            _ => {}
        }
    }
    resolve(s[..end].trim_end_matches(' '))
}

/// A key in a flow mapping, and the text after its `: `.
pub(super) fn flow_key(s: &str) -> Read<(String, &str)> {
    let (name, rest) = match s.as_bytes().first() {
        Some(b'"') => double_quoted(s)?,
        Some(b'\'') => single_quoted(s)?,
        Some(_) => {
            let end = flow_plain_end(s)?;
            match resolve(&s[..end])? {
                Value::String(name) => (name, &s[end..]),
                _ => return Err(Unsupported),
            }
        }
        None => return Err(Unsupported),
    };
    let rest = rest.trim_start_matches(' ');
    match rest.strip_prefix(": ") {
        Some(after) if s.len() - after.len() <= MAX_KEY => Ok((name, after)),
        _ => Err(Unsupported),
    }
}

/// Where a plain scalar in a flow collection ends (trailing spaces excluded). A `:` in it is
/// only accepted as a key's `: `; `#` never.
pub(super) fn flow_plain_end(s: &str) -> Read<usize> {
    plain_start(s, true)?;
    let bytes = s.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b',' | b'[' | b']' | b'{' | b'}' => return Ok(s[..i].trim_end_matches(' ').len()),
            b':' if bytes.get(i + 1) == Some(&b' ') => return Ok(s[..i].trim_end_matches(' ').len()),
            b':' | b'#' => return Err(Unsupported),
            _ => {}
        }
    }
    // The collection goes on on the next line.
    Err(Unsupported)
}

/// A plain scalar may not start with an indicator; `-` only before a character that makes it
/// no indicator.
fn plain_start(s: &str, flow: bool) -> Read<()> {
    let bytes = s.as_bytes();
    match bytes[0] {
        b'?' | b':' | b',' | b'[' | b']' | b'{' | b'}' | b'#' | b'&' | b'*' | b'!' | b'|' | b'>' | b'\'' | b'"'
        | b'%' | b'@' | b'`' | b' ' => Err(Unsupported),
        b'-' => match bytes.get(1) {
            None | Some(b' ' | b'#') => Err(Unsupported),
            Some(b',' | b'[' | b']' | b'{' | b'}') if flow => Err(Unsupported),
            Some(_) => Ok(()),
        },
        _ => Ok(()),
    }
}

pub(super) fn single_quoted(s: &str) -> Read<(String, &str)> {
    let mut out = String::new();
    let mut rest = &s[1..];
    loop {
        let quote = rest.find('\'').ok_or(Unsupported)?;
        out.push_str(&rest[..quote]);
        rest = &rest[quote + 1..];
        match rest.strip_prefix('\'') {
            Some(after) => {
                out.push('\'');
                rest = after;
            }
            None => return Ok((out, rest)),
        }
    }
}

pub(super) fn double_quoted(s: &str) -> Read<(String, &str)> {
    let mut out = String::new();
    let mut rest = &s[1..];
    loop {
        let at = rest.find(['"', '\\']).ok_or(Unsupported)?;
        out.push_str(&rest[..at]);
        if rest.as_bytes()[at] == b'"' {
            return Ok((out, &rest[at + 1..]));
        }
        let (c, len) = match rest.as_bytes().get(at + 1).ok_or(Unsupported)? {
            b'\\' => ('\\', 1),
            b'"' => ('"', 1),
            b'n' => ('\n', 1),
            b't' => ('\t', 1),
            b'r' => ('\r', 1),
            b'0' => ('\0', 1),
            b'a' => ('\x07', 1),
            b'b' => ('\x08', 1),
            b'e' => ('\x1b', 1),
            b'f' => ('\x0c', 1),
            b'v' => ('\x0b', 1),
            b'x' => (hex(rest, at + 2, 2)?, 3),
            b'u' => (hex(rest, at + 2, 4)?, 5),
            b'U' => (hex(rest, at + 2, 8)?, 9),
            _ => return Err(Unsupported),
        };
        out.push(c);
        rest = &rest[at + 1 + len..];
    }
}

fn hex(s: &str, at: usize, digits: usize) -> Read<char> {
    let code = s.get(at..at + digits).filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit())).ok_or(Unsupported)?;
    u32::from_str_radix(code, 16).ok().and_then(char::from_u32).ok_or(Unsupported)
}

/// The type serde_norway 0.9 gives a plain scalar, where it is certain; floats, and integers
/// in other bases or beyond 64 bits, are left to serde_norway.
pub(super) fn resolve(s: &str) -> Read<Value> {
    match s {
        "" => return Err(Unsupported),
        "null" | "Null" | "NULL" | "~" => return Ok(Value::Null),
        "true" | "True" | "TRUE" => return Ok(Value::Bool(true)),
        "false" | "False" | "FALSE" => return Ok(Value::Bool(false)),
        _ => {}
    }
    let bytes = s.as_bytes();
    let digits = s.strip_prefix('-').unwrap_or(s);
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        // A leading zero makes digits a string in YAML 1.2.
        if digits.len() > 1 && digits.starts_with('0') {
            return Ok(Value::String(s.to_string()));
        }
        let number = if digits.len() == s.len() {
            s.parse::<u64>().map(Number::from)
        } else {
            s.parse::<i64>().map(Number::from)
        };
        return number.map(Value::Number).map_err(|_| Unsupported);
    }
    // A number (in any base, or a float Rust parses) starts with a digit, a sign or a dot; has
    // only alphanumerics, signs and dots; has at most one dot; and has a sign only first or
    // after an exponent's e.
    let string = !matches!(bytes[0], b'0'..=b'9' | b'+' | b'-' | b'.')
        || !bytes.iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
        || bytes.iter().filter(|&&b| b == b'.').count() > 1
        || (1..bytes.len()).any(|i| matches!(bytes[i], b'+' | b'-') && !matches!(bytes[i - 1], b'e' | b'E'));
    if string { Ok(Value::String(s.to_string())) } else { Err(Unsupported) }
}
