#!/usr/bin/env bash
# A second, throw-away dockerd living in a named network namespace, for tests
# that need a "remote machine" with its own network stack.
#
#   scripts/netns-dockerd.sh start NAME   # prints DOCKER_HOST=unix:///run/NAME.sock
#   scripts/netns-dockerd.sh stop NAME
#   scripts/netns-dockerd.sh status NAME
#
# start: creates netns NAME if it does not exist (lo up; an existing netns,
# e.g. one a test wired with veth pairs, is used as it is), starts
#   nsenter --net=/var/run/netns/NAME dockerd --host unix:///run/NAME.sock \
#     --data-root /var/lib/mesh-test/nd/NAME --exec-root /run/mesh-test/nd/NAME \
#     --pidfile /run/mesh-test/nd/NAME.pid --storage-driver <same as main dockerd>
# (not `ip netns exec`, which remounts /sys and hides the cgroup mounts, so
# dockerd refuses to start), waits until it answers, and loads the
# mesh-test/busybox:1 image into it from the main dockerd (docker save | load).
# Its bridge, iptables rules and published ports stay inside NAME.
# stop: stops that dockerd, removes its data, and deletes the netns only if
# start created it. Both are idempotent.
set -euo pipefail

STATE=/var/lib/mesh-test
LOGDIR=/var/log/mesh-test
DOCKER=/usr/bin/docker
MAIN_HOST=unix:///var/run/docker.sock
IMAGE=${MESH_TEST_BUSYBOX_IMAGE:-mesh-test/busybox:1}

usage() { echo "usage: $0 start|stop|status NAME" >&2; exit 2; }
[ $# -eq 2 ] || usage
cmd=$1 name=$2
[[ $name =~ ^[A-Za-z0-9][A-Za-z0-9_.-]{0,30}$ ]] || { echo "bad name: $name" >&2; exit 2; }

log() { printf '[netns-dockerd %s] %s\n' "$name" "$*"; }
die() { printf '[netns-dockerd %s] ERROR: %s\n' "$name" "$*" >&2; exit 1; }

NETNS=/var/run/netns/$name
SOCK=/run/$name.sock
HOST=unix://$SOCK
DATA=$STATE/nd/$name
EXEC=/run/mesh-test/nd/$name
PIDFILE=/run/mesh-test/nd/$name.pid
CREATED=/run/mesh-test/nd/$name.created-netns
LOG=$LOGDIR/netns-dockerd-$name.log

alive() {
    local p; p=$(cat "$PIDFILE" 2>/dev/null) && [ -n "$p" ] && kill -0 "$p" 2>/dev/null \
        && [ "$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | cut -d' ' -f1)" != Z ]   # not a zombie
}
answers() { "$DOCKER" -H "$HOST" info >/dev/null 2>&1; }

case $cmd in
start)
    mkdir -p "$LOGDIR" /run/mesh-test/nd "$DATA" "$EXEC"
    if [ ! -e "$NETNS" ]; then
        ip netns add "$name"
        touch "$CREATED"
        log "created network namespace $name"
    fi
    ip -n "$name" link set lo up
    if answers; then log "dockerd already answering on $HOST"; echo "DOCKER_HOST=$HOST"; exit 0; fi
    if ! alive; then
        driver=$(cat "$STATE/docker-storage-driver" 2>/dev/null || echo overlay2)
        log "starting dockerd in netns $name (socket $SOCK, driver $driver, log $LOG)"
        printf '\n==== %s start\n' "$(date -Is)" >>"$LOG"
        setsid -f nsenter --net="$NETNS" dockerd --host "$HOST" --data-root "$DATA" \
            --exec-root "$EXEC" --pidfile "$PIDFILE" --storage-driver "$driver" \
            </dev/null >>"$LOG" 2>&1
    fi
    for i in $(seq 1 60); do
        answers && break
        [ $((i % 5)) = 0 ] && log "... waiting for dockerd ($i s)"
        sleep 1
    done
    answers || { tail -n 20 "$LOG" >&2; die "dockerd in netns $name did not answer within 60s"; }
    if ! "$DOCKER" -H "$HOST" image inspect "$IMAGE" >/dev/null 2>&1; then
        if "$DOCKER" -H "$MAIN_HOST" image inspect "$IMAGE" >/dev/null 2>&1; then
            log "loading $IMAGE from the main dockerd"
            "$DOCKER" -H "$MAIN_HOST" save "$IMAGE" | "$DOCKER" -H "$HOST" load -q >/dev/null
        else
            log "main dockerd has no $IMAGE: nothing loaded"
        fi
    fi
    log "ready"
    echo "DOCKER_HOST=$HOST"
    ;;
stop)
    if alive; then
        pid=$(cat "$PIDFILE")
        log "stopping dockerd pid $pid"
        # Remove containers first so dockerd has nothing to keep running.
        ids=$("$DOCKER" -H "$HOST" ps -aq 2>/dev/null || true)
        [ -n "$ids" ] && "$DOCKER" -H "$HOST" rm -f $ids >/dev/null 2>&1 || true
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
        if kill -0 "$pid" 2>/dev/null; then log "dockerd did not stop in 30s: SIGKILL"; kill -9 "$pid" 2>/dev/null || true; sleep 1; fi
    fi
    # Unmount anything the daemon left (deepest first), then drop its data.
    for d in "$DATA" "$EXEC"; do
        awk -v d="$d" '$2 == d || index($2, d "/") == 1 {print $2}' /proc/mounts | sort -r \
            | while read -r m; do umount -l "$m" 2>/dev/null || true; done
    done
    rm -rf "$DATA" "$EXEC" "$PIDFILE" "$SOCK"
    if [ -f "$CREATED" ]; then
        ip netns del "$name" 2>/dev/null || true
        rm -f "$CREATED"
        log "deleted network namespace $name"
    fi
    log "stopped"
    ;;
status)
    if answers; then echo "running DOCKER_HOST=$HOST"; else echo "stopped"; exit 1; fi
    ;;
*) usage ;;
esac
