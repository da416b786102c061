#!/usr/bin/env bash
# Installs, starts and stops the emulators the tests run against: dynalite and moto
# (DynamoDB), kinesalite and kinesis-mock (Kinesis; kinesis-mock, npm `kinesis-local`, serves
# stream consumers and SubscribeToShard), a real redis-server (the Redis store), and this
# repository's LogHub emulator (loghub-emulator/, built by `start` with cargo).
#
#   scripts/emulators.sh install   # pinned versions into .emulators/ (idempotent)
#   scripts/emulators.sh start     # start on 127.0.0.1, wait until they answer
#   scripts/emulators.sh stop      # stop what `start` started
#
# Ports can be changed with DYNALITE_PORT / MOTO_PORT / KINESALITE_PORT / KINESIS_MOCK_PORT
# (plain HTTP; its TLS port, KINESIS_MOCK_TLS_PORT, uses the package's self-signed certificate;
# it allows KINESIS_MOCK_SHARD_LIMIT shards an account, 1000 by default, since it keeps every
# stream a suite creates) / REDIS_PORT / LOGHUB_PORT. The pids
# live in .emulators/run/. redis-server comes from the distribution's packages (apt-get) and
# listens on 127.0.0.1:6390 by default, not 6379, so that it never clashes with a system Redis;
# it keeps nothing on disk (no RDB, no AOF). A second one speaks only TLS on 6391
# (REDIS_TLS_PORT), with a self-signed certificate made by openssl in .emulators/tls/. The LogHub
# emulator listens on 127.0.0.1:4580 (LOGHUB_PORT); clients reach it as their HTTP proxy
# (http_proxy=http://127.0.0.1:4580 no_proxy=127.0.0.1,localhost) with any endpoint name, see
# docs/TESTING.md.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
dir="$root/.emulators"
run="$dir/run"
DYNALITE_VERSION=4.0.0
MOTO_VERSION=5.2.5
KINESALITE_VERSION=3.3.3
KINESIS_MOCK_VERSION=0.6.2
DYNALITE_PORT=${DYNALITE_PORT:-4567}
MOTO_PORT=${MOTO_PORT:-4568}
KINESALITE_PORT=${KINESALITE_PORT:-4569}
KINESIS_MOCK_PORT=${KINESIS_MOCK_PORT:-4570}
KINESIS_MOCK_TLS_PORT=${KINESIS_MOCK_TLS_PORT:-4571}
REDIS_PORT=${REDIS_PORT:-6390}
REDIS_TLS_PORT=${REDIS_TLS_PORT:-6391}
LOGHUB_PORT=${LOGHUB_PORT:-4580}

log() { printf 'emulators: %s\n' "$*" >&2; }

install() {
  mkdir -p "$dir/node"
  if [ ! -x "$dir/node/node_modules/.bin/dynalite" ]; then
    log "installing dynalite $DYNALITE_VERSION from npm"
    npm install --silent --no-audit --no-fund --prefix "$dir/node" "dynalite@$DYNALITE_VERSION" >&2
  fi
  if [ ! -x "$dir/node/node_modules/.bin/kinesalite" ]; then
    log "installing kinesalite $KINESALITE_VERSION from npm"
    npm install --silent --no-audit --no-fund --prefix "$dir/node" "kinesalite@$KINESALITE_VERSION" >&2
  fi
  if [ ! -f "$dir/node/node_modules/kinesis-local/main.js" ]; then
    log "installing kinesis-local (kinesis-mock) $KINESIS_MOCK_VERSION from npm"
    npm install --silent --no-audit --no-fund --prefix "$dir/node" "kinesis-local@$KINESIS_MOCK_VERSION" >&2
  fi
  if [ ! -x "$dir/venv/bin/moto_server" ]; then
    log "installing moto[dynamodb] $MOTO_VERSION from PyPI"
    python3 -m venv "$dir/venv"
    "$dir/venv/bin/pip" install --quiet --disable-pip-version-check \
      "moto[dynamodb,server]==$MOTO_VERSION" flask flask-cors >&2
  fi
  install_redis
}

install_redis() {
  command -v redis-server >/dev/null && command -v redis-cli >/dev/null && return 0
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    log "installing redis-server from the distribution's packages (apt-get)"
    if ! { apt-get install -y -qq redis-server >&2 ||
      { apt-get update -qq >&2 && apt-get install -y -qq redis-server >&2; }; }; then
      log "apt-get could not install redis-server: install it yourself (the package \
redis-server), or point SHARDLEASE_REDIS_URL at a Redis of your own"
      return 1
    fi
  else
    log "redis-server is not installed and cannot be installed here (needs apt-get as root): \
install the package redis-server, or point SHARDLEASE_REDIS_URL at a Redis of your own"
    return 1
  fi
}

wait_redis() { # port
  local port=$1 i
  for i in $(seq 1 200); do
    if [ "$(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null)" = PONG ]; then
      log "redis ready on 127.0.0.1:$port"
      return 0
    fi
    sleep 0.1
  done
  log "redis did not answer PING on 127.0.0.1:$port within 20 s; its log:"
  cat "$run/redis.log" >&2 || true
  return 1
}

start_redis() {
  if [ -f "$run/redis.pid" ] && kill -0 "$(cat "$run/redis.pid")" 2>/dev/null; then
    log "redis already running (pid $(cat "$run/redis.pid"))"
    return 0
  fi
  redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
    --daemonize no >"$run/redis.log" 2>&1 &
  echo $! >"$run/redis.pid"
  wait_redis "$REDIS_PORT"
}

# A second redis-server that speaks only TLS (rediss://), on a certificate made here for
# 127.0.0.1 and signed by itself: .emulators/tls/ca.pem is what clients trust.
start_redis_tls() {
  if [ -f "$run/redis-tls.pid" ] && kill -0 "$(cat "$run/redis-tls.pid")" 2>/dev/null; then
    log "redis (TLS) already running (pid $(cat "$run/redis-tls.pid"))"
    return 0
  fi
  local tls="$dir/tls" i
  mkdir -p "$tls"
  if [ ! -s "$tls/ca.pem" ] || [ ! -s "$tls/key.pem" ]; then
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj /CN=127.0.0.1 \
      -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" \
      -keyout "$tls/key.pem" -out "$tls/ca.pem" 2>"$run/redis-tls-openssl.log"
  fi
  redis-server --port 0 --tls-port "$REDIS_TLS_PORT" --bind 127.0.0.1 \
    --tls-cert-file "$tls/ca.pem" --tls-key-file "$tls/key.pem" --tls-ca-cert-file "$tls/ca.pem" \
    --tls-auth-clients no --save '' --appendonly no --daemonize no >"$run/redis-tls.log" 2>&1 &
  echo $! >"$run/redis-tls.pid"
  for i in $(seq 1 200); do
    if [ "$(redis-cli -h 127.0.0.1 -p "$REDIS_TLS_PORT" --tls --cacert "$tls/ca.pem" ping 2>/dev/null)" = PONG ]; then
      log "redis (TLS) ready on 127.0.0.1:$REDIS_TLS_PORT"
      return 0
    fi
    sleep 0.1
  done
  log "redis (TLS) did not answer PING on 127.0.0.1:$REDIS_TLS_PORT within 20 s; its log:"
  cat "$run/redis-tls.log" >&2 || true
  return 1
}

wait_ready() { # name port
  local name=$1 port=$2 i
  for i in $(seq 1 200); do
    # Any HTTP answer means the server is listening (both answer 400 to a bare POST).
    if curl -s -o /dev/null -X POST "http://127.0.0.1:$port/" 2>/dev/null; then
      log "$name ready on 127.0.0.1:$port"
      return 0
    fi
    sleep 0.1
  done
  log "$name did not answer on 127.0.0.1:$port within 20 s; its log:"
  cat "$run/$name.log" >&2 || true
  return 1
}

start_one() { # name port command...
  local name=$1 port=$2
  shift 2
  if [ -f "$run/$name.pid" ] && kill -0 "$(cat "$run/$name.pid")" 2>/dev/null; then
    log "$name already running (pid $(cat "$run/$name.pid"))"
    return 0
  fi
  "$@" >"$run/$name.log" 2>&1 &
  echo $! >"$run/$name.pid"
  wait_ready "$name" "$port"
}

# The LogHub emulator, built from this repository (a debug build, like the tests').
start_loghub() {
  if [ -f "$run/loghub.pid" ] && kill -0 "$(cat "$run/loghub.pid")" 2>/dev/null; then
    log "loghub-emulator already running (pid $(cat "$run/loghub.pid"))"
    return 0
  fi
  log "building loghub-emulator"
  (cd "$root" && cargo build --quiet -p shardlease-loghub-emulator --bin loghub-emulator) >&2
  "${CARGO_TARGET_DIR:-$root/target}/debug/loghub-emulator" --bind "127.0.0.1:$LOGHUB_PORT" \
    >"$run/loghub.log" 2>&1 &
  echo $! >"$run/loghub.pid"
  local i
  for i in $(seq 1 200); do
    if curl -sf -o /dev/null "http://127.0.0.1:$LOGHUB_PORT/_emulator/ready" 2>/dev/null; then
      log "loghub-emulator ready on 127.0.0.1:$LOGHUB_PORT"
      return 0
    fi
    sleep 0.1
  done
  log "loghub-emulator did not answer on 127.0.0.1:$LOGHUB_PORT within 20 s; its log:"
  cat "$run/loghub.log" >&2 || true
  return 1
}

start() {
  install
  mkdir -p "$run"
  start_one dynalite "$DYNALITE_PORT" \
    "$dir/node/node_modules/.bin/dynalite" --host 127.0.0.1 --port "$DYNALITE_PORT"
  start_one moto "$MOTO_PORT" \
    "$dir/venv/bin/python" "$root/scripts/moto_atomic.py" -H 127.0.0.1 -p "$MOTO_PORT"
  NODE_PATH="$dir/node/node_modules" start_one kinesalite "$KINESALITE_PORT" \
    node "$root/scripts/kinesalite.js" "$KINESALITE_PORT" 127.0.0.1
  local mock="$dir/node/node_modules/kinesis-local"
  KINESIS_MOCK_PLAIN_PORT="$KINESIS_MOCK_PORT" KINESIS_MOCK_TLS_PORT="$KINESIS_MOCK_TLS_PORT" \
    KINESIS_MOCK_CERT_PATH="$mock/server.json" LOG_LEVEL=WARN \
    SHARD_LIMIT="${KINESIS_MOCK_SHARD_LIMIT:-1000}" start_one kinesis-mock \
    "$KINESIS_MOCK_PORT" node "$root/scripts/kinesis_mock.js" "$mock/main.js" 127.0.0.1
  start_redis
  start_redis_tls
  start_loghub
}

stop() {
  local f pid
  for f in "$run"/*.pid; do
    [ -e "$f" ] || continue
    pid=$(cat "$f")
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$f"
  done
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 install|start|stop" >&2; exit 2 ;;
esac
