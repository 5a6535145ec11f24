//! Label and field selectors, with the real API server's grammar and matching rules.
//!
//! Label selectors support the full set-based syntax kube-client can produce
//! (`key`, `!key`, `=`, `==`, `!=`, `in (..)`, `notin (..)`, `>`, `<`); field selectors
//! support `=`, `==`, `!=` on `metadata.name`, `metadata.namespace` and the few
//! type-specific fields the API server indexes. Both are ANDed over commas.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::resource::ResourceType;
use crate::status::ApiError;

/// Everything that decides whether one object is visible to one list or watch request.
#[derive(Debug, Clone, Default)]
pub(crate) struct Filter {
    /// From the request path (`/namespaces/{ns}/...`); `None` = all namespaces.
    pub namespace: Option<String>,
    /// From the request path for `GET .../{name}?watch=true`.
    pub name: Option<String>,
    labels: Vec<LabelRequirement>,
    fields: Vec<FieldRequirement>,
}

impl Filter {
    /// Parses the `labelSelector` and `fieldSelector` query parameters for one resource type.
    pub fn parse(
        ty: &ResourceType,
        namespace: Option<String>,
        name: Option<String>,
        label_selector: Option<&str>,
        field_selector: Option<&str>,
    ) -> Result<Filter, ApiError> {
        let labels = match label_selector {
            Some(s) => parse_labels(s)?,
            None => Vec::new(),
        };
        let fields = match field_selector {
            Some(s) => parse_fields(ty, s)?,
            None => Vec::new(),
        };
        Ok(Filter { namespace, name, labels, fields })
    }

    /// Whether label or field selectors restrict the result (the API server then omits
    /// `remainingItemCount`, because it cannot count without filtering everything).
    pub fn has_selectors(&self) -> bool {
        !self.labels.is_empty() || !self.fields.is_empty()
    }

    /// Whether `obj` passes the path scope and both selectors.
    pub fn matches(&self, obj: &Value) -> bool {
        let meta = &obj["metadata"];
        if let Some(ns) = &self.namespace
            && meta["namespace"].as_str() != Some(ns.as_str())
        {
            return false;
        }
        if let Some(name) = &self.name
            && meta["name"].as_str() != Some(name.as_str())
        {
            return false;
        }
        let labels = meta["labels"].as_object();
        let label = |key: &str| labels.and_then(|l| l.get(key)).and_then(Value::as_str);
        self.labels.iter().all(|r| r.matches(label(&r.key)))
            && self.fields.iter().all(|r| r.matches(&field_value(obj, &r.field)))
    }
}

#[derive(Debug, Clone, PartialEq)]
enum LabelOp {
    Exists,
    DoesNotExist,
    Equals(String),
    NotEquals(String),
    In(BTreeSet<String>),
    NotIn(BTreeSet<String>),
    GreaterThan(i64),
    LessThan(i64),
}

#[derive(Debug, Clone, PartialEq)]
struct LabelRequirement {
    key: String,
    op: LabelOp,
}

impl LabelRequirement {
    fn matches(&self, value: Option<&str>) -> bool {
        match (&self.op, value) {
            (LabelOp::Exists, v) => v.is_some(),
            (LabelOp::DoesNotExist, v) => v.is_none(),
            (LabelOp::Equals(want), Some(v)) => v == want,
            // `!=` and `notin` also select objects that do not have the label at all.
            (LabelOp::NotEquals(want), v) => v != Some(want.as_str()),
            (LabelOp::In(set), Some(v)) => set.contains(v),
            (LabelOp::NotIn(set), v) => v.is_none_or(|v| !set.contains(v)),
            (LabelOp::GreaterThan(n), Some(v)) => v.parse::<i64>().is_ok_and(|v| v > *n),
            (LabelOp::LessThan(n), Some(v)) => v.parse::<i64>().is_ok_and(|v| v < *n),
            (_, None) => false,
        }
    }
}

fn parse_labels(selector: &str) -> Result<Vec<LabelRequirement>, ApiError> {
    if selector.trim().is_empty() {
        return Ok(Vec::new());
    }
    split_top_level(selector)
        .into_iter()
        .map(|term| {
            parse_label_term(term.trim()).ok_or_else(|| {
                ApiError::bad_request(format!("unable to parse requirement: found '{term}' in label selector"))
            })
        })
        .collect()
}

/// Splits on commas that are not inside the parentheses of an `in (...)` set.
fn split_top_level(s: &str) -> Vec<&str> {
    let mut terms = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                terms.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&s[start..]);
    terms
}

fn parse_label_term(term: &str) -> Option<LabelRequirement> {
    if let Some(key) = term.strip_prefix('!') {
        let key = key.trim();
        return valid_key(key).then(|| LabelRequirement { key: key.to_string(), op: LabelOp::DoesNotExist });
    }
    let key_end = term.find([' ', '=', '!', '(', '<', '>']).unwrap_or(term.len());
    let key = &term[..key_end];
    if !valid_key(key) {
        return None;
    }
    let rest = term[key_end..].trim_start();
    let single = |v: &str| {
        let v = v.trim();
        valid_value(v).then(|| v.to_string())
    };
    let op = if rest.is_empty() {
        LabelOp::Exists
    } else if let Some(v) = rest.strip_prefix("==") {
        LabelOp::Equals(single(v)?)
    } else if let Some(v) = rest.strip_prefix("!=") {
        LabelOp::NotEquals(single(v)?)
    } else if let Some(v) = rest.strip_prefix('=') {
        LabelOp::Equals(single(v)?)
    } else if let Some(v) = rest.strip_prefix('>') {
        LabelOp::GreaterThan(v.trim().parse().ok()?)
    } else if let Some(v) = rest.strip_prefix('<') {
        LabelOp::LessThan(v.trim().parse().ok()?)
    } else if let Some(v) = rest.strip_prefix("notin") {
        LabelOp::NotIn(parse_set(v)?)
    } else if let Some(v) = rest.strip_prefix("in") {
        LabelOp::In(parse_set(v)?)
    } else {
        return None;
    };
    Some(LabelRequirement { key: key.to_string(), op })
}

/// `(a, b, c)`; the API server rejects an empty set.
fn parse_set(s: &str) -> Option<BTreeSet<String>> {
    let inner = s.trim().strip_prefix('(')?.strip_suffix(')')?;
    let values: BTreeSet<String> = inner.split(',').map(|v| v.trim().to_string()).collect();
    (values.iter().all(|v| valid_value(v)) && !(values.len() == 1 && values.contains(""))).then_some(values)
}

/// Label keys: an optional DNS-subdomain prefix and `/`, then a name; we check the character set.
fn valid_key(key: &str) -> bool {
    !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

/// Label values may be empty (`key=` selects the empty value).
fn valid_value(value: &str) -> bool {
    value.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

#[derive(Debug, Clone, PartialEq)]
struct FieldRequirement {
    field: String,
    value: String,
    negated: bool,
}

impl FieldRequirement {
    fn matches(&self, actual: &str) -> bool {
        (actual == self.value) != self.negated
    }
}

fn parse_fields(ty: &ResourceType, selector: &str) -> Result<Vec<FieldRequirement>, ApiError> {
    if selector.trim().is_empty() {
        return Ok(Vec::new());
    }
    split_unescaped(selector, ',')
        .into_iter()
        .map(|term| {
            let (field, value, negated) = if let Some((f, v)) = term.split_once("!=") {
                (f, v, true)
            } else if let Some((f, v)) = term.split_once("==") {
                (f, v, false)
            } else if let Some((f, v)) = term.split_once('=') {
                (f, v, false)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{selector}'; can't understand '{term}'"
                )));
            };
            let field = field.trim();
            if field != "metadata.name" && field != "metadata.namespace" && !ty.extra_fields.contains(&field) {
                return Err(ApiError::bad_request(format!("field label not supported: {field}")));
            }
            Ok(FieldRequirement { field: field.to_string(), value: unescape(value.trim()), negated })
        })
        .collect()
}

/// Field selector values may contain `\,` and `\=`; split only on unescaped separators.
fn split_unescaped(s: &str, sep: char) -> Vec<String> {
    let mut terms = vec![String::new()];
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                let last = terms.last_mut().expect("never empty");
                last.push('\\');
                if let Some(next) = chars.next() {
                    last.push(next);
                }
            }
            c if c == sep => terms.push(String::new()),
            c => terms.last_mut().expect("never empty").push(c),
        }
    }
    terms
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        out.push(if c == '\\' { chars.next().unwrap_or('\\') } else { c });
    }
    out
}

/// The string the API server compares a field selector against: absent fields are "",
/// booleans are "true"/"false" (and an absent `spec.unschedulable` is Go's zero value, false).
fn field_value(obj: &Value, path: &str) -> String {
    let value = path.split('.').try_fold(obj, |v, key| v.get(key));
    match value {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Bool(b)) => b.to_string(),
        Some(Value::Number(n)) => n.to_string(),
        None | Some(Value::Null) if path == "spec.unschedulable" => "false".to_string(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn svc(labels: Value) -> Value {
        json!({"metadata": {"name": "web", "namespace": "default", "labels": labels}, "spec": {"clusterIP": "10.0.0.1"}})
    }

    fn services() -> ResourceType {
        ResourceType::of::<k8s_openapi::api::core::v1::Service>()
    }

    fn labels_match(selector: &str, labels: Value) -> bool {
        Filter::parse(&services(), None, None, Some(selector), None).unwrap().matches(&svc(labels))
    }

    #[test]
    fn equality_and_existence() {
        assert!(labels_match("app=web", json!({"app": "web"})));
        assert!(labels_match("app==web", json!({"app": "web"})));
        assert!(!labels_match("app=web", json!({"app": "db"})));
        assert!(labels_match("app!=web", json!({})));
        assert!(!labels_match("app!=web", json!({"app": "web"})));
        assert!(labels_match("app", json!({"app": ""})));
        assert!(!labels_match("app", json!({})));
        assert!(labels_match("!app", json!({})));
        assert!(labels_match("app=", json!({"app": ""})));
    }

    #[test]
    fn proxy_name_and_headless_exclusion() {
        let sel = "!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless";
        assert!(labels_match(sel, json!({"app": "x"})));
        assert!(!labels_match(sel, json!({"service.kubernetes.io/headless": ""})));
        assert!(!labels_match(sel, json!({"service.kubernetes.io/service-proxy-name": "other"})));
    }

    #[test]
    fn set_based() {
        assert!(labels_match("env in (prod, staging),tier notin (db)", json!({"env": "prod", "tier": "web"})));
        assert!(!labels_match("env in (prod,staging)", json!({"env": "dev"})));
        assert!(labels_match("env notin (prod)", json!({})));
        assert!(labels_match("n>3", json!({"n": "4"})));
        assert!(!labels_match("n<3", json!({"n": "x"})));
    }

    #[test]
    fn rejects_garbage() {
        for bad in ["app=a b", "=x", "env in ()", "env in prod", "a,,b", "a~b"] {
            assert!(Filter::parse(&services(), None, None, Some(bad), None).is_err(), "{bad}");
        }
    }

    #[test]
    fn field_selectors() {
        let parse = |s| Filter::parse(&services(), None, None, None, Some(s));
        assert!(parse("metadata.name=web").unwrap().matches(&svc(json!({}))));
        assert!(!parse("metadata.name!=web").unwrap().matches(&svc(json!({}))));
        assert!(parse("metadata.namespace==default,spec.clusterIP=10.0.0.1").unwrap().matches(&svc(json!({}))));
        assert_eq!(parse("spec.nope=1").unwrap_err().code, 400);
        let node = ResourceType::of::<k8s_openapi::api::core::v1::Node>();
        let f = Filter::parse(&node, None, None, None, Some("spec.unschedulable=false")).unwrap();
        assert!(f.matches(&json!({"metadata": {"name": "n"}, "spec": {}})));
    }
}
