# shellcheck shell=bash
# A Docker engine for the project's compose check (sourced by scripts/compose.sh, after lib.sh):
# the Debian packages, a dockerd of our own when none answers, and the local bookworm base that
# stand-in images are built on when no container registry can be reached.
#
#   docker_install                 docker.io and debootstrap from Debian, if missing
#   docker_engine_up WORKDIR       uses the engine that answers, or starts dockerd (log and pid
#                                  in WORKDIR); sets DOCKERD_PID only when it started one
#   docker_engine_down             stops the dockerd that docker_engine_up started, by its pid
#   docker_base_image NAME WORKDIR the base image NAME: debootstrap --variant=minbase bookworm
#                                  with ca-certificates and the host's own CAs, imported with
#                                  `docker import` (only if NAME is missing)
#   docker_image_present NAME      NAME is in the engine's image store
#
# DOCKER is the client to use. Debian's docker.io brings /usr/bin/docker at the engine's own
# version (20.10), whose `docker build` speaks BuildKit by itself (DOCKER_BUILDKIT=1), while a
# newer client without the buildx plugin refuses BuildKit builds ("buildx component is missing")
# and the stand-ins are built with BuildKit. So the check prefers the engine's own client when
# the engine is Debian's.

DOCKERD_PID=""
: "${DOCKER:=docker}"

docker_install() {
    if ! command -v dockerd >/dev/null 2>&1 || ! command -v debootstrap >/dev/null 2>&1; then
        # With the recommends, as checked on this machine kind (cgroupfs-mount among them).
        apt_install docker.io debootstrap
    fi
    if [[ -x /usr/bin/docker && "$(dpkg-query -W -f='${Status}' docker.io 2>/dev/null)" == *installed* ]]; then
        DOCKER=/usr/bin/docker
    fi
}

docker_answers() {
    timeout 10 "$DOCKER" info >/dev/null 2>&1
}

docker_engine_up() {
    local work="$1" deadline
    if docker_answers; then
        log "using the Docker engine that answers ($("$DOCKER" version -f '{{.Server.Version}}' 2>/dev/null))"
        return 0
    fi
    install -d "$work"
    log "starting dockerd (log: $work/dockerd.log)"
    # setsid: the engine is not in the script's process group, so a Ctrl-C reaches the script
    # (which stops it through its exit handler) rather than killing it mid-write.
    setsid dockerd >"$work/dockerd.log" 2>&1 &
    DOCKERD_PID=$!
    echo "$DOCKERD_PID" >"$work/dockerd.pid"
    deadline=$((SECONDS + 60))
    until docker_answers; do
        # By liveness, not by name: until setsid has exec'd dockerd, the child is still a bash.
        if [[ ! -e "/proc/$DOCKERD_PID" ]] || pid_zombie "$DOCKERD_PID"; then
            die_with_log "$work/dockerd.log" "dockerd exited during start-up"
        fi
        [[ $SECONDS -lt $deadline ]] || die_with_log "$work/dockerd.log" "dockerd did not answer within 60 s"
        sleep 0.5
    done
    log "dockerd is up (pid $DOCKERD_PID)"
}

docker_engine_down() {
    local pid="$DOCKERD_PID" deadline
    [[ -n "$pid" ]] || return 0
    DOCKERD_PID=""
    pid_starting "$pid" || return 0
    log "stopping dockerd (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    # dockerd stops its containers first (10 s each at most), then containerd.
    deadline=$((SECONDS + 60))
    while [[ -e "/proc/$pid" ]] && ! pid_zombie "$pid"; do
        if [[ $SECONDS -ge $deadline ]]; then
            log "ERROR: dockerd (pid $pid) still up 60 s after SIGTERM"
            return 1
        fi
        sleep 0.5
    done
}

docker_image_present() {
    "$DOCKER" image inspect "$1" >/dev/null 2>&1
}

# debian:bookworm-slim's trims, applied to the debootstrap tree before the import, and the same
# dpkg excludes for what later layers install: no manuals, documentation (but copyrights) or
# translations in the images.
docker_trim_rootfs() {
    local dir="$1"
    rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/* \
        "$dir"/usr/share/man/* "$dir"/usr/share/info/* "$dir"/usr/share/locale/*
    find "$dir/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
    cat >"$dir/etc/dpkg/dpkg.cfg.d/docker-trim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
EOF
}

# The host's own certificate authorities (/usr/local/share/ca-certificates) go into the base, so
# that what the images fetch over HTTPS (pip, cargo) passes a TLS-inspecting proxy that the host
# trusts, as it does on this machine. Without such CAs this copies nothing.
docker_trust_host_cas() {
    local dir="$1" ca
    for ca in /usr/local/share/ca-certificates/*.crt; do
        [[ -e "$ca" ]] || continue
        install -D -m 0644 "$ca" "$dir/usr/local/share/ca-certificates/${ca##*/}"
    done
    chroot "$dir" update-ca-certificates >>"${dir%/*}/debootstrap.log" 2>&1 ||
        die_with_log "${dir%/*}/debootstrap.log" "update-ca-certificates failed in the base image"
}

docker_base_image() {
    local name="$1" work="$2" rootfs
    if docker_image_present "$name"; then
        log "base image $name is present"
        return 0
    fi
    rootfs="$work/rootfs"
    rm -rf "$rootfs"
    install -d "$work"
    log "debootstrap --variant=minbase bookworm (log: $work/debootstrap.log)"
    timeout 900 debootstrap --variant=minbase --include=ca-certificates bookworm "$rootfs" \
        >"$work/debootstrap.log" 2>&1 || die_with_log "$work/debootstrap.log" "debootstrap failed"
    docker_trust_host_cas "$rootfs"
    docker_trim_rootfs "$rootfs"
    log "docker import -> $name"
    tar -C "$rootfs" -c . | "$DOCKER" import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["bash"]' - "$name" >/dev/null
    rm -rf "$rootfs"
}
