//! HTTPS for [`crate::TestApiServer::start_tls`]: a fixed certificate for `127.0.0.1`, `::1`
//! and `localhost`, signed by a CA whose certificate clients trust (`tls/README.md`).

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::sync::Arc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;

/// The CA that signed the server's certificate, PEM.
pub const CA_PEM: &str = include_str!("../tls/ca.crt");
const CERT_PEM: &str = include_str!("../tls/server.crt");
const KEY_PEM: &str = include_str!("../tls/server.key");

/// The CA, DER (what `kube::Config::root_cert` holds).
pub fn ca_der() -> Vec<u8> {
    CertificateDer::from_pem_slice(CA_PEM.as_bytes()).expect("the test CA is PEM").to_vec()
}

/// An acceptor serving the test certificate (and the CA above it, as API servers send theirs).
pub fn acceptor() -> TlsAcceptor {
    let chain = [CERT_PEM, CA_PEM]
        .iter()
        .map(|pem| CertificateDer::from_pem_slice(pem.as_bytes()).expect("the test certificates are PEM"))
        .collect();
    let key = PrivateKeyDer::from_pem_slice(KEY_PEM.as_bytes()).expect("the test key is PEM");
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring offers the default protocol versions")
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .expect("the test certificate and key match");
    TlsAcceptor::from(Arc::new(config))
}
