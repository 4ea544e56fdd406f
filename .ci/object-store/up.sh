#!/usr/bin/env bash
# A real S3 endpoint for the remote-store tests and bench: a single-node Ceph cluster (one
# monitor, one OSD on a sparse file, one RADOS Gateway) listening on 127.0.0.1 only, with
# everything it writes under DIR.
#
#   .ci/object-store/up.sh DIR       start it; writes DIR/s3.env (below) and DIR/pids
#   .ci/object-store/down.sh DIR     stop every daemon up.sh started, by PID
#
# It installs nothing. .ci/run installs Debian's packages first (Debian 12: Ceph 16.2.15):
#   apt-get install -y --no-install-recommends radosgw ceph-mon ceph-osd ceph-common
# It also uses curl (SigV4 signing, to prove the S3 data path works before it says "up").
#
# DIR/s3.env holds KEY=VALUE lines, shell-sourceable and what the tests read
# (FETCHPROXY_TEST_S3_ENV=DIR/s3.env): the endpoint, region, a test bucket, and two users for
# the access-model tests: a writer (owns the bucket) and a reader (a read-only subuser of the
# writer: GET, HEAD and list, never PUT or DELETE). The secrets are random on every start.
#
# Ports (loopback only): RGW on FETCHPROXY_RGW_PORT (17480), the monitor on
# FETCHPROXY_MON_PORT (16789), the OSD's messengers within FETCHPROXY_OSD_PORTS (16790-16799).
# The OSD keeps its data in bluestore on a sparse file of FETCHPROXY_OSD_BLOCK_GIB GiB (16). (Not
# memstore: its OSD fails to register one start in three, 'wrong fsid'; bluestore's does
# too, more rarely, and is started again, see the OSD step.) Every wait is bounded (FETCHPROXY_OBJECT_STORE_TIMEOUT seconds per step, 60); a
# failure names the step, shows the end of that daemon's log, and stops what was started.
set -euo pipefail

DIR=${1:?usage: up.sh DIR  (then: down.sh DIR)}
HERE=$(cd "$(dirname "$0")" && pwd)
RGW_PORT=${FETCHPROXY_RGW_PORT:-17480}
MON_PORT=${FETCHPROXY_MON_PORT:-16789}
OSD_PORTS=${FETCHPROXY_OSD_PORTS:-16790-16799}
BLOCK_GIB=${FETCHPROXY_OSD_BLOCK_GIB:-16}
TIMEOUT=${FETCHPROXY_OBJECT_STORE_TIMEOUT:-60}
REGION=us-east-1
BUCKET=fetchproxy-test
MARKER=.fetchproxy-object-store

for tool in ceph-mon ceph-osd radosgw radosgw-admin ceph ceph-authtool monmaptool curl; do
    command -v "$tool" >/dev/null || {
        echo "up.sh: $tool is not installed; install the packages:" \
            "apt-get install -y --no-install-recommends radosgw ceph-mon ceph-osd ceph-common curl" >&2
        exit 1
    }
done

# DIR must be ours: absent, empty, or left by an earlier up.sh (whose daemons are stopped).
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
if [ -n "$(ls -A "$DIR")" ] && [ ! -e "$DIR/$MARKER" ]; then
    echo "up.sh: $DIR is not empty and was not made by up.sh; give an empty or new directory" >&2
    exit 1
fi
if [ -s "$DIR/pids" ] && "$HERE/down.sh" --check "$DIR"; then
    echo "up.sh: the object store in $DIR is still running; stop it first: $HERE/down.sh $DIR" >&2
    exit 1
fi
port_taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for port in "$RGW_PORT" "$MON_PORT"; do
    if port_taken "$port"; then
        echo "up.sh: something already listens on 127.0.0.1:$port (an object store from an" \
            "earlier run? stop it with down.sh DIR), or pick other ports (see the header)" >&2
        exit 1
    fi
done
find "$DIR" -mindepth 1 -delete
touch "$DIR/$MARKER"
mkdir -p "$DIR"/{mon,osd0,rgw,run,log}
: >"$DIR/pids"

# ---------------------------------------------------------------------------------- helpers

now() { date +%s.%N; }
START=$(now)
STEP_START=$START
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
say() { echo "up.sh: $*" >&2; }

STEP=configure
LOG=
finish() {
    local status=$?
    if [ "$status" -ne 0 ]; then
        say "FAILED at step '$STEP' after $(since "$START")s"
        if [ -n "$LOG" ] && [ -s "$LOG" ]; then
            say "last lines of $LOG:"
            tail -n 25 "$LOG" | sed 's/^/    /' >&2
        fi
        say "stopping what was started; the logs stay in $DIR/log"
        "$HERE/down.sh" "$DIR" >&2 || true
    fi
}
trap finish EXIT

step() {  # step NAME LOG: a new phase; its log is shown if the phase fails
    STEP=$1 LOG=$2 STEP_START=$(now)
}
done_step() { say "$STEP: $(since "$STEP_START")s"; }

start_daemon() {  # start_daemon NAME COMMAND...: run in the foreground, in the background
    local name=$1
    shift
    "$@" </dev/null >>"$DIR/log/$name.out" 2>&1 &
    local pid=$!
    # PID and kernel start time: down.sh stops only the very process started here.
    echo "$name $pid $(sed 's/.*) //' "/proc/$pid/stat" | cut -d' ' -f20)" >>"$DIR/pids"
    eval "PID_$name=$pid"
}

wait_until() {  # wait_until DAEMON WHAT COMMAND...: until COMMAND succeeds, bounded
    local daemon=$1 what=$2
    shift 2
    local pid_var="PID_$daemon" deadline
    deadline=$(awk -v t="$(now)" -v d="$TIMEOUT" 'BEGIN { printf "%d", t + d }')
    until "$@" >/dev/null 2>&1; do
        if ! kill -0 "${!pid_var}" 2>/dev/null; then
            say "$daemon (PID ${!pid_var}) exited while waiting for: $what"
            return 1
        fi
        if [ "$(date +%s)" -ge "$deadline" ]; then
            say "timed out after ${TIMEOUT}s waiting for: $what"
            return 1
        fi
        sleep 0.2
    done
}

CONF=$DIR/ceph.conf
ceph_cli() { timeout 15 ceph -c "$CONF" --connect-timeout 10 "$@"; }

# ---------------------------------------------------------------------------------- config

FSID=$(cat /proc/sys/kernel/random/uuid)
cat >"$CONF" <<CONF
[global]
fsid = $FSID
mon host = v1:127.0.0.1:$MON_PORT
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind ipv6 = false
ms bind port min = ${OSD_PORTS%-*}
ms bind port max = ${OSD_PORTS#*-}
auth cluster required = none
auth service required = none
auth client required = none
keyring = $DIR/keyring
run dir = $DIR/run
admin socket = $DIR/run/\$name.asok
log file = $DIR/log/\$name.log
# One OSD: pools of one replica, a few placement groups, no warnings about either.
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon warn on pool no redundancy = false
mon max pg per osd = 1000
# Propose map changes at once rather than gathering them for a second: every pool the gateway
# creates and the OSD's boot wait on a few map changes each (halves the cold start).
paxos propose interval = 0.05

[mon]
mon data = $DIR/mon
mon cluster log file = $DIR/log/cluster.log

[osd]
osd data = $DIR/osd0
# The OSD files itself under host localhost in the default root when it starts.
crush location = root=default host=localhost
osd objectstore = bluestore
bluestore block path = $DIR/osd0/block.file
bluestore block create = true
bluestore block size = $((BLOCK_GIB << 30))
bluestore fsck on mount = false
bluestore cache autotune = false
osd memory target = 1073741824

[client.rgw.a]
# tcp_nodelay: without it a small GET waits ~40 ms for delayed ACKs.
rgw frontends = beast endpoint=127.0.0.1:$RGW_PORT tcp_nodelay=1
rgw data = $DIR/rgw
# Deleted objects' space comes back within a minute, not two hours (gc tests, the bench).
rgw gc obj min wait = 60
rgw gc processor period = 60
CONF

# ---------------------------------------------------------------------------------- monitor

step monitor "$DIR/log/mon.a.log"
ceph-authtool --create-keyring "$DIR/keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
ceph-authtool "$DIR/keyring" --gen-key -n client.admin \
    --cap mon 'allow *' --cap osd 'allow *' --cap mgr 'allow *' >/dev/null
monmaptool --create --add a "v1:127.0.0.1:$MON_PORT" --fsid "$FSID" "$DIR/monmap" >/dev/null
ceph-mon -c "$CONF" --mkfs -i a --monmap "$DIR/monmap" >>"$DIR/log/mon.a.out" 2>&1
start_daemon mon ceph-mon -c "$CONF" -f -i a
wait_until mon "the monitor to form a quorum" ceph_cli quorum_status
done_step

# ---------------------------------------------------------------------------------- OSD

step osd "$DIR/log/osd.0.log"
OSD_UUID=$(cat /proc/sys/kernel/random/uuid)
OSD_ID=$(ceph_cli osd new "$OSD_UUID")
[ "$OSD_ID" = 0 ] || { say "the monitor gave OSD id '$OSD_ID', expected 0"; exit 1; }
ceph-osd -c "$CONF" -i 0 --mkfs --osd-uuid "$OSD_UUID" >>"$DIR/log/osd.0.out" 2>&1
osd_up() { ceph_cli osd stat -f json | grep -q '"num_up_osds":1,.*"num_in_osds":1'; }
# An OSD's first start sometimes loses a race with the monitor and exits at once, its command
# refused with 'wrong fsid' (Ceph 16, with bluestore as with memstore); the same OSD started
# again comes up. Only that failure is retried, at most twice more.
for attempt in 1 2 3; do
    start_daemon osd ceph-osd -c "$CONF" -f -i 0
    if wait_until osd "the OSD to be up and in" osd_up; then
        break
    fi
    if [ "$attempt" = 3 ] || kill -0 "$PID_osd" 2>/dev/null \
        || ! tail -n 5 "$DIR/log/osd.0.log" | grep -q "wrong fsid"; then
        exit 1
    fi
    say "osd: exited with 'wrong fsid' (start $attempt); starting it again"
done
done_step

# ---------------------------------------------------------------------------------- gateway

step gateway "$DIR/log/client.rgw.a.log"
start_daemon rgw radosgw -c "$CONF" -f -n client.rgw.a
ENDPOINT=http://127.0.0.1:$RGW_PORT
answers_200() { [ "$(curl -s -m 5 -o /dev/null -w '%{http_code}' "$ENDPOINT/")" = 200 ]; }
wait_until rgw "the gateway to answer GET / with 200 on $ENDPOINT" answers_200
done_step

# ---------------------------------------------------------------------------------- users

step users "$DIR/log/client.admin.log"
random_token() { head -c "$1" /dev/urandom | od -An -tx1 | tr -d ' \n'; }
WRITER_KEY=FPWRITER$(random_token 6 | tr a-f A-F)
WRITER_SECRET=$(random_token 20)
READER_KEY=FPREADER$(random_token 6 | tr a-f A-F)
READER_SECRET=$(random_token 20)
admin() { timeout 30 radosgw-admin -c "$CONF" "$@" >/dev/null; }
admin user create --uid=writer --display-name="fetchproxy tests: writer" \
    --access-key="$WRITER_KEY" --secret-key="$WRITER_SECRET"
admin subuser create --uid=writer --subuser=writer:reader --access=read \
    --key-type=s3 --access-key="$READER_KEY" --secret-key="$READER_SECRET"
done_step

# ---------------------------------------------------------------------------------- S3 check

# Signed requests prove the data path (bucket pool created, PGs active, signatures checked):
# create the bucket, PUT, GET back, check the reader can GET but not PUT, DELETE.
step "S3 check" "$DIR/log/client.rgw.a.log"
umask 077
s3() {  # s3 USER METHOD PATH [CURL ARGS...]: the HTTP status of a SigV4-signed request
    local user=$1 method=$2 path=$3
    shift 3
    curl -s -m 30 -K "$DIR/run/curl-$user.conf" -X "$method" -o "$DIR/run/s3-body" \
        -w '%{http_code}' "$@" "$ENDPOINT$path"
}
for user in writer reader; do
    key_var="${user^^}_KEY" secret_var="${user^^}_SECRET"
    # A config file keeps the secret out of curl's arguments (visible in ps).
    printf 'aws-sigv4 = "aws:amz:%s:s3"\nuser = "%s:%s"\n' \
        "$REGION" "${!key_var}" "${!secret_var}" >"$DIR/run/curl-$user.conf"
done
expect() {  # expect STATUS WHAT USER METHOD PATH [CURL ARGS...]
    local want=$1 what=$2 got
    shift 2
    got=$(s3 "$@") || true
    if [ "$got" != "$want" ]; then
        say "$what: expected HTTP $want, got ${got:-no answer}"
        [ -s "$DIR/run/s3-body" ] && head -c 600 "$DIR/run/s3-body" | sed 's/^/    /' >&2
        return 1
    fi
}
payload_sha() { sha256sum | cut -d' ' -f1; }
PROBE=probe-$(random_token 4)
EMPTY_SHA=$(printf '' | payload_sha)
PROBE_SHA=$(printf '%s' "$PROBE" | payload_sha)
deadline=$(($(date +%s) + TIMEOUT))
until [ "$(s3 writer PUT "/$BUCKET" -H "x-amz-content-sha256: $EMPTY_SHA")" = 200 ]; do
    [ "$(date +%s)" -lt "$deadline" ] || { say "cannot create bucket $BUCKET"; exit 1; }
    sleep 0.5
done
expect 200 "writer PUT" writer PUT "/$BUCKET/$PROBE" \
    -H "x-amz-content-sha256: $PROBE_SHA" --data-binary "$PROBE"
expect 200 "reader GET" reader GET "/$BUCKET/$PROBE" -H "x-amz-content-sha256: $EMPTY_SHA"
[ "$(cat "$DIR/run/s3-body")" = "$PROBE" ] || { say "GET gave other bytes than PUT"; exit 1; }
expect 403 "reader PUT (must be refused)" reader PUT "/$BUCKET/$PROBE-r" \
    -H "x-amz-content-sha256: $PROBE_SHA" --data-binary "$PROBE"
expect 204 "writer DELETE" writer DELETE "/$BUCKET/$PROBE" -H "x-amz-content-sha256: $EMPTY_SHA"
rm -f "$DIR/run/s3-body"
done_step

cat >"$DIR/s3.env" <<ENV
FETCHPROXY_TEST_S3_ENDPOINT=$ENDPOINT
FETCHPROXY_TEST_S3_REGION=$REGION
FETCHPROXY_TEST_S3_BUCKET=$BUCKET
FETCHPROXY_TEST_S3_WRITER_KEY=$WRITER_KEY
FETCHPROXY_TEST_S3_WRITER_SECRET=$WRITER_SECRET
FETCHPROXY_TEST_S3_READER_KEY=$READER_KEY
FETCHPROXY_TEST_S3_READER_SECRET=$READER_SECRET
FETCHPROXY_TEST_S3_DIR=$DIR
ENV
STEP=done
say "up in $(since "$START")s: $ENDPOINT, bucket $BUCKET; settings in $DIR/s3.env"
echo "$DIR/s3.env"
