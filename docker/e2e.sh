#!/usr/bin/env bash
# End-to-end check of the container deployment (opt-in; not part of pytest):
#   build the image from BASE_IMAGE, start the compose federation (1 SuperLink + 3
#   SuperNode replicas, TLS + SuperNode authentication), let the runner train 2 rounds on a
#   small config, check the run directory, the replicas' keys, partitions and state, kill a
#   replica during a second run (it must come back, the run go on), scale beyond
#   FL_NUM_CLIENTS (the extra replica stops) and back down, stop the SuperLink during a run
#   (fl-run prints the resume command), and tear everything down (also on failure or
#   Ctrl-C): `down -v` must leave no volume behind.
#
#   docker/e2e.sh [BASE_IMAGE]            # default python:3.11-slim-bookworm
#
# Environment:
#   EXTRA_CA_CERTS   a PEM file on this machine to trust inside the build (TLS-intercepting
#                    proxy); copied into docker/ca-certificates/ for the build, removed after
#   PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, PIP_TRUSTED_HOST, TORCH_INDEX_URL   build args
#   FL_E2E_IMAGE     image tag to build (default fl-system:e2e; kept afterwards as a cache)
#   FL_E2E_ARGS      Hydra overrides of the run (default: digits, mlp, 2 rounds)
#   FL_E2E_TIMEOUT   seconds allowed for `compose run --rm runner` (default 900)
#   COMPOSE          compose command (default: `docker compose` if present, else docker-compose)
# Exit status: 0 when every check passed, non-zero otherwise.
set -euo pipefail

BASE_IMAGE="${1:-python:3.11-slim-bookworm}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
IMAGE="${FL_E2E_IMAGE:-fl-system:e2e}"
RUN_ARGS="${FL_E2E_ARGS:-dataset=digits model=mlp num_rounds=2 eval_every=1}"
TIMEOUT="${FL_E2E_TIMEOUT:-900}"
ROUNDS=2
for arg in $RUN_ARGS; do
    case "$arg" in num_rounds=*) ROUNDS="${arg#num_rounds=}" ;; esac
done
PROJECT="fl-e2e-$(date +%s)-$$"
LOGDIR="$(mktemp -d "${TMPDIR:-/tmp}/fl-e2e.XXXXXX")"
CA_COPY="$HERE/ca-certificates/e2e-extra-ca.crt"

if [ -z "${COMPOSE:-}" ]; then
    if docker compose version >/dev/null 2>&1; then COMPOSE="docker compose"; else COMPOSE="docker-compose"; fi
fi
compose() { $COMPOSE -p "$PROJECT" -f "$HERE/compose.yaml" "$@"; }
say() { printf 'e2e: %s\n' "$*" >&2; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

export FL_IMAGE="$IMAGE" FL_NUM_CLIENTS=3 FL_RUN_ARGS="$RUN_ARGS hydra.run.dir=/runs/e2e"
export BASE_IMAGE

status=1
started=0
cleanup() {
    rc=$?
    [ "$status" -eq 0 ] || status=$(( rc == 0 ? 1 : rc ))
    if [ "$started" -eq 1 ]; then
        compose logs --no-color > "$LOGDIR/compose.log" 2>&1 || true
        if [ "$status" -ne 0 ]; then
            say "FAILED; last lines of the containers' logs (all of it: $LOGDIR/compose.log):"
            tail -n 60 "$LOGDIR/compose.log" >&2 || true
        fi
        compose down -v --remove-orphans > "$LOGDIR/down.log" 2>&1 \
            || say "compose down failed (see $LOGDIR/down.log)"
    fi
    rm -f "$CA_COPY"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

say "compose: $COMPOSE; project $PROJECT; logs in $LOGDIR"
docker info >/dev/null 2>&1 || { say "no Docker engine answers (is dockerd running?)"; exit 2; }
VOLUMES_BEFORE="$(docker volume ls -q | sort)"

# 1. build
build_args=(--build-arg "BASE_IMAGE=$BASE_IMAGE")
for name in PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_TRUSTED_HOST TORCH_INDEX_URL; do
    if [ -n "${!name:-}" ]; then build_args+=(--build-arg "$name=${!name}"); fi
done
if [ -n "${EXTRA_CA_CERTS:-}" ]; then
    [ -f "$EXTRA_CA_CERTS" ] || { say "EXTRA_CA_CERTS: no file at $EXTRA_CA_CERTS"; exit 2; }
    cp "$EXTRA_CA_CERTS" "$CA_COPY"
fi
say "building $IMAGE from $BASE_IMAGE (log: $LOGDIR/build.log)"
t0=$(now)
if ! docker build -f "$HERE/Dockerfile" "${build_args[@]}" -t "$IMAGE" "$REPO" > "$LOGDIR/build.log" 2>&1; then
    tail -n 40 "$LOGDIR/build.log" >&2
    say "image build failed"
    exit 3
fi
t1=$(now)
BUILD_S=$(secs "$t0" "$t1")
SIZE_B=$(docker image inspect -f '{{.Size}}' "$IMAGE")
SIZE_GB=$(awk -v b="$SIZE_B" 'BEGIN { printf "%.2f", b / 1e9 }')
rm -f "$CA_COPY"
say "built in ${BUILD_S} s, ${SIZE_GB} GB"

# 2. federation + run, as docker/README.md tells it: `run --rm runner` starts certs, the
#    SuperLink and the SuperNodes, follows the run and returns with fl-run's status
say "compose run --rm runner (run: $FL_RUN_ARGS)"
started=1
t2=$(now)
set +e
timeout "$TIMEOUT" $COMPOSE -p "$PROJECT" -f "$HERE/compose.yaml" run --rm runner \
    > "$LOGDIR/runner.log" 2>&1
run_rc=$?
set -e
t3=$(now)
WALL_S=$(secs "$t2" "$t3")
if [ "$run_rc" -eq 124 ]; then
    say "the run did not finish within $TIMEOUT s"
    exit 5
fi
if [ "$run_rc" -ne 0 ]; then
    tail -n 40 "$LOGDIR/runner.log" >&2
    say "runner exited with status $run_rc"
    exit 6
fi
REPLICAS="$(compose ps -q supernode)"
if [ "$(echo "$REPLICAS" | wc -w)" -ne 3 ]; then
    say "expected 3 supernode replicas, found: $REPLICAS"
    exit 7
fi
for id in $REPLICAS; do
    if [ "$(docker inspect -f '{{.State.Running}}' "$id")" != "true" ]; then
        say "supernode replica $id is not running any more"
        exit 7
    fi
done

# 3. secrets: from inside each service, the private keys it can see anywhere are its own
#    (the replicas: the partitions' keys in their shared `nodes` volume; nobody but the certs
#    job sees ca.key); keys are mode 0600 and owned by uid 1000
KEYS_SCRIPT='find / \( -path /proc -o -path /sys \) -prune -o -name "*.key" -print 2>/dev/null |
    sort | while read -r f; do printf "%s:%s " "$f" "$(stat -c %a:%u "$f")"; done'
check_keys() {  # service, expected listing, then the command that runs `sh -c SCRIPT` in it
    local service="$1" want="$2"; shift 2
    local got
    got="$("$@" "$KEYS_SCRIPT" | sed 's/ $//')"
    if [ "$got" != "$want" ]; then
        say "secrets: $service sees private keys '$got', expected '$want'"
        exit 10
    fi
    SECRETS="$SECRETS $service[${want:-none}]"
}
SECRETS=""
check_keys superlink "/certs/server.key:600:1000" compose exec -T superlink sh -c
NODE_KEYS="$(for p in 0 1 2; do printf '/var/lib/fl-client/partition-%s/node.key:600:1000 ' "$p"; done | sed 's/ $//')"
for id in $REPLICAS; do
    check_keys "supernode ${id:0:12}" "$NODE_KEYS" docker exec "$id" sh -c
done
check_keys runner "/certs/submitter.key:600:1000" compose run --rm --no-deps -T --entrypoint sh runner -c
# the runner's credential submits runs; admitting a node needs the admin's
compose run --rm --no-deps -T --entrypoint sh runner -c 'fl-certs /tmp/k --node-key x >/dev/null &&
    fl-server register /tmp/k/x.pub --control superlink:9092 --root-certificates /certs/ca.crt \
    --credential /certs/submitter.key' > "$LOGDIR/runner-register.log" 2>&1 \
    && { say "the runner registered a node"; exit 10; }
if ! grep -q "(submitter) may not: registering and unregistering SuperNodes needs role admin" "$LOGDIR/runner-register.log"; then
    tail -n 20 "$LOGDIR/runner-register.log" >&2
    say "the runner's register was not refused for its role"
    exit 10
fi
# a container without an operator credential (a SuperNode's: ca.crt only) submits nothing
compose run --rm --no-deps -T --entrypoint fl-run supernode runtime=remote \
    runtime.address=superlink:9092 runtime.root_certificates=/certs/ca.crt num_clients=3 \
    > "$LOGDIR/no-credential.log" 2>&1 && { say "a run without a credential was accepted"; exit 10; }
if ! grep -q "fl-run: error: the SuperLink refused the run: .*from its operators only" "$LOGDIR/no-credential.log"; then
    tail -n 20 "$LOGDIR/no-credential.log" >&2
    say "a run without a credential was not refused as such"
    exit 10
fi
REFUSED="$(grep -o "refused the run: .*" "$LOGDIR/no-credential.log" | cut -c1-90)"
# each replica holds a partition of its own, each partition a key of its own
claimed() { docker logs "$1" 2>&1 | sed -n 's/.*claimed partition \([0-9]*\) of.*/\1/p' | tail -n 1; }
PARTS=""
for id in $REPLICAS; do
    PARTS="$PARTS $(claimed "$id")"
done
if [ "$(echo $PARTS | tr ' ' '\n' | sort -u | wc -l)" -ne 3 ]; then
    say "replicas claimed partitions$PARTS: not three distinct ones"
    exit 10
fi
first="$(echo $REPLICAS | cut -d' ' -f1)"
if [ "$(docker exec "$first" sh -c 'cat /var/lib/fl-client/partition-*/node.pub' | sort -u | wc -l)" -ne 3 ]; then
    say "replicas do not hold three distinct keys"
    exit 10
fi

# 4. a replica that dies mid-run comes back (restart policy) with its partition, and the round
#    it missed goes on without it within seconds (heartbeats every 5 s)
say "second run: 8 rounds, one replica killed after round 2"
FIRST_RUN_ARGS="$FL_RUN_ARGS"
export FL_RUN_ARGS="$RUN_ARGS num_rounds=8 hydra.run.dir=/runs/e2e-kill"
$COMPOSE -p "$PROJECT" -f "$HERE/compose.yaml" run --rm -T runner > "$LOGDIR/kill-run.log" 2>&1 &
kill_run=$!
victim="$(echo $REPLICAS | cut -d' ' -f1)"
victim_part="$(claimed "$victim")"
for _ in $(seq 1 300); do
    grep -q " 2/8 " "$LOGDIR/kill-run.log" 2>/dev/null && break
    sleep 1
done
# its processes die as in a crash or by the kernel's OOM killer (`docker kill` would be a
# manual stop, which Docker's restart policies never undo)
kill -KILL "$(docker inspect -f '{{.State.Pid}}' "$victim")"
KILLED_AT=$(now)
wait "$kill_run" || { tail -n 40 "$LOGDIR/kill-run.log" >&2; say "the run with a killed replica failed"; exit 11; }
for _ in $(seq 1 60); do
    [ "$(docker inspect -f '{{.State.Running}}' "$victim")" = "true" ] && break
    sleep 1
done
RESTARTS="$(docker inspect -f '{{.RestartCount}}' "$victim")"
back_part="$(claimed "$victim")"
if [ "$RESTARTS" -lt 1 ] || [ "$back_part" != "$victim_part" ]; then
    say "killed replica: restarts $RESTARTS, partition $victim_part -> $back_part"
    exit 11
fi
read -r SLOWEST LAST <<< "$(compose run --rm --no-deps -T --entrypoint python runner -c '
import csv
rows = list(csv.DictReader(open("/runs/e2e-kill/metrics.csv")))
walls = [0.0] + [float(r["wall_seconds"]) for r in rows]
slowest = max(b - a for a, b in zip(walls, walls[1:]))
print(f"{slowest:.1f}", rows[-1]["participants"])')"
if [ "$LAST" != "3" ]; then
    say "the killed replica did not take part again: the last round had $LAST participants"
    exit 11
fi
KILL="replica ${victim:0:12} (partition $victim_part) restarted $RESTARTS time(s), same partition, back in the last round; slowest round ${SLOWEST} s"

# 3. the run directory, read through the runner's own volumes, then copied out with
#    docker/README.md's recipe: the files must land owned by this user and world-readable
say "checking /runs/e2e"
if ! compose run --rm --no-deps -T --entrypoint python runner - "$ROUNDS" > "$LOGDIR/check.log" 2>&1 <<'EOF'
import csv, json, sys
from pathlib import Path
import numpy as np

rounds = int(sys.argv[1])
run = Path("/runs/e2e")
rows = list(csv.DictReader(open(run / "metrics.csv")))
assert len(rows) == rounds, f"metrics.csv has {len(rows)} rows, expected {rounds}"
summary = json.loads((run / "summary.json").read_text())
assert int(summary.get("rounds", -1)) == rounds, f"summary.json rounds: {summary.get('rounds')}"
with np.load(run / "checkpoint.npz", allow_pickle=False) as ck:
    assert len(ck.files) > 0, "checkpoint.npz is empty"
acc = summary.get("final_accuracy")
print(f"rounds={rounds} final_accuracy={acc} bytes_up={summary.get('bytes_up')} "
      f"bytes_down={summary.get('bytes_down')} files={sorted(p.name for p in run.iterdir())}")
EOF
then
    cat "$LOGDIR/check.log" >&2
    say "run directory check failed"
    exit 8
fi
CHECK="$(tail -n 1 "$LOGDIR/check.log")"
mkdir -p "$LOGDIR/my-runs"
compose run --rm --no-deps -T --entrypoint tar runner -C /runs -c . 2>> "$LOGDIR/copy.log" \
    | tar -x --no-same-owner -C "$LOGDIR/my-runs"
for name in metrics.csv summary.json checkpoint.npz; do
    [ -f "$LOGDIR/my-runs/e2e/$name" ] || { say "copy-out: no e2e/$name in $LOGDIR/my-runs"; exit 9; }
done
foreign="$(find "$LOGDIR/my-runs" ! -user "$(id -u)" -o -type f ! -perm -0444 | head -n 3)"
if [ -n "$foreign" ]; then
    ls -ln $foreign >&2
    say "copy-out: files not owned by $(id -u) or not readable by all"
    exit 9
fi

# 6. a replica beyond FL_NUM_CLIENTS finds every partition held, says so and stays stopped
#    (exit 0 under restart: on-failure), instead of restarting in a loop
say "scaling to 4 replicas (FL_NUM_CLIENTS=3)"
compose up -d --no-recreate --scale supernode=4 supernode > "$LOGDIR/scale-up.log" 2>&1
extra="$(comm -13 <(echo "$REPLICAS" | sort) <(compose ps -q supernode | sort))"
for _ in $(seq 1 60); do
    [ "$(docker inspect -f '{{.State.Status}}' "$extra")" = "exited" ] && break
    sleep 1
done
sleep 10  # a restart policy would have started it again by now
read -r EXTRA_STATE EXTRA_CODE EXTRA_RESTARTS <<< "$(docker inspect -f '{{.State.Status}} {{.State.ExitCode}} {{.RestartCount}}' "$extra")"
if [ "$EXTRA_STATE $EXTRA_CODE $EXTRA_RESTARTS" != "exited 0 0" ] \
    || ! docker logs "$extra" 2>&1 | grep -q "this replica has nothing to train and stops"; then
    docker logs "$extra" 2>&1 | tail -n 20 >&2
    say "the extra replica: $EXTRA_STATE, exit $EXTRA_CODE, $EXTRA_RESTARTS restarts"
    exit 12
fi
SCALE_UP="4th replica ${extra:0:12}: exited 0 with 'nothing to train', not restarted"

# 7. the SuperLink stops during a run: fl-run says so, with the rounds saved and the command
#    that resumes the run, and leaves failure.txt saying the same
say "third run: the SuperLink stopped after round 2"
export FL_RUN_ARGS="$RUN_ARGS num_rounds=50 hydra.run.dir=/runs/e2e-lost"
$COMPOSE -p "$PROJECT" -f "$HERE/compose.yaml" run --rm -T runner > "$LOGDIR/lost-run.log" 2>&1 &
lost_run=$!
for _ in $(seq 1 300); do
    grep -q " 2/50 " "$LOGDIR/lost-run.log" 2>/dev/null && break
    sleep 1
done
compose stop superlink > "$LOGDIR/stop-superlink.log" 2>&1
set +e
wait "$lost_run"
lost_rc=$?
set -e
if [ "$lost_rc" -ne 1 ] \
    || ! grep -q "stopped or cannot be reached any more; rounds up to [0-9]* are saved. Continue it with fl-run <the same overrides> resume=true hydra.run.dir=/runs/e2e-lost" "$LOGDIR/lost-run.log" \
    || ! compose run --rm --no-deps -T --entrypoint grep runner -q "resume=true" /runs/e2e-lost/failure.txt; then
    tail -n 20 "$LOGDIR/lost-run.log" >&2
    say "SuperLink stopped: runner exit $lost_rc, or no resume command / failure.txt"
    exit 13
fi
LOST="$(grep -o 'rounds up to [0-9]* are saved' "$LOGDIR/lost-run.log" | tail -n 1); resume command printed, failure.txt written"

# 8. scaling down keeps replicas that work
say "scaling down to 2 replicas"
compose up -d --no-recreate --scale supernode=2 supernode > "$LOGDIR/scale-down.log" 2>&1
running=0
for id in $(compose ps -q supernode); do
    [ "$(docker inspect -f '{{.State.Running}}' "$id")" = "true" ] && running=$((running + 1))
done
if [ "$running" -ne 2 ]; then
    compose ps >&2
    say "after scaling down to 2: $running replicas running"
    exit 14
fi
SCALE_DOWN="2 replicas running"

# 9. down -v removes every volume the project made, the SuperNodes' keys included
compose down -v --remove-orphans > "$LOGDIR/down.log" 2>&1
started=0
left="$(comm -13 <(echo "$VOLUMES_BEFORE") <(docker volume ls -q | sort))"
if [ -n "$left" ]; then
    say "volumes left after down -v: $left"
    exit 15
fi
DOWN="no volume left"

status=0
cat <<REPORT
== fl_system docker e2e: PASSED ==
base image   : $BASE_IMAGE
image        : $IMAGE, ${SIZE_GB} GB ($SIZE_B bytes)
build time   : ${BUILD_S} s
compose      : $COMPOSE, 1 SuperLink + 3 SuperNode replicas, TLS + SuperNode auth
partitions   :$PARTS (claimed by the replicas)
killed       : $KILL
scale up     : $SCALE_UP
superlink    : $LOST
scale down   : $SCALE_DOWN
down -v      : $DOWN
run          : $FIRST_RUN_ARGS
wall time    : ${WALL_S} s of 'compose run --rm runner' (federation started, run followed)
copy-out     : $LOGDIR/my-runs (owned by uid $(id -u), readable by all)
private keys :$SECRETS
no credential: $REFUSED
result       : $CHECK
logs         : $LOGDIR
REPORT
