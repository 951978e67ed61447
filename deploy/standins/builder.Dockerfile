# A local stand-in for the official Rust image as deploy/Dockerfile's builder (its RUST_IMAGE
# build argument), for machines that cannot pull it (see docs/docker.md): the bookworm base, a C
# toolchain for linking and build scripts, and the host's Rust toolchain, laid out as in the
# official image (RUSTUP_HOME=/usr/local/rustup, CARGO_HOME=/usr/local/cargo, cargo on PATH),
# so that deploy/Dockerfile's cache mounts land in the same places.
#
# The build context is a directory holding `toolchain/` (a copy of a host toolchain without its
# documentation); scripts/compose.sh prepares it.
ARG BASE_IMAGE=seckill-standin/base:bookworm
FROM ${BASE_IMAGE}

# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates gcc libc6-dev make git \
 && rm -rf /var/lib/apt/lists/*

ENV RUSTUP_HOME=/usr/local/rustup \
    CARGO_HOME=/usr/local/cargo \
    PATH=/usr/local/cargo/bin:$PATH
COPY toolchain/ /usr/local/rustup/toolchains/host/
RUN mkdir -p /usr/local/cargo/bin \
 && for tool in cargo rustc rustdoc; do \
        ln -s "/usr/local/rustup/toolchains/host/bin/$tool" "/usr/local/cargo/bin/$tool"; \
    done \
 && cargo --version && rustc --version
