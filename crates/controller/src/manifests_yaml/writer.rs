//! Documents for the fast reader's tests: generated values, and a block-style writer that
//! writes them every way Kubernetes tools and people do (and some ways that break them).

use super::printable;
use proptest::collection::vec;
use proptest::prelude::*;
use serde_norway::Value;

/// Strings that mean something else written plain, or break the structure, or need quoting.
#[rustfmt::skip]
pub(super) const TRICKY: &[&str] = &[
    "true", "True", "FALSE", "yes", "on", "1", "-1", "+1", "0x1F", "0o17", "0b101", "010", "-010", "1.5", "1e3",
    ".inf", "-.inf", ".nan", "inf", "nan", "~", "null", "Null", "NULL", "", "a: b", "a:b", "- x", "-x", "-", "#x",
    "x #y", "x#y", " lead", "trail ", "'q'", "\"dq\"", "it's", "a,b", "[x]", "{x}", "?", ":", "---", "...", "<<",
    "&a", "*a", "!t", "|", ">", "%", "@", "`", "☃", "é", "日本", "\u{1F600}", "\u{a0}", "\u{feff}", "\u{85}",
    "\u{2028}", "tab\tx", "nl\nx", "back\\slash", "10.1.0.0", "172.16.0.0/16", "fd00::1", "2026-11-25T16:24:18Z",
    "7e57a91d-0000-4000", "18446744073709551615", "18446744073709551616", "-9223372036854775808",
    "-9223372036854775809", "1_000", "-0",
];

pub(super) fn string() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(TRICKY).prop_map(String::from),
        3 => "[a-z][a-z0-9.-]{0,12}",
        1 => "[ -~]{0,10}",
        1 => any::<String>(),
    ]
}

pub(super) fn any_key() -> impl Strategy<Value = String> {
    prop_oneof![6 => "[a-zA-Z][a-zA-Z0-9./-]{0,15}", 1 => string()]
}

pub(super) fn leaf(floats: bool) -> impl Strategy<Value = Value> {
    prop_oneof![
        6 => string().prop_map(Value::String),
        2 => any::<i64>().prop_map(|i| Value::Number(i.into())),
        1 => any::<u64>().prop_map(|u| Value::Number(u.into())),
        1 => any::<bool>().prop_map(Value::Bool),
        1 => Just(Value::Null),
        if floats { 1 } else { 0 } => any::<f64>().prop_map(|f| Value::Number(f.into())),
    ]
}

pub(super) fn mapping(entries: Vec<(String, Value)>) -> Value {
    Value::Mapping(entries.into_iter().map(|(k, v)| (Value::String(k), v)).collect())
}

/// A document: a mapping of nested mappings, sequences and scalars.
pub(super) fn document(leaves: BoxedStrategy<Value>, keys: BoxedStrategy<String>) -> impl Strategy<Value = Value> {
    let inner_keys = keys.clone();
    let tree = leaves.prop_recursive(4, 40, 5, move |inner| {
        prop_oneof![
            vec(inner.clone(), 0..5).prop_map(Value::Sequence),
            vec((inner_keys.clone(), inner), 0..5).prop_map(mapping)
        ]
    });
    vec((keys, tree), 1..6).prop_map(mapping)
}

pub(super) fn small_document() -> impl Strategy<Value = Value> {
    let value = prop_oneof![
        2 => leaf(true),
        1 => vec(leaf(true), 1..3).prop_map(Value::Sequence),
        1 => vec((any_key(), leaf(true)), 1..3).prop_map(mapping),
    ];
    vec((any_key(), value), 1..3).prop_map(mapping)
}

/// How a document is written: serde_norway's emitter, or block style with these choices.
#[derive(Clone, Debug)]
pub(super) struct Style {
    /// `- ` at the key's own column under a key, not indented.
    pub indentless: bool,
    pub indent: usize,
    /// Collections of up to three scalars as `{a: b}` and `[a, b]`.
    pub flow_leaves: bool,
    /// Comment lines and trailing comments.
    pub comments: bool,
    /// Quote only what would not read back as the same string (as kubectl does), or choose
    /// plain, single or double quotes from `choices` whenever the line stays a line.
    pub kubectl: bool,
    pub choices: Vec<u8>,
}

pub(super) fn style() -> impl Strategy<Value = Style> {
    (any::<bool>(), prop::sample::select(vec![2usize, 4]), any::<bool>(), any::<bool>(), vec(any::<u8>(), 1..16))
        .prop_map(|(indentless, indent, flow_leaves, comments, choices)| Style {
            indentless,
            indent,
            flow_leaves,
            comments,
            kubectl: false,
            choices,
        })
}

struct Writer<'a> {
    style: &'a Style,
    out: String,
    turn: usize,
}

impl Writer<'_> {
    fn choice(&mut self) -> u8 {
        self.turn += 1;
        self.style.choices[self.turn % self.style.choices.len()].wrapping_add(self.turn as u8)
    }

    fn scalar(&mut self, v: &Value, flow: bool) -> String {
        match v {
            Value::Null => ["null", "~", "Null"][self.choice() as usize % 3].to_string(),
            Value::Bool(b) => b.to_string(),
            Value::Number(n) => n.to_string(),
            Value::String(s) => self.string(s, flow),
            _ => unreachable!(),
        }
    }

    fn string(&mut self, s: &str, flow: bool) -> String {
        let one_line = !s.is_empty() && !s.contains(['\n', '\r', '\t']) && printable(s);
        let plain =
            one_line && !s.starts_with(' ') && !s.ends_with(' ') && (!flow || !s.contains([',', '[', ']', '{', '}']));
        let choice = if self.style.kubectl {
            let safe =
                s.bytes().all(|b| b.is_ascii_alphanumeric() || b"./_-".contains(&b)) && !s.starts_with(['-', '.']);
            if plain && safe && serde_norway::from_str::<Value>(s).ok() == Some(Value::String(s.into())) {
                0
            } else {
                2
            }
        } else {
            self.choice() % 3
        };
        match choice {
            0 if plain => s.to_string(),
            1 if one_line => format!("'{}'", s.replace('\'', "''")),
            _ => double(s),
        }
    }

    fn small(v: &Value) -> bool {
        match v {
            Value::Sequence(s) => {
                !s.is_empty() && s.len() <= 3 && s.iter().all(|v| !v.is_sequence() && !v.is_mapping())
            }
            Value::Mapping(m) => {
                !m.is_empty() && m.len() <= 3 && m.values().all(|v| !v.is_sequence() && !v.is_mapping())
            }
            _ => false,
        }
    }

    fn flow(&mut self, v: &Value) -> String {
        match v {
            Value::Sequence(s) => {
                format!("[{}]", s.iter().map(|v| self.scalar(v, true)).collect::<Vec<_>>().join(", "))
            }
            Value::Mapping(m) => {
                let entries: Vec<String> =
                    m.iter().map(|(k, v)| format!("{}: {}", self.scalar(k, true), self.scalar(v, true))).collect();
                format!("{{{}}}", entries.join(", "))
            }
            _ => self.scalar(v, true),
        }
    }

    fn comment(&mut self) -> &'static str {
        if self.style.comments && self.choice().is_multiple_of(4) { " # c" } else { "" }
    }

    /// What follows `key:` or `- `: on the same line, or on the next lines from `col`.
    fn after(&mut self, v: &Value, col: usize, under_key: bool) {
        let nested = match v {
            Value::Mapping(m) if m.is_empty() => return self.line(" {}"),
            Value::Sequence(s) if s.is_empty() => return self.line(" []"),
            Value::Mapping(_) | Value::Sequence(_) if self.style.flow_leaves && Self::small(v) => {
                let flow = self.flow(v);
                return self.line(&format!(" {flow}"));
            }
            Value::Mapping(_) | Value::Sequence(_) => true,
            Value::Null if self.choice().is_multiple_of(3) => false,
            _ => {
                let scalar = self.scalar(v, false);
                return self.line(&format!(" {scalar}"));
            }
        };
        let comment = self.comment();
        self.line(comment);
        if nested {
            let indentless = under_key && self.style.indentless && v.is_sequence();
            self.block(v, if indentless { col } else { col + self.style.indent });
        }
    }

    fn line(&mut self, s: &str) {
        self.out.push_str(s);
        let comment = if s.is_empty() { "" } else { self.comment() };
        self.out.push_str(comment);
        self.out.push('\n');
        if self.style.comments && self.choice().is_multiple_of(8) {
            self.out.push_str("\n  # a comment line\n");
        }
    }

    /// A block mapping or sequence at column `col`, its first line's indentation included.
    fn block(&mut self, v: &Value, col: usize) {
        let pad = " ".repeat(col);
        match v {
            Value::Mapping(m) => {
                for (k, v) in m {
                    let key = self.scalar(k, false);
                    self.out.push_str(&format!("{pad}{key}:"));
                    self.after(v, col, true);
                }
            }
            Value::Sequence(s) => {
                for item in s {
                    self.out.push_str(&pad);
                    self.out.push('-');
                    let inline = (item.is_mapping() || item.is_sequence())
                        && !Self::small(item)
                        && !self.choice().is_multiple_of(3);
                    if inline
                        && item.as_mapping().is_none_or(|m| !m.is_empty())
                        && item.as_sequence().is_none_or(|s| !s.is_empty())
                    {
                        // The first entry on the `- ` line, the rest under it.
                        let mut sub = Writer { style: self.style, out: String::new(), turn: self.turn };
                        sub.block(item, col + 2);
                        self.turn = sub.turn;
                        self.out.push(' ');
                        self.out.push_str(&sub.out[col + 2..]);
                    } else {
                        self.after(item, col, false);
                    }
                }
            }
            _ => unreachable!(),
        }
    }
}

pub(super) fn double(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if printable(c.encode_utf8(&mut [0; 4])) => out.push(c),
            c if (c as u32) < 0x100 => out.push_str(&format!("\\x{:02X}", c as u32)),
            c if (c as u32) < 0x10000 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push_str(&format!("\\U{:08X}", c as u32)),
        }
    }
    out.push('"');
    out
}

pub(super) fn write(v: &Value, style: &Style) -> String {
    let mut w = Writer { style, out: String::new(), turn: 0 };
    w.block(v, 0);
    w.out
}
