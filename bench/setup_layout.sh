# shellcheck shell=sh
# bench/setup_layout.sh: sourced by bench/setup_syscalls and
# bench/setup_instructions, which count what a CONNECT+TLS setup costs the
# gateway. bench/connect_ab's layout on private loopback ports: nginx with
# the harness's nginx.conf.in (bench/upstream.sh) on 127.0.0.1:${P}080,
# :${P}081 and :${P}443 (TLS), the gateway (the caller starts it) on
# :${P}128, with bench/policy.yaml's rule moved to the TLS port.
#
#   setup_layout_start NAME P   checks the ports are free, starts nginx,
#                               writes $dir/policy.yaml; sets $proxy_port
#   setup_drive N               N sequential setups by the harness's curl
#                               command on CPU 0 (a fresh connection each,
#                               CONNECT, 200, a full TLS handshake, GET
#                               /small and a close); fails unless every
#                               one answered 200
#
# The caller defines cleanup() and $pids as bench/upstream.sh asks.

setup_layout_start() {
    name=$1
    UPSTREAM_HTTP_PORT=${2}080 UPSTREAM_STATUS_PORT=${2}081 UPSTREAM_TLS_PORT=${2}443
    proxy_port=${2}128
    for tool in nginx curl openssl taskset ss; do
        command -v "$tool" >/dev/null || { echo "$name: $tool is missing" >&2; exit 1; }
    done
    for port in $UPSTREAM_HTTP_PORT $UPSTREAM_STATUS_PORT $UPSTREAM_TLS_PORT $proxy_port; do
        [ -z "$(ss -Hltn "sport = :$port")" ] || { echo "$name: port $port is in use" >&2; exit 1; }
    done
    . bench/upstream.sh
    upstream_start "$name"
    # bench/policy.yaml's rule, for this layout's TLS port
    sed "s/ports: \[18080, 18443\]/ports: [$UPSTREAM_TLS_PORT]/" bench/policy.yaml >"$dir/policy.yaml"
    grep -q "ports: \[$UPSTREAM_TLS_PORT\]" "$dir/policy.yaml" ||
        { echo "$name: bench/policy.yaml's rule has moved" >&2; exit 1; }
}

setup_drive() {
    ok=$(taskset -c 0 curl -s -k --no-sessionid -H 'Connection: close' -x "http://127.0.0.1:$proxy_port" \
        --max-time 600 -o /dev/null -w '%{http_code}\n' \
        "https://127.0.0.1:$UPSTREAM_TLS_PORT/small?[1-$1]" | grep -c '^200$' || true)
    [ "$ok" -eq "$1" ] || { echo "$name: only $ok of $1 setups succeeded" >&2; exit 1; }
}
