# verdict's image: built in a Rust stage, shipped on a slim Debian with the two C libraries it
# links (libnftnl, libmnl), plus iptables and ipset for removing upstream kube-proxy's
# leftovers. `cargo xtask image` builds it with docker or podman.
ARG RUST_VERSION=1.95
ARG DEBIAN=bookworm

FROM docker.io/library/rust:${RUST_VERSION}-${DEBIAN} AS build
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends pkg-config libnftnl-dev libmnl-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p verdict-agent -p verdict-e2e --bin verdict --bin verdict-echo \
 && install -m 0755 target/release/verdict /verdict \
 && install -m 0755 target/release/verdict-echo /verdict-echo

# The kind e2e run's test pods: an echo server that answers with its name, and its prober
# (`docker build --target e2e-echo -t verdict-echo:dev .`). Not part of the shipped image.
FROM docker.io/library/debian:${DEBIAN}-slim AS e2e-echo
COPY --from=build /verdict-echo /usr/local/bin/verdict-echo
ENTRYPOINT ["/usr/local/bin/verdict-echo"]

FROM docker.io/library/debian:${DEBIAN}-slim AS runtime
ARG VERSION=dev
LABEL org.opencontainers.image.title="verdict" \
      org.opencontainers.image.description="An nftables-native Kubernetes Service proxy: a drop-in replacement for kube-proxy" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="https://github.com/verdict-proxy/verdict" \
      org.opencontainers.image.licenses="GPL-2.0-or-later"
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends libnftnl11 libmnl0 iptables ipset libcap2-bin ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /verdict /usr/local/bin/verdict
# kubeadm's DaemonSet runs `kube-proxy --config=... --hostname-override=...`: the binary
# behaves as `verdict run` under that name.
RUN ln -s verdict /usr/local/bin/kube-proxy \
 && setcap cap_net_admin,cap_net_raw+ep /usr/local/bin/verdict \
 && for t in /usr/sbin/xtables-nft-multi /usr/sbin/xtables-legacy-multi /usr/sbin/ipset; do setcap cap_net_admin,cap_net_raw+ep "$t"; done \
 && apt-get purge -y -qq libcap2-bin && apt-get autoremove -y -qq \
 && useradd --system --uid 65532 --no-create-home --shell /usr/sbin/nologin verdict
# Non-root: the capabilities come from the files above, within what the pod grants
# (NET_ADMIN, NET_RAW; see deploy/base/daemonset.yaml).
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/verdict"]
CMD ["run"]
