#!/usr/bin/env bash
# Bring up every real service the mesh resolver's tests need, on a Debian 12
# machine where we are root and there is no systemd:
#   Debian packages, dockerd (+ mesh-test/busybox:1 image), PostgreSQL 15,
#   RabbitMQ + management plugin, docker-registry, the nftables Python binding.
#
# Idempotent: every step checks first and only acts when something is missing
# or down. Safe to re-run; a re-run with everything up takes a few seconds.
# Prints what it does; exits non-zero with an "ERROR:" line on failure.
# At the end it writes /var/lib/mesh-test/env (KEY=value lines, no secrets).
#
# Knobs (environment):
#   MESH_TEST_RABBIT_PASSWORD         admin password for RabbitMQ user mesh-admin
#                                     (default: generated once, kept in
#                                     /var/lib/mesh-test/rabbit-admin, mode 0600)
#   MESH_TEST_DOCKER_STORAGE_DRIVER   force a dockerd storage driver (default:
#                                     overlay2, falling back to vfs)
#   MESH_TEST_CHECK_NETNS_DOCKERD=1   re-run the "dockerd inside a netns" check
#                                     (it runs by itself only on first bootstrap)
#   PYTHON                            interpreter that must import nftables
#                                     (default: python3 on PATH)
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
STATE=/var/lib/mesh-test
LOGDIR=/var/log/mesh-test
RUNDIR=/run/mesh-test
ENV_FILE=$STATE/env
PYTHON=${PYTHON:-python3}

DOCKER_SOCK=/var/run/docker.sock
DOCKER_HOST_URL=unix://$DOCKER_SOCK
# Talk to our dockerd with the client of the same version (Debian's docker.io);
# an image may carry a newer client in /usr/local/bin, which also works.
DOCKER=/usr/bin/docker
BUSYBOX_IMAGE=mesh-test/busybox:1
PG_VERSION=15
PG_CLUSTER=main
PG_HOST=127.0.0.1
PG_PORT=5432
RABBIT_USER=mesh-admin
RABBIT_PW_FILE=$STATE/rabbit-admin
RABBIT_API=http://127.0.0.1:15672
REGISTRY_ADDR=127.0.0.1:5000
REGISTRY_CONF=$STATE/registry.yml
REGISTRY_DATA=$STATE/registry
PYLIB=$STATE/pylib
APT_MAX_AGE_MIN=360

PACKAGES=(docker.io docker-compose nftables libnftables1 python3-nftables iproute2
          postgresql rabbitmq-server docker-registry busybox-static procps psmisc
          curl ca-certificates graphviz fonts-dejavu-core tcpdump
          restic)  # mesh backup / restore / backups (tests/test_backup_docker.py)

T0=$SECONDS
log()  { printf '[services +%3ss] %s\n' "$((SECONDS - T0))" "$*"; }
die()  { printf '[services +%3ss] ERROR: %s\n' "$((SECONDS - T0))" "$*" >&2; exit 1; }
show_log() { # show_log FILE: last lines of a daemon log, for failure messages
    [ -f "$1" ] && { echo "---- last lines of $1 ----" >&2; tail -n 25 "$1" >&2; echo "----" >&2; }
    return 0
}

# wait_for DESC TIMEOUT_S LOGFILE CMD...: poll CMD every second until it
# succeeds; a progress line every 5 s; on time-out show LOGFILE and fail.
wait_for() {
    local desc=$1 timeout=$2 logfile=$3; shift 3
    local start=$SECONDS next=$((SECONDS + 5))
    until "$@" >/dev/null 2>&1; do
        if (( SECONDS - start >= timeout )); then
            show_log "$logfile"
            die "$desc: not ready after ${timeout}s"
        fi
        if (( SECONDS >= next )); then
            log "  ... waiting for $desc ($((SECONDS - start))s / ${timeout}s)"
            next=$((SECONDS + 5))
        fi
        sleep 1
    done
    log "  $desc: ready after $((SECONDS - start))s"
}

# start_daemon LOGFILE CMD...: start CMD fully detached (own session, no
# inherited stdio, so a CI runner waiting for our output never waits on it).
start_daemon() {
    local logfile=$1; shift
    printf '\n==== %s: %s\n' "$(date -Is)" "$*" >>"$logfile"
    setsid -f "$@" </dev/null >>"$logfile" 2>&1
}

pid_alive() { # pid_alive PIDFILE
    local pid
    [ -s "$1" ] && pid=$(cat "$1" 2>/dev/null) && [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null \
        && [ "$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1)" != Z ]   # not a zombie
}

# write_if_changed FILE MODE < content: returns 0 if the file changed.
write_if_changed() {
    local file=$1 mode=$2 tmp
    tmp=$(mktemp "$file.XXXXXX")
    cat >"$tmp"
    chmod "$mode" "$tmp"
    if [ -f "$file" ] && cmp -s "$tmp" "$file"; then rm -f "$tmp"; return 1; fi
    mv -f "$tmp" "$file"
    return 0
}

http_code() { curl -s -o /dev/null -m 5 -w '%{http_code}' "$@" || true; }

[ "$(id -u)" = 0 ] || die "must run as root (installs packages, starts daemons)"
mkdir -p "$STATE" "$LOGDIR" "$RUNDIR"
chmod 0755 "$STATE"

# One run at a time (several sessions may share this machine). A mkdir lock,
# not flock: daemons started below would inherit a flock'ed descriptor and
# hold the lock forever.
LOCK=$RUNDIR/services.lock
lock_wait_start=$SECONDS lock_next=$SECONDS
until mkdir "$LOCK" 2>/dev/null; do
    holder=$(cat "$LOCK/pid" 2>/dev/null || true)
    if [ -n "$holder" ] && ! pid_alive "$LOCK/pid"; then
        log "removing stale lock $LOCK (pid $holder is gone)"
        rm -rf "$LOCK"; continue
    fi
    (( SECONDS - lock_wait_start < 900 )) || die "another services.sh (pid ${holder:-?}) holds $LOCK for 15 min"
    if (( SECONDS >= lock_next )); then
        log "waiting for another services.sh run (pid ${holder:-?}) to finish"
        lock_next=$((SECONDS + 10))
    fi
    sleep 1
done
echo $$ >"$LOCK/pid"
trap 'rm -rf "$LOCK"' EXIT

# --------------------------------------------------------------------------
# 1. Debian packages
# --------------------------------------------------------------------------
apt_lists_fresh() {
    # Fresh = some Release file in the lists is newer than APT_MAX_AGE_MIN.
    [ -n "$(find /var/lib/apt/lists -maxdepth 1 -name '*Release' -mmin "-$APT_MAX_AGE_MIN" -print -quit 2>/dev/null)" ]
}
apt_update() {
    log "apt-get update"
    apt-get update -q || die "apt-get update failed"
}
apt_install() {
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "$@"
}

missing=()
for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    log "packages: all ${#PACKAGES[@]} already installed"
else
    log "packages: missing ${missing[*]}"
    updated=0
    if apt_lists_fresh; then
        log "apt lists are fresher than $((APT_MAX_AGE_MIN / 60))h: skipping apt-get update"
    else
        apt_update; updated=1
    fi
    # No systemd here: keep maintainer scripts from starting services
    # (we start them ourselves below). Only install our policy if none exists.
    own_policy=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\n# mesh-test: do not start services from maintainer scripts\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod 0755 /usr/sbin/policy-rc.d
        own_policy=1
    fi
    log "apt-get install -y --no-install-recommends ${missing[*]}"
    if ! apt_install "${missing[@]}"; then
        if [ "$updated" = 0 ]; then
            log "install failed with cached lists: apt-get update and retry"
            apt_update
            apt_install "${missing[@]}" || { [ $own_policy = 1 ] && rm -f /usr/sbin/policy-rc.d; die "apt-get install failed"; }
        else
            [ $own_policy = 1 ] && rm -f /usr/sbin/policy-rc.d
            die "apt-get install failed"
        fi
    fi
    [ $own_policy = 1 ] && rm -f /usr/sbin/policy-rc.d
    log "packages: installed"
fi
[ -x /usr/lib/postgresql/$PG_VERSION/bin/postgres ] || die "PostgreSQL $PG_VERSION binaries not found under /usr/lib/postgresql/$PG_VERSION"

# --------------------------------------------------------------------------
# 2. Kernel features: network namespaces
# --------------------------------------------------------------------------
probe_ns=mesh-test-probe-$$
ip netns add "$probe_ns" || die "ip netns add failed: network namespaces unavailable"
ip -n "$probe_ns" link set lo up || { ip netns del "$probe_ns"; die "cannot configure lo in a netns"; }
ip netns del "$probe_ns" || die "ip netns del failed"
log "network namespaces: ip netns add/del works"

# --------------------------------------------------------------------------
# 3. dockerd
# --------------------------------------------------------------------------
DOCKERD_LOG=$LOGDIR/dockerd.log
DOCKERD_PID=/var/run/docker.pid
docker_ok() { "$DOCKER" -H "$DOCKER_HOST_URL" info >/dev/null 2>&1; }

start_dockerd() { # start_dockerd DRIVER
    log "dockerd: starting (storage driver $1, log $DOCKERD_LOG)"
    start_daemon "$DOCKERD_LOG" dockerd --host "$DOCKER_HOST_URL" --pidfile "$DOCKERD_PID" \
        --storage-driver "$1"
}
stop_dockerd() {
    local pid; pid=$(cat "$DOCKERD_PID" 2>/dev/null || true)
    [ -n "$pid" ] || return 0
    log "dockerd: stopping pid $pid"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || return 0; sleep 1; done
    kill -9 "$pid" 2>/dev/null || true
}
# docker_driver_works: pull nothing, just run a trivial container from an
# image built on the spot (the busybox image, built below, is used for that).
build_busybox_image() {
    local tmp rootfs applet
    tmp=$(mktemp -d); rootfs=$tmp/rootfs
    mkdir -p "$rootfs"/{bin,sbin,usr/bin,usr/sbin,etc,root,tmp,var/tmp,proc,sys,dev,run,home}
    chmod 1777 "$rootfs/tmp" "$rootfs/var/tmp"
    cp /bin/busybox "$rootfs/bin/busybox"
    /bin/busybox --list-full | while read -r applet; do
        [ "$applet" = bin/busybox ] && continue
        [ -e "$rootfs/$applet" ] || ln -s /bin/busybox "$rootfs/$applet"
    done
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$rootfs/etc/passwd"
    printf 'root:x:0:\nnogroup:x:65534:\n' >"$rootfs/etc/group"
    printf 'hosts: files dns\n' >"$rootfs/etc/nsswitch.conf"
    tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$rootfs" -cf "$tmp/rootfs.tar" .
    "$DOCKER" -H "$DOCKER_HOST_URL" import \
        --change 'CMD ["/bin/sh"]' --change 'ENV PATH=/usr/sbin:/usr/bin:/sbin:/bin' \
        --message 'mesh-test busybox (Debian busybox-static)' \
        "$tmp/rootfs.tar" "$BUSYBOX_IMAGE" >/dev/null
    rm -rf "$tmp"
}
ensure_busybox_image() {
    if "$DOCKER" -H "$DOCKER_HOST_URL" image inspect "$BUSYBOX_IMAGE" >/dev/null 2>&1; then
        log "image $BUSYBOX_IMAGE: present"
    else
        log "image $BUSYBOX_IMAGE: building (docker import of busybox-static + applet symlinks)"
        build_busybox_image || die "docker import of $BUSYBOX_IMAGE failed"
    fi
}
docker_run_ok() {
    "$DOCKER" -H "$DOCKER_HOST_URL" run --rm --name "mesh-test-probe-$$" "$BUSYBOX_IMAGE" \
        /bin/sh -c 'echo ok' 2>&1
}
current_driver() { "$DOCKER" -H "$DOCKER_HOST_URL" info --format '{{.Driver}}' 2>/dev/null || true; }

if docker_ok; then
    log "dockerd: already answering on $DOCKER_HOST_URL (driver $(current_driver))"
else
    if pid_alive "$DOCKERD_PID"; then
        log "dockerd: process $(cat $DOCKERD_PID) exists but does not answer yet"
    else
        rm -f "$DOCKERD_PID"
        if [ -n "${MESH_TEST_DOCKER_STORAGE_DRIVER:-}" ]; then
            driver=$MESH_TEST_DOCKER_STORAGE_DRIVER
        elif [ -f "$STATE/docker-storage-driver" ]; then
            driver=$(cat "$STATE/docker-storage-driver")
        else
            driver=overlay2
        fi
        start_dockerd "$driver"
    fi
    wait_for "dockerd ($DOCKER_HOST_URL)" 60 "$DOCKERD_LOG" docker_ok
fi
ensure_busybox_image
if ! out=$(docker_run_ok) || [ "$out" != ok ]; then
    driver=$(current_driver)
    if [ "$driver" != vfs ] && [ -z "${MESH_TEST_DOCKER_STORAGE_DRIVER:-}" ]; then
        log "dockerd: 'docker run' failed with driver $driver: $out"
        log "dockerd: retrying with storage driver vfs"
        stop_dockerd
        start_dockerd vfs
        wait_for "dockerd ($DOCKER_HOST_URL, vfs)" 60 "$DOCKERD_LOG" docker_ok
        ensure_busybox_image
        out=$(docker_run_ok) || true
    fi
    [ "$out" = ok ] || { show_log "$DOCKERD_LOG"; die "docker run --rm $BUSYBOX_IMAGE failed: $out"; }
fi
DOCKER_DRIVER=$(current_driver)
echo "$DOCKER_DRIVER" >"$STATE/docker-storage-driver"
log "dockerd: docker run --rm $BUSYBOX_IMAGE works (storage driver $DOCKER_DRIVER)"

# --------------------------------------------------------------------------
# 4. PostgreSQL 15 on 127.0.0.1:5432
# --------------------------------------------------------------------------
PG_ETC=/etc/postgresql/$PG_VERSION/$PG_CLUSTER
PG_LOG=/var/log/postgresql/postgresql-$PG_VERSION-$PG_CLUSTER.log
pg_ready() { /usr/lib/postgresql/$PG_VERSION/bin/pg_isready -q -h "$PG_HOST" -p "$PG_PORT"; }
pg_running() { pg_ctlcluster "$PG_VERSION" "$PG_CLUSTER" status >/dev/null 2>&1; }

if ! pg_lsclusters -h 2>/dev/null | awk '{print $1" "$2}' | grep -qx "$PG_VERSION $PG_CLUSTER"; then
    log "postgresql: creating cluster $PG_VERSION/$PG_CLUSTER"
    pg_createcluster "$PG_VERSION" "$PG_CLUSTER" --port "$PG_PORT" >/dev/null || die "pg_createcluster failed"
fi
pg_restart=0
mkdir -p "$PG_ETC/conf.d"
if write_if_changed "$PG_ETC/conf.d/mesh-test.conf" 0644 <<EOF
# written by scripts/services.sh (mesh-test)
listen_addresses = '$PG_HOST'
port = $PG_PORT
password_encryption = scram-sha-256
EOF
then
    log "postgresql: wrote $PG_ETC/conf.d/mesh-test.conf"
    pg_restart=1
fi
grep -qE "^[[:space:]]*include_dir[[:space:]]*=[[:space:]]*'conf.d'" "$PG_ETC/postgresql.conf" \
    || die "$PG_ETC/postgresql.conf does not include conf.d"
pg_reload=0
if ! grep -qE '^[[:space:]]*host[[:space:]]+all[[:space:]]+all[[:space:]]+127\.0\.0\.1/32[[:space:]]+scram-sha-256' "$PG_ETC/pg_hba.conf"; then
    log "postgresql: adding 'host all all 127.0.0.1/32 scram-sha-256' to pg_hba.conf"
    { echo "# mesh-test: password (scram) auth over loopback TCP"
      echo "host    all             all             127.0.0.1/32            scram-sha-256"
      cat "$PG_ETC/pg_hba.conf"; } >"$PG_ETC/pg_hba.conf.new"
    chown --reference="$PG_ETC/pg_hba.conf" "$PG_ETC/pg_hba.conf.new"
    chmod --reference="$PG_ETC/pg_hba.conf" "$PG_ETC/pg_hba.conf.new"
    mv -f "$PG_ETC/pg_hba.conf.new" "$PG_ETC/pg_hba.conf"
    pg_reload=1
fi
if ! grep -qE '^[[:space:]]*local[[:space:]]+all[[:space:]]+(postgres|all)[[:space:]]+peer' "$PG_ETC/pg_hba.conf"; then
    die "pg_hba.conf has no 'local all postgres peer' line"
fi

if pg_running; then
    if [ $pg_restart = 1 ]; then
        log "postgresql: restarting (configuration changed)"
        pg_ctlcluster "$PG_VERSION" "$PG_CLUSTER" restart || { show_log "$PG_LOG"; die "pg_ctlcluster restart failed"; }
    elif [ $pg_reload = 1 ]; then
        log "postgresql: reloading (pg_hba changed)"
        pg_ctlcluster "$PG_VERSION" "$PG_CLUSTER" reload
    else
        log "postgresql: cluster $PG_VERSION/$PG_CLUSTER already running"
    fi
else
    log "postgresql: pg_ctlcluster $PG_VERSION $PG_CLUSTER start"
    pg_ctlcluster "$PG_VERSION" "$PG_CLUSTER" start || { show_log "$PG_LOG"; die "pg_ctlcluster start failed"; }
fi
wait_for "postgresql ($PG_HOST:$PG_PORT)" 60 "$PG_LOG" pg_ready
runuser -u postgres -- psql -X -q -At -c 'select 1' >/dev/null \
    || die "postgresql: peer auth for OS user postgres over the unix socket fails"
# Prove scram over TCP with a throw-away role (password never printed).
probe_pw=$(head -c 24 /dev/urandom | base64 | tr -dc 'A-Za-z0-9')
runuser -u postgres -- psql -X -q -v ON_ERROR_STOP=1 -v pw="$probe_pw" >/dev/null <<'SQL' || die "postgresql: cannot create probe role"
SET client_min_messages = warning;
DROP ROLE IF EXISTS mesh_test_probe;
CREATE ROLE mesh_test_probe LOGIN PASSWORD :'pw';
SQL
scram_ok=0
PGPASSWORD=$probe_pw psql -X -q -At -h "$PG_HOST" -p "$PG_PORT" -U mesh_test_probe -d postgres \
    -c 'select 1' >/dev/null 2>&1 && scram_ok=1
runuser -u postgres -- psql -X -q -c 'DROP ROLE IF EXISTS mesh_test_probe' >/dev/null
[ $scram_ok = 1 ] || die "postgresql: password auth over TCP $PG_HOST:$PG_PORT fails"
log "postgresql: peer auth (unix socket) and scram auth (TCP $PG_HOST:$PG_PORT) work"

# --------------------------------------------------------------------------
# 5. RabbitMQ + management plugin, 127.0.0.1:5672 / :15672
# --------------------------------------------------------------------------
RABBIT_LOG=$LOGDIR/rabbitmq-server.log
rabbit_ping() { rabbitmq-diagnostics -q ping; }
rabbit_api_answers() { local c; c=$(http_code "$RABBIT_API/api/overview"); [ "$c" != 000 ]; }
rabbit_restart=0
mkdir -p /etc/rabbitmq
if write_if_changed /etc/rabbitmq/rabbitmq-env.conf 0644 <<'EOF'
# written by scripts/services.sh (mesh-test): a node name that does not depend
# on the machine's hostname, distribution and epmd on loopback only.
NODENAME=rabbit@localhost
SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
EOF
then log "rabbitmq: wrote /etc/rabbitmq/rabbitmq-env.conf"; rabbit_restart=1; fi
if write_if_changed /etc/rabbitmq/rabbitmq.conf 0644 <<'EOF'
# written by scripts/services.sh (mesh-test)
listeners.tcp.default = 127.0.0.1:5672
management.tcp.ip = 127.0.0.1
management.tcp.port = 15672
loopback_users.guest = true
EOF
then log "rabbitmq: wrote /etc/rabbitmq/rabbitmq.conf"; rabbit_restart=1; fi
export ERL_EPMD_ADDRESS=127.0.0.1

if ! grep -q rabbitmq_management /etc/rabbitmq/enabled_plugins 2>/dev/null; then
    log "rabbitmq: enabling rabbitmq_management (offline)"
    rabbitmq-plugins enable --offline rabbitmq_management >/dev/null || die "rabbitmq-plugins enable failed"
    rabbit_restart=1
fi

RABBIT_PID=$RUNDIR/rabbitmq-server.pid   # pid of the wrapper that lives as long as the node
rabbit_proc() { pid_alive "$RABBIT_PID" || pgrep -u rabbitmq -f 'beam.*rabbit' >/dev/null 2>&1; }
# Already running? The HTTP API answers in milliseconds; an Erlang CLI call
# (rabbitmq-diagnostics) takes a second or two, so ask HTTP first.
if rabbit_api_answers || rabbit_ping >/dev/null 2>&1; then
    if [ $rabbit_restart = 1 ]; then
        log "rabbitmq: configuration changed: stopping the running node"
        rabbitmqctl -q stop >/dev/null 2>&1 || true
        stop_start=$SECONDS
        while rabbit_proc; do
            if (( SECONDS - stop_start >= 60 )); then
                log "rabbitmq: node still there after 60s: killing it"
                pkill -KILL -u rabbitmq -f 'beam.*rabbit' || true
                [ -s "$RABBIT_PID" ] && kill -KILL "$(cat "$RABBIT_PID")" 2>/dev/null || true
                sleep 2; break
            fi
            sleep 1
        done
        log "rabbitmq: node stopped after $((SECONDS - stop_start))s"
    else
        log "rabbitmq: node already running"
    fi
fi
if ! rabbit_api_answers && ! rabbit_ping >/dev/null 2>&1; then
    # Start the node unless one is already booting; if it dies, say so.
    r_start=$SECONDS r_next=$((SECONDS + 5)) r_started=0
    if rabbit_proc; then log "rabbitmq: a node process exists but does not answer yet"; fi
    until rabbit_ping >/dev/null 2>&1; do
        if ! rabbit_proc; then
            if [ $r_started = 1 ]; then show_log "$RABBIT_LOG"; die "rabbitmq-server exited (see also /var/log/rabbitmq/)"; fi
            log "rabbitmq: starting rabbitmq-server in background (log $RABBIT_LOG)"
            start_daemon "$RABBIT_LOG" sh -c 'echo $$ >"$1"; exec rabbitmq-server' sh "$RABBIT_PID"
            r_started=1
            sleep 2
            continue
        fi
        if (( SECONDS - r_start >= 120 )); then
            show_log "$RABBIT_LOG"; die "rabbitmq (rabbitmq-diagnostics ping): not ready after 120s"
        fi
        if (( SECONDS >= r_next )); then
            log "  ... waiting for rabbitmq (rabbitmq-diagnostics ping) ($((SECONDS - r_start))s / 120s)"
            r_next=$((SECONDS + 5))
        fi
        sleep 1
    done
    log "  rabbitmq (rabbitmq-diagnostics ping): ready after $((SECONDS - r_start))s"
fi
wait_for "rabbitmq management API ($RABBIT_API)" 60 "$RABBIT_LOG" rabbit_api_answers

if [ -n "${MESH_TEST_RABBIT_PASSWORD:-}" ]; then
    printf '%s' "$MESH_TEST_RABBIT_PASSWORD" | write_if_changed "$RABBIT_PW_FILE" 0600 \
        && log "rabbitmq: stored MESH_TEST_RABBIT_PASSWORD in $RABBIT_PW_FILE" || true
elif [ ! -s "$RABBIT_PW_FILE" ]; then
    head -c 24 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' | write_if_changed "$RABBIT_PW_FILE" 0600 || true
    log "rabbitmq: generated a password for $RABBIT_USER in $RABBIT_PW_FILE"
fi
chmod 0600 "$RABBIT_PW_FILE"
rabbit_admin_ok() { # whoami as mesh-admin with the administrator tag
    local body
    body=$(printf 'user = "%s:%s"\n' "$RABBIT_USER" "$(cat "$RABBIT_PW_FILE")" \
        | curl -s -f -m 5 -K - "$RABBIT_API/api/whoami") || return 1
    grep -q administrator <<<"$body"
}
if rabbit_admin_ok; then
    log "rabbitmq: user $RABBIT_USER exists with administrator tag and current password"
else
    if rabbitmqctl -q list_users | awk '{print $1}' | grep -qx "$RABBIT_USER"; then
        log "rabbitmq: setting password of $RABBIT_USER (from $RABBIT_PW_FILE)"
        rabbitmqctl -q change_password "$RABBIT_USER" <"$RABBIT_PW_FILE" >/dev/null || die "rabbitmqctl change_password failed"
    else
        log "rabbitmq: adding user $RABBIT_USER (password from $RABBIT_PW_FILE)"
        rabbitmqctl -q add_user "$RABBIT_USER" <"$RABBIT_PW_FILE" >/dev/null || die "rabbitmqctl add_user failed"
    fi
    rabbitmqctl -q set_user_tags "$RABBIT_USER" administrator >/dev/null || die "rabbitmqctl set_user_tags failed"
    rabbitmqctl -q set_permissions -p / "$RABBIT_USER" '.*' '.*' '.*' >/dev/null || die "rabbitmqctl set_permissions failed"
    wait_for "rabbitmq API login as $RABBIT_USER" 20 "$RABBIT_LOG" rabbit_admin_ok
fi
code=$(printf 'user = "%s:%s"\n' "$RABBIT_USER" "$(cat "$RABBIT_PW_FILE")" \
    | curl -s -o /dev/null -m 5 -w '%{http_code}' -K - "$RABBIT_API/api/overview" || true)
[ "$code" = 200 ] || die "rabbitmq: GET $RABBIT_API/api/overview as $RABBIT_USER answered $code"
log "rabbitmq: AMQP 127.0.0.1:5672, GET /api/overview as $RABBIT_USER -> 200"

# --------------------------------------------------------------------------
# 6. docker-registry (distribution v2) on 127.0.0.1:5000
# --------------------------------------------------------------------------
REGISTRY_LOG=$LOGDIR/docker-registry.log
REGISTRY_PID=$RUNDIR/docker-registry.pid
mkdir -p "$REGISTRY_DATA"
registry_restart=0
if write_if_changed "$REGISTRY_CONF" 0644 <<EOF
# written by scripts/services.sh (mesh-test): no auth, loopback only
version: 0.1
log:
  level: info
  fields:
    service: registry
storage:
  filesystem:
    rootdirectory: $REGISTRY_DATA
  delete:
    enabled: true
  cache:
    blobdescriptor: inmemory
http:
  addr: $REGISTRY_ADDR
  headers:
    X-Content-Type-Options: [nosniff]
EOF
then log "docker-registry: wrote $REGISTRY_CONF"; registry_restart=1; fi
registry_ok() { [ "$(http_code "http://$REGISTRY_ADDR/v2/")" = 200 ]; }
if [ $registry_restart = 1 ] && pid_alive "$REGISTRY_PID"; then
    log "docker-registry: configuration changed: stopping pid $(cat "$REGISTRY_PID")"
    kill "$(cat "$REGISTRY_PID")" || true
    for _ in $(seq 1 10); do pid_alive "$REGISTRY_PID" || break; sleep 1; done
fi
if registry_ok && [ $registry_restart = 0 ]; then
    log "docker-registry: already answering on http://$REGISTRY_ADDR/v2/"
else
    if ! pid_alive "$REGISTRY_PID"; then
        log "docker-registry: starting (config $REGISTRY_CONF, log $REGISTRY_LOG)"
        start_daemon "$REGISTRY_LOG" sh -c 'echo $$ >"$1"; exec docker-registry serve "$2"' \
            sh "$REGISTRY_PID" "$REGISTRY_CONF"
    fi
    wait_for "docker-registry (http://$REGISTRY_ADDR/v2/)" 30 "$REGISTRY_LOG" registry_ok
fi
REG_IMAGE=$REGISTRY_ADDR/$BUSYBOX_IMAGE
manifest_code=$(http_code -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
    "http://$REGISTRY_ADDR/v2/${BUSYBOX_IMAGE%%:*}/manifests/${BUSYBOX_IMAGE##*:}")
if [ "$manifest_code" = 200 ]; then
    log "docker-registry: $REG_IMAGE already pushed"
else
    log "docker-registry: docker push $REG_IMAGE"
    "$DOCKER" -H "$DOCKER_HOST_URL" tag "$BUSYBOX_IMAGE" "$REG_IMAGE"
    push_out=$("$DOCKER" -H "$DOCKER_HOST_URL" push "$REG_IMAGE" 2>&1) \
        || { echo "$push_out" >&2; die "docker push to $REGISTRY_ADDR failed"; }
    digest=$(grep -o 'sha256:[0-9a-f]\{64\}' <<<"$push_out" | tail -n 1)
    log "docker-registry: pushed, digest ${digest:-?}"
fi

# --------------------------------------------------------------------------
# 7. nftables Python binding for the project's interpreter
# --------------------------------------------------------------------------
command -v "$PYTHON" >/dev/null || die "$PYTHON not found on PATH"
DEB_NFT=/usr/lib/python3/dist-packages/nftables
[ -f "$DEB_NFT/__init__.py" ] || die "$DEB_NFT missing (python3-nftables not installed?)"
if "$PYTHON" -c 'import nftables' >/dev/null 2>&1; then
    log "nftables binding: already importable from $("$PYTHON" -c 'import nftables,os; print(os.path.dirname(nftables.__file__))')"
else
    # PyPI has no 'nftables' distribution: expose Debian's pure-Python package
    # (ctypes over libnftables.so.1) alone, not all of dist-packages.
    mkdir -p "$PYLIB"
    ln -sfn "$DEB_NFT" "$PYLIB/nftables"
    purelib=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    echo "$PYLIB" >"$purelib/mesh-test-nftables.pth"
    log "nftables binding: wrote $purelib/mesh-test-nftables.pth -> $PYLIB (symlink to $DEB_NFT)"
    "$PYTHON" -c 'import nftables' || die "nftables still not importable by $PYTHON"
fi
nft_out=$(unshare -n "$PYTHON" -c '
import json, nftables
n = nftables.Nftables()
rc, out, err = n.json_cmd({"nftables": [{"list": {"tables": {}}}]})
assert rc == 0, (rc, err)
print(json.dumps(out)[:200])
') || die "nftables binding: json_cmd inside unshare -n failed"
log "nftables binding: json_cmd works inside unshare -n: $nft_out"

# --------------------------------------------------------------------------
# 8. A second dockerd inside a named network namespace (once, or on demand)
# --------------------------------------------------------------------------
if [ ! -f "$STATE/netns-dockerd.ok" ] || [ "${MESH_TEST_CHECK_NETNS_DOCKERD:-0}" = 1 ]; then
    name=mtcheck$$
    log "netns dockerd: checking scripts/netns-dockerd.sh with namespace $name"
    ok=0
    if bash "$SCRIPT_DIR/netns-dockerd.sh" start "$name" \
        && out=$("$DOCKER" -H "unix:///run/$name.sock" run --rm --name probe "$BUSYBOX_IMAGE" /bin/sh -c 'ip -o link | wc -l' 2>&1); then
        ok=1
        log "netns dockerd: docker -H unix:///run/$name.sock run --rm $BUSYBOX_IMAGE works ($out links in the container)"
    fi
    bash "$SCRIPT_DIR/netns-dockerd.sh" stop "$name" || true
    [ $ok = 1 ] || die "netns dockerd: check failed: ${out:-see $LOGDIR/netns-dockerd-$name.log}"
    date -Is >"$STATE/netns-dockerd.ok"
else
    log "netns dockerd: checked before ($(cat "$STATE/netns-dockerd.ok")); MESH_TEST_CHECK_NETNS_DOCKERD=1 re-checks"
fi

# --------------------------------------------------------------------------
# 9. Environment for the tests (no secrets in it)
# --------------------------------------------------------------------------
write_if_changed "$ENV_FILE" 0644 <<EOF || true
MESH_TEST_DOCKER_HOST=$DOCKER_HOST_URL
MESH_TEST_DOCKER_STORAGE_DRIVER=$DOCKER_DRIVER
MESH_TEST_PG_HOST=$PG_HOST
MESH_TEST_PG_PORT=$PG_PORT
MESH_TEST_RABBIT_API=$RABBIT_API
MESH_TEST_RABBIT_AMQP=amqp://127.0.0.1:5672
MESH_TEST_RABBIT_USER=$RABBIT_USER
MESH_TEST_RABBIT_PASSWORD_FILE=$RABBIT_PW_FILE
MESH_TEST_REGISTRY=$REGISTRY_ADDR
MESH_TEST_BUSYBOX_IMAGE=$BUSYBOX_IMAGE
MESH_TEST_NETNS_DOCKERD=$SCRIPT_DIR/netns-dockerd.sh
EOF
log "environment for tests ($ENV_FILE):"
sed 's/^/    /' "$ENV_FILE"
log "all services up in $((SECONDS - T0))s"
