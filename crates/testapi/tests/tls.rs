//! HTTPS: the server a pod's in-cluster configuration reaches, with its CA and a bearer token.

mod common;

use common::{service, within};
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, ListParams, ResourceExt};
use verdict_testapi::TestApiServer;

#[tokio::test]
async fn https_with_the_test_ca_and_the_token_recorded() {
    let server = TestApiServer::start_tls().await.unwrap();
    assert!(server.url().starts_with("https://127.0.0.1:"), "{}", server.url());
    server.apply(service("default", "web", &[]));
    let list = within("list", Api::<Service>::all(server.client()).list(&ListParams::default())).await.unwrap();
    assert_eq!(list.items.iter().map(|s| s.name_any()).collect::<Vec<_>>(), ["web"]);

    // A client with a bearer token and the CA, as a pod's service account gives them.
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&format!(
        "clusters: [{{name: c, cluster: {{server: {url}, certificate-authority-data: {ca}}}}}]\n\
         users: [{{name: u, user: {{token: secret-token}}}}]\n\
         contexts: [{{name: x, context: {{cluster: c, user: u}}}}]\ncurrent-context: x\n",
        url = server.url(),
        ca = data_encoding::BASE64.encode(TestApiServer::TLS_CA_PEM.as_bytes()),
    ))
    .unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.unwrap();
    let client = kube::Client::try_from(config).unwrap();
    within("get", Api::<Service>::namespaced(client, "default").get("web")).await.unwrap();
    let last = server.requests().pop().unwrap();
    assert_eq!(last.authorization.as_deref(), Some("Bearer secret-token"));

    // Without the CA the server's certificate is not trusted.
    let untrusting = kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
    let refused = within("get", Api::<Service>::namespaced(untrusting, "default").get("web")).await;
    assert!(refused.is_err(), "{refused:?}");
}
