//! JSON manifest files, such as `kubectl get services,endpointslices,nodes -A -o json`: one
//! object or a `List`, whose items are decoded one at a time as the parser reaches them, so a
//! cluster's dump of hundreds of megabytes never exists as one tree in memory.

use crate::manifest_objects::{Manifests, add_object, manifest_problem};
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use std::fmt;

/// Reads the JSON text of one file (`origin` names it in problems).
pub fn parse_into(out: &mut Manifests, origin: &str, text: &str) {
    let mut de = serde_json::Deserializer::from_str(text);
    let rest = match de.deserialize_map(TopLevel { out: &mut *out, origin }) {
        Ok(rest) => rest,
        Err(e) => return out.problems.push(manifest_problem(origin, Some(0), format!("not valid JSON: {e}"))),
    };
    if let Err(e) = de.end() {
        out.problems.push(manifest_problem(origin, Some(0), format!("not valid JSON: {e}")));
    }
    // An object that is not a List (it had no `items`): decoded whole.
    if let Some(object) = rest {
        add_object(out, origin, 0, serde_json::Value::Object(object));
    }
}

/// The top-level object: `items` streamed, every other field kept.
struct TopLevel<'a> {
    out: &'a mut Manifests,
    origin: &'a str,
}

impl<'de> Visitor<'de> for TopLevel<'_> {
    type Value = Option<serde_json::Map<String, serde_json::Value>>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Kubernetes object or List")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut fields = serde_json::Map::new();
        let mut listed = false;
        while let Some(key) = map.next_key::<String>()? {
            if key == "items" {
                map.next_value_seed(Items { out: &mut *self.out, origin: self.origin })?;
                listed = true;
            } else {
                fields.insert(key, map.next_value()?);
            }
        }
        Ok((!listed).then_some(fields))
    }
}

/// The items of a List, each decoded as soon as it is parsed.
struct Items<'a> {
    out: &'a mut Manifests,
    origin: &'a str,
}

impl<'de> DeserializeSeed<'de> for Items<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<(), D::Error> {
        de.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Items<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of Kubernetes objects")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(item) = seq.next_element::<serde_json::Value>()? {
            add_object(self.out, self.origin, 0, item);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kubectl_list_and_a_single_object() {
        let list = r#"{"apiVersion":"v1","kind":"List","metadata":{"resourceVersion":""},"items":[
            {"apiVersion":"v1","kind":"Service","metadata":{"name":"web","namespace":"shop"},
             "spec":{"clusterIP":"10.96.0.10","ports":[{"name":"http","port":80,"protocol":"TCP"}]}},
            {"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice",
             "metadata":{"name":"web-1","namespace":"shop","labels":{"kubernetes.io/service-name":"web"}},
             "addressType":"IPv4","ports":[{"name":"http","port":8080,"protocol":"TCP"}],
             "endpoints":[{"addresses":["10.244.1.10"],"conditions":{"ready":true}}]},
            {"apiVersion":"v1","kind":"Service","metadata":{"name":"broken","namespace":"shop"},"spec":{"ports":7}}
        ]}"#;
        let mut m = Manifests::default();
        parse_into(&mut m, "dump.json", list);
        assert_eq!(m.services.len(), 1);
        assert_eq!(m.services[0].cluster_ips, ["10.96.0.10"]);
        assert_eq!(m.slices.len(), 1);
        assert_eq!(m.slices[0].service_name, "web");
        assert_eq!(m.problems.len(), 1, "{:?}", m.problems);
        assert!(m.problems[0].to_string().contains("Service \"broken\""), "{}", m.problems[0]);

        let mut one = Manifests::default();
        parse_into(&mut one, "node.json", r#"{"apiVersion":"v1","kind":"Node","metadata":{"name":"n1"}}"#);
        assert_eq!(one.nodes.len(), 1);
        assert!(one.problems.is_empty(), "{:?}", one.problems);
    }

    #[test]
    fn broken_json_is_one_problem_not_a_panic() {
        for text in ["", "{", "[1,2]", r#"{"kind":"List","items":[{"kind":"Service"#, "{} trailing"] {
            let mut m = Manifests::default();
            parse_into(&mut m, "bad.json", text);
            assert!(!m.problems.is_empty(), "{text:?} must be reported");
            assert!(m.services.is_empty());
        }
    }
}
