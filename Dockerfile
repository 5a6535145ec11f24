# verdict's image: shipped on a slim Debian with the two C libraries it links (libnftnl,
# libmnl), plus iptables and ipset for removing upstream kube-proxy's leftovers.
# `cargo xtask image` builds it with docker or podman.
#
# Two ways to get the same runtime image:
#   --target runtime            compiles verdict in a Rust stage (BUILD_IMAGE)
#   --target runtime-prebuilt   takes a verdict binary built on the host, at target/image/verdict
#                               (`cargo xtask image --prebuilt` puts it there; needs BuildKit,
#                               as the legacy builder also builds every earlier stage)
# Both base images are build arguments, so a locally made base works without a registry
# (`cargo xtask image --base-from-debootstrap`, see docs/operations.md).
ARG BUILD_IMAGE=docker.io/library/rust:1.95-bookworm
ARG RUNTIME_BASE=docker.io/library/debian:bookworm-slim

# The CA bundle alone, for an API server whose kubeconfig names no CA: ca-certificates would
# bring openssl (8 MB) into the image.
FROM ${RUNTIME_BASE} AS certs
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends ca-certificates

# Everything of the runtime image but verdict itself.
FROM ${RUNTIME_BASE} AS runtime-base
ARG VERSION=dev
LABEL org.opencontainers.image.title="verdict" \
      org.opencontainers.image.description="An nftables-native Kubernetes Service proxy: a drop-in replacement for kube-proxy" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="https://github.com/verdict-proxy/verdict" \
      org.opencontainers.image.licenses="GPL-2.0-or-later"
# kubeadm's DaemonSet runs `kube-proxy --config=... --hostname-override=...`: the binary
# behaves as `verdict run` under that name. setcap/getcap (libcap2-bin, 100 kB) stay, so
# that `getcap /usr/local/bin/verdict` can be asked in the image.
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends libnftnl11 libmnl0 iptables ipset libcap2-bin \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log \
 && for t in /usr/sbin/xtables-nft-multi /usr/sbin/xtables-legacy-multi /usr/sbin/ipset; do setcap cap_net_admin,cap_net_raw+ep "$t"; done \
 && ln -s verdict /usr/local/bin/kube-proxy \
 && useradd --system --uid 65532 --no-create-home --shell /usr/sbin/nologin verdict
COPY --from=certs /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
ENTRYPOINT ["/usr/local/bin/verdict"]
CMD ["run"]

FROM ${BUILD_IMAGE} AS build
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends pkg-config libnftnl-dev libmnl-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# strip: 88 MB to 14 MB (a panic still says where: locations are data, not debug info).
RUN cargo build --release --locked -p verdict-agent -p verdict-e2e --bin verdict --bin verdict-echo \
 && strip -o /verdict target/release/verdict \
 && install -m 0755 target/release/verdict-echo /verdict-echo

# The kind e2e run's test pods: an echo server that answers with its name, and its prober
# (`docker build --target e2e-echo -t verdict-echo:dev .`). Not part of the shipped image.
FROM ${RUNTIME_BASE} AS e2e-echo
COPY --from=build /verdict-echo /usr/local/bin/verdict-echo
ENTRYPOINT ["/usr/local/bin/verdict-echo"]

# Non-root: NET_ADMIN comes from the binary's file capability, within what the pod grants
# (deploy/base/daemonset.yaml, docs/operations.md); NET_RAW is only the iptables binaries'
# (iptables-legacy's raw socket, when kube-proxy's leftovers are removed), set on them above.
# Permitted only (+p): verdict makes it effective itself, and says why not when the container
# withholds it (with +e the kernel would refuse to start it, naming no cause). setcap runs in
# a stage of its own so that the shipped layers hold the binary once: BuildKit's COPY keeps
# the capability (an xattr); the legacy builder drops it, and the final RUN then sets it again.
FROM runtime-base AS caps
COPY --from=build /verdict /usr/local/bin/verdict
RUN setcap cap_net_admin+p /usr/local/bin/verdict

FROM runtime-base AS runtime
COPY --from=caps /usr/local/bin/verdict /usr/local/bin/verdict
RUN getcap /usr/local/bin/verdict | grep -q cap_net_admin || setcap cap_net_admin+p /usr/local/bin/verdict
USER 65532:65532

# The same, from a binary built on the host (target/release/verdict, stripped as above).
FROM runtime-base AS caps-prebuilt
COPY target/image/verdict /usr/local/bin/verdict
RUN setcap cap_net_admin+p /usr/local/bin/verdict

FROM runtime-base AS runtime-prebuilt
COPY --from=caps-prebuilt /usr/local/bin/verdict /usr/local/bin/verdict
RUN getcap /usr/local/bin/verdict | grep -q cap_net_admin || setcap cap_net_admin+p /usr/local/bin/verdict
USER 65532:65532
