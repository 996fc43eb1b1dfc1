# shellcheck shell=sh
# bench/upstream.sh: sourced by bench/setup_layout.sh, which picks free
# ports for it. The harness's nginx (its nginx.conf.in, from
# ../shared/bench or PEERBENCH's folder) on 127.0.0.1:UPSTREAM_HTTP_PORT
# (plain), UPSTREAM_STATUS_PORT (status) and UPSTREAM_TLS_PORT (TLS, /small
# and a 256 MiB /big; defaults 18080, 18081 and 18443), pinned to CPU 1, in
# a fresh temporary folder.
#
#   upstream_start NAME     sets $dir and $nginx_pid, adds nginx to $pids; NAME
#                           prefixes errors
#   wait_listening PORT...  waits (at most 10 s, WAIT_LISTENING_SECS more) for
#                           the ports to listen
#
# The caller's cleanup kills $pids and removes $dir (its EXIT trap).

upstream_start() {
    name=$1
    template=$(dirname "${PEERBENCH:-../shared/bench/run.sh}")/nginx.conf.in
    [ -f "$template" ] || { echo "$name: no $template (set PEERBENCH)" >&2; exit 1; }
    dir=$(mktemp -d /tmp/sluice-bench.XXXXXX)
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
        -keyout "$dir/key.pem" -out "$dir/cert.pem" -subj /CN=127.0.0.1 \
        -addext subjectAltName=IP:127.0.0.1 >/dev/null 2>&1
    mkdir "$dir/nginx-tmp"
    head -c 268435456 /dev/urandom >"$dir/big"
    # the harness's own upstream configuration, rendered as run.sh does
    sed -e "s#@RUN@#$dir#g; s#@DATA@#$dir#g; s#@HTTP_PORT@#${UPSTREAM_HTTP_PORT:-18080}#g; s#@TLS_PORT@#${UPSTREAM_TLS_PORT:-18443}#g" \
        -e "s#@STATUS_PORT@#${UPSTREAM_STATUS_PORT:-18081}#g" "$template" >"$dir/nginx.conf"
    taskset -c 1 nginx -p "$dir" -c "$dir/nginx.conf" -e "$dir/nginx-error.log" \
        >"$dir/nginx.out" 2>&1 &
    nginx_pid=$!
    pids="$pids $nginx_pid"
}

wait_listening() {
    i=0
    for port in "$@"; do
        while [ -z "$(ss -Hltn "sport = :$port")" ]; do
            i=$((i + 1))
            [ "$i" -le $((100 + ${WAIT_LISTENING_SECS:-0} * 10)) ] || { echo "$name: the servers did not start" >&2; cat "$dir"/*.out >&2; exit 1; }
            sleep 0.1
        done
    done
}
