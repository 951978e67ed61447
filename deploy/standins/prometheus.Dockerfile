# Stand-in for the official `prom/prometheus` image, for machines that cannot pull it (see
# docs/docker.md): Debian's Prometheus 2.42 on the local bookworm base, started the way the
# official image starts it (its entrypoint and default command, its config and data paths).
# Only the server, its web assets and console templates are kept: the package's dependencies
# are JavaScript libraries that the assets link to, so the links are resolved into copies, and
# of moment-timezone (220 MB of time-zone data) only the one file the pages load is kept.
ARG BASE_IMAGE=seckill-standin/base:bookworm

FROM ${BASE_IMAGE} AS fetch
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends prometheus \
 && rm -rf /var/lib/apt/lists/*
RUN install -D -m 0755 /usr/bin/prometheus /out/usr/bin/prometheus \
 && mkdir -p /out/usr/share /out/etc/prometheus \
 && cp -RL /usr/share/prometheus /out/usr/share/prometheus \
 && cp -RL /etc/prometheus/consoles /etc/prometheus/console_libraries /out/etc/prometheus/ \
 && cd /out/usr/share/prometheus/web/static/moment-timezone \
 && find . -mindepth 1 -maxdepth 1 ! -name moment-timezone-with-data.min.js -exec rm -rf {} +

FROM ${BASE_IMAGE}
COPY --from=fetch /out/ /
RUN install -d -o nobody -g nogroup /prometheus
USER nobody
WORKDIR /prometheus
EXPOSE 9090
ENTRYPOINT ["/usr/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
