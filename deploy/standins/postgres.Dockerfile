# Stand-in for the official `postgres:15-alpine` image, for machines that cannot pull it (see
# docs/docker.md): Debian's PostgreSQL 15 on the local bookworm base, with an entrypoint that
# does what the official one does for the settings the demo stack uses (postgres-entrypoint.sh).
ARG BASE_IMAGE=seckill-standin/base:bookworm
FROM ${BASE_IMAGE}

# The official Debian-based image does the same: no "main" cluster from the package's postinst,
# since the entrypoint creates the one cluster in $PGDATA on first start.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends postgresql-common \
 && sed -ri 's/#(create_main_cluster) .*$/\1 = false/' /etc/postgresql-common/createcluster.conf \
 && apt-get install -y --no-install-recommends postgresql-15 \
 && rm -rf /var/lib/apt/lists/* \
 && install -d -o postgres -g postgres -m 2777 /var/run/postgresql \
 && install -d -o postgres -g postgres -m 0700 /var/lib/postgresql/data

# C.UTF-8 (built into glibc): a UTF8 cluster without a locales package.
ENV PATH=/usr/lib/postgresql/15/bin:$PATH \
    PGDATA=/var/lib/postgresql/data \
    LANG=C.UTF-8
COPY postgres-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
VOLUME /var/lib/postgresql/data
# The official image's: SIGINT is PostgreSQL's "fast" shutdown.
STOPSIGNAL SIGINT
EXPOSE 5432
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["postgres"]
