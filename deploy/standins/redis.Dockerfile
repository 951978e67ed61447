# Stand-in for the official `redis:7-alpine` image, for machines that cannot pull it (see
# docs/docker.md): Debian's redis-server 7.0 on the local bookworm base. Like the official image
# it runs `redis-server` as the `redis` user in /data, and accepts clients from other containers
# without a password (the official image builds Redis with protected mode off).
ARG BASE_IMAGE=seckill-standin/base:bookworm
FROM ${BASE_IMAGE}

# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends redis-server redis-tools \
 && rm -rf /var/lib/apt/lists/* \
 && install -d -o redis -g redis /data

COPY redis-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
WORKDIR /data
EXPOSE 6379
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["redis-server"]
