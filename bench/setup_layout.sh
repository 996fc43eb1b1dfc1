# shellcheck shell=sh
# bench/setup_layout.sh: sourced by bench/setup_syscalls and
# bench/setup_instructions, which count what a CONNECT+TLS setup costs the
# gateway, and by bench/connect_ab and bench/box. The benchmarks' layout on
# loopback ports of its own: nginx with the harness's nginx.conf.in
# (bench/upstream.sh) on 127.0.0.1, plain, status and TLS ports, the
# gateway (the caller starts it) on $proxy_port, with bench/policy.yaml's
# rule moved to the TLS port. The ports are picked at random below the
# kernel's ephemeral range (the source ports of connections) among those no
# socket uses: fixed ones (18xxx, 28xxx, 29xxx, 3128) refused a run while
# anything else held one, another run's included.
#
#   setup_layout_traps CLEANUP  traps EXIT with the command CLEANUP (which
#                               calls setup_layout_stop), and INT, TERM and
#                               PIPE with an exit (130, 143, 141), which
#                               runs it
#   setup_layout_start NAME     checks the tools, picks the ports, starts
#                               nginx, writes $dir/policy.yaml; sets
#                               $proxy_port
#   free_port                   one more port for the caller (a second
#                               proxy): sets $port
#   BENCH_TARGET=name           (set by the caller's caller) the setups
#                               CONNECT to bench.test, a name the policy
#                               pins to 127.0.0.1 (dns.static) and allows
#                               by a host rule, as agents name their
#                               targets, where the harness's IP literal
#                               takes no lookup and no name check
#   setup_drive N               N sequential setups by the harness's curl
#                               command on CPU 0 (a fresh connection each,
#                               CONNECT, 200, a full TLS handshake, GET
#                               /small and a close); fails unless every
#                               one answered 200
#   setup_layout_stop           what the caller's cleanup (its EXIT trap)
#                               calls: stops $pids, removes $dir
#
# The caller sets $pids as bench/upstream.sh asks, and calls
# setup_layout_traps before setup_layout_start: a signal left untrapped
# (SIGPIPE, the reader of its output gone: `| head`) killed the script
# without its cleanup, and nginx, the gateway and a 256 MiB folder stayed
# behind.

# shellcheck disable=SC2064 # the caller's command, expanded now on purpose
setup_layout_traps() {
    trap "$1" EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    trap 'exit 141' PIPE
}

# Sets $port to a loopback TCP port no socket uses (listening or not), not
# one of $taken, and adds it there.
free_port() {
    low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
    [ "$low" -gt 11000 ] || low=32768
    tries=0
    while [ "$tries" -lt 200 ]; do
        tries=$((tries + 1))
        port=$(($(od -An -N2 -tu2 /dev/urandom) % (low - 10000) + 10000))
        case " ${taken:-} " in *" $port "*) continue ;; esac
        if [ -z "$(ss -Htan "sport = :$port")" ]; then
            taken="${taken:-} $port"
            return 0
        fi
    done
    echo "$name: no free loopback port found in 200 tries" >&2
    exit 1
}

setup_layout_start() {
    name=$1
    for tool in nginx curl openssl taskset ss od; do
        command -v "$tool" >/dev/null || { echo "$name: $tool is missing" >&2; exit 1; }
    done
    free_port; UPSTREAM_HTTP_PORT=$port
    free_port; UPSTREAM_STATUS_PORT=$port
    free_port; UPSTREAM_TLS_PORT=$port
    free_port; proxy_port=$port
    . bench/upstream.sh
    upstream_start "$name"
    # bench/policy.yaml's rule, for this layout's TLS port
    sed "s/ports: \[18080, 18443\]/ports: [$UPSTREAM_TLS_PORT]/" bench/policy.yaml >"$dir/policy.yaml"
    grep -q "ports: \[$UPSTREAM_TLS_PORT\]" "$dir/policy.yaml" ||
        { echo "$name: bench/policy.yaml's rule has moved" >&2; exit 1; }
    target=127.0.0.1
    case "${BENCH_TARGET:-ip}" in
    ip) ;;
    name)
        target=bench.test
        printf '  - host: bench.test\n    ports: [%s]\n    tier: 0\n' "$UPSTREAM_TLS_PORT" >"$dir/rule.yaml"
        sed "/^rules:/r $dir/rule.yaml" "$dir/policy.yaml" >"$dir/policy.new"
        printf 'dns:\n  static: {bench.test: 127.0.0.1}\n' >>"$dir/policy.new"
        mv "$dir/policy.new" "$dir/policy.yaml"
        ;;
    *) echo "$name: BENCH_TARGET is ip or name" >&2; exit 2 ;;
    esac
}

setup_drive() {
    ok=$(taskset -c 0 curl -s -k --no-sessionid -H 'Connection: close' -x "http://127.0.0.1:$proxy_port" \
        --max-time 600 -o /dev/null -w '%{http_code}\n' \
        "https://$target:$UPSTREAM_TLS_PORT/small?[1-$1]" | grep -c '^200$' || true)
    [ "$ok" -eq "$1" ] || { echo "$name: only $ok of $1 setups succeeded" >&2; exit 1; }
}

# True while the process <pid> runs: not gone, nor exited and waiting to
# be reaped (a zombie, state Z, which kill -0 still finds).
running() {
    state=$(sed -n 's/^[0-9]* (.*) \([A-Za-z]\) .*/\1/p' "/proc/$1/stat" 2>/dev/null) || return 1
    [ -n "$state" ] && [ "$state" != Z ]
}

# Bounded: what has not stopped 10 s after its SIGTERM (the gateway's stop
# under valgrind takes a few) is killed; a second signal meanwhile is
# ignored, so that it cannot cut the cleanup short.
setup_layout_stop() {
    trap '' INT TERM PIPE
    stop=""
    for pid in $pids; do
        kill "$pid" 2>/dev/null && stop="$stop $pid"
    done
    i=0
    for pid in $stop; do
        while running "$pid" && [ "$i" -lt 100 ]; do
            i=$((i + 1))
            sleep 0.1
        done
    done
    for pid in $stop; do
        ! running "$pid" || kill -KILL "$pid" 2>/dev/null || true
    done
    wait 2>/dev/null || true
    [ -z "${dir:-}" ] || rm -rf "$dir"
}
