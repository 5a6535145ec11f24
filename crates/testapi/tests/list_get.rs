//! LIST and GET through the real kube client: typed decoding, namespaces, selectors, errors,
//! metadata-only lists, discovery and kubeconfig.

mod common;

use common::{endpoint_slice, node, service, within};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{ServiceCIDR, ServiceCIDRSpec};
use kube::api::{Api, ListParams, ObjectMeta, ResourceExt};
use verdict_testapi::{TestApiServer, Verb};

fn names<K: ResourceExt>(items: impl IntoIterator<Item = K>) -> Vec<String> {
    items.into_iter().map(|k| k.name_any()).collect()
}

#[tokio::test]
async fn list_and_get_services_nodes_and_slices() {
    let server = TestApiServer::start().await.unwrap();
    let rv_a = server.apply(service("default", "a", &[]));
    server.apply(service("default", "b", &[]));
    server.apply(service("other", "c", &[]));
    server.apply(node("node1"));
    server.apply(node("node2"));
    server.apply(endpoint_slice("default", "a-x1", "a", "10.0.0.1"));
    server.apply(endpoint_slice("other", "c-x1", "c", "10.0.0.2"));
    let client = server.client();

    let all = within("list", Api::<Service>::all(client.clone()).list(&ListParams::default())).await.unwrap();
    assert_eq!(names(all.items.clone()), ["a", "b", "c"]);
    assert_eq!(all.metadata.resource_version, Some(server.resource_version().to_string()));
    assert_eq!(all.items[0].metadata.resource_version, Some(rv_a.to_string()));
    assert!(all.items.iter().all(|s| s.metadata.uid.is_some() && s.metadata.creation_timestamp.is_some()));

    let default = Api::<Service>::namespaced(client.clone(), "default");
    assert_eq!(names(within("list", default.list(&ListParams::default())).await.unwrap()), ["a", "b"]);
    let a = within("get", default.get("a")).await.unwrap();
    assert_eq!(a.spec.unwrap().ports.unwrap()[0].port, 80);
    assert!(within("get_opt", default.get_opt("missing")).await.unwrap().is_none());
    match within("get", default.get("missing")).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 404);
            assert_eq!(status.reason, "NotFound");
        }
        other => panic!("expected a 404 Status, got {other:?}"),
    }

    let nodes = Api::<Node>::all(client.clone());
    assert_eq!(names(within("list", nodes.list(&ListParams::default())).await.unwrap()), ["node1", "node2"]);
    assert_eq!(within("get", nodes.get("node2")).await.unwrap().name_any(), "node2");

    let slices = within("list", Api::<EndpointSlice>::all(client.clone()).list(&ListParams::default())).await.unwrap();
    assert_eq!(names(slices), ["a-x1", "c-x1"]);
    let other_slices = Api::<EndpointSlice>::namespaced(client.clone(), "other");
    let by_service = ListParams::default().labels("kubernetes.io/service-name=c");
    let found = within("list", other_slices.list(&by_service)).await.unwrap();
    assert_eq!(found.items[0].endpoints[0].addresses, ["10.0.0.2"]);

    let gets: Vec<_> = server.requests().into_iter().filter(|r| r.verb == Verb::Get).map(|r| r.path).collect();
    assert_eq!(gets[0], "/api/v1/namespaces/default/services/a");
}

#[tokio::test]
async fn label_and_field_selectors() {
    let server = TestApiServer::start().await.unwrap();
    server.apply(service("default", "plain", &[("app", "web")]));
    server.apply(service("default", "headless", &[("service.kubernetes.io/headless", "")]));
    server.apply(service("default", "foreign", &[("service.kubernetes.io/service-proxy-name", "other-proxy")]));
    server.apply(service("kube-system", "dns", &[("app", "dns")]));
    server.apply(node("node1"));
    server.apply(node("node2"));
    let client = server.client();
    let services = Api::<Service>::all(client.clone());

    let proxied =
        ListParams::default().labels("!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless");
    assert_eq!(names(within("list", services.list(&proxied)).await.unwrap()), ["plain", "dns"]);
    let web = ListParams::default().labels("app=web");
    assert_eq!(names(within("list", services.list(&web)).await.unwrap()), ["plain"]);
    let not_web = ListParams::default().labels("app!=web");
    assert_eq!(names(within("list", services.list(&not_web)).await.unwrap()), ["foreign", "headless", "dns"]);
    let set = ListParams::default().labels("app in (web,dns)");
    assert_eq!(names(within("list", services.list(&set)).await.unwrap()), ["plain", "dns"]);
    let by_ns = ListParams::default().fields("metadata.namespace!=default");
    assert_eq!(names(within("list", services.list(&by_ns)).await.unwrap()), ["dns"]);

    let nodes = Api::<Node>::all(client.clone());
    let node1 = ListParams::default().fields("metadata.name=node1");
    assert_eq!(names(within("list", nodes.list(&node1)).await.unwrap()), ["node1"]);
    let not_node1 = ListParams::default().fields("metadata.name!=node1");
    assert_eq!(names(within("list", nodes.list(&not_node1)).await.unwrap()), ["node2"]);

    // The real server rejects selectors it cannot evaluate with 400 rather than ignoring them.
    let bad = ListParams::default().fields("spec.nonsense=1");
    match within("list", nodes.list(&bad)).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 400),
        other => panic!("expected 400, got {other:?}"),
    }
    let bad = ListParams::default().labels("app in ()");
    assert!(matches!(within("list", services.list(&bad)).await, Err(kube::Error::Api(s)) if s.code == 400));
}

#[tokio::test]
async fn cluster_scoped_service_cidrs_and_metadata_lists() {
    let server = TestApiServer::start().await.unwrap();
    server.apply(ServiceCIDR {
        metadata: ObjectMeta { name: Some("kubernetes".into()), ..Default::default() },
        spec: Some(ServiceCIDRSpec { cidrs: Some(vec!["10.96.0.0/16".into()]) }),
        status: None,
    });
    server.apply(service("default", "web", &[("app", "web")]));
    let client = server.client();

    let cidrs = within("list", Api::<ServiceCIDR>::all(client.clone()).list(&ListParams::default())).await.unwrap();
    assert_eq!(cidrs.items[0].spec.as_ref().unwrap().cidrs.as_ref().unwrap(), &["10.96.0.0/16"]);
    let paths: Vec<_> = server.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(paths, ["/apis/networking.k8s.io/v1/servicecidrs"]);

    // `Api::list_metadata` asks for PartialObjectMetadataList in the Accept header.
    let meta = within("list", Api::<Service>::all(client.clone()).list_metadata(&ListParams::default())).await.unwrap();
    assert_eq!(meta.items.len(), 1);
    assert_eq!(meta.items[0].metadata.labels.as_ref().unwrap()["app"], "web");
    assert_eq!(meta.types.kind, "PartialObjectMetadataList");
}

#[tokio::test]
async fn unknown_paths_discovery_and_kubeconfig() {
    let server = TestApiServer::start().await.unwrap();
    server.apply(service("default", "web", &[]));

    let version = within("version", server.client().apiserver_version()).await.unwrap();
    assert_eq!(version.major, "1");
    let groups = within("groups", server.client().list_api_groups()).await.unwrap();
    assert!(groups.groups.iter().any(|g| g.name == "discovery.k8s.io"));
    let core = within("core", server.client().list_core_api_resources("v1")).await.unwrap();
    assert!(core.resources.iter().any(|r| r.name == "services" && r.namespaced));

    // A resource the server does not serve: 404 with a Status body.
    let pods = Api::<k8s_openapi::api::core::v1::Pod>::all(server.client());
    match within("list", pods.list(&ListParams::default())).await {
        Err(kube::Error::Api(status)) => assert_eq!((status.code, status.reason.as_str()), (404, "NotFound")),
        other => panic!("expected 404, got {other:?}"),
    }

    // A kubeconfig written for the agent works with kube's own loader.
    let dir = std::env::temp_dir().join(format!("verdict-testapi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("kubeconfig");
    server.write_kubeconfig(&path).unwrap();
    let kubeconfig = kube::config::Kubeconfig::read_from(&path).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.unwrap();
    assert_eq!(config.default_namespace, "default");
    let client = kube::Client::try_from(config).unwrap();
    let web = within("get", Api::<Service>::default_namespaced(client).get("web")).await.unwrap();
    assert_eq!(web.name_any(), "web");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn shutdown_ends_watches_and_refuses_connections() {
    let server = TestApiServer::start().await.unwrap();
    let api = Api::<Service>::all(server.client());
    let rv = server.resource_version().to_string();
    let mut watch = within("watch", api.watch(&kube::api::WatchParams::default(), &rv)).await.unwrap().boxed();
    server.shutdown();
    // The open watch ends (cleanly or with a transport error), and nothing is served any more.
    loop {
        match within("the watch to end", watch.next()).await {
            None | Some(Err(_)) => break,
            Some(Ok(event)) => assert!(matches!(event, kube::api::WatchEvent::Bookmark(_)), "{event:?}"),
        }
    }
    assert!(within("list", api.list(&ListParams::default())).await.is_err());
}

/// As the API server writes them (kubernetes#3030): a JSON list's items have no `kind` and
/// `apiVersion`, only the list has; a watch event's object has both, and otherwise the same.
#[tokio::test]
async fn list_items_go_without_their_type_and_watch_objects_with_it() {
    let server = TestApiServer::start().await.unwrap();
    server.apply(service("default", "a", &[]));
    server.apply(endpoint_slice("default", "a-x1", "a", "10.0.0.1"));
    let client = server.client();
    let get = |uri: String| http::Request::get(uri).body(Vec::new()).unwrap();
    for (path, kind, api_version) in [
        ("/api/v1/services", "Service", "v1"),
        ("/apis/discovery.k8s.io/v1/endpointslices", "EndpointSlice", "discovery.k8s.io/v1"),
    ] {
        let list = within("list", client.request_text(get(path.to_string()))).await.unwrap();
        let list: serde_json::Value = serde_json::from_str(&list).unwrap();
        assert_eq!(
            (list["kind"].as_str(), list["apiVersion"].as_str()),
            (Some(&*format!("{kind}List")), Some(api_version))
        );
        let item = &list["items"][0];
        assert!(item.get("kind").is_none() && item.get("apiVersion").is_none(), "{item}");
        assert!(item["metadata"]["name"].is_string(), "{item}");

        let watch = format!("{path}?watch=true&resourceVersion=0&timeoutSeconds=1");
        let events = within("watch", client.request_text(get(watch))).await.unwrap();
        let event: serde_json::Value = serde_json::from_str(events.lines().next().unwrap()).unwrap();
        assert_eq!(event["type"], "ADDED");
        let mut object = event["object"].clone();
        let fields = object.as_object_mut().unwrap();
        assert_eq!(fields.remove("kind").as_ref().and_then(|k| k.as_str()), Some(kind));
        assert_eq!(fields.remove("apiVersion").as_ref().and_then(|v| v.as_str()), Some(api_version));
        assert_eq!(&object, item);
    }
}
