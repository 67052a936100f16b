#!/usr/bin/env bash
# Drive `zcube-lab serve --local` with real OpenAI-API benchmark clients and print their figures.
#
#   bench/clients.sh [guidellm] [inference-perf] [aiperf]     (default: all three)
#
# Each client is installed into its own venv under $CACHE/<name> (reused when its marker file
# names the same release), gets a tokenizer built by scripts/make_tokenizer.py from the text it
# prompts with, and runs against a fresh `serve --local` on 127.0.0.1:$PORT at a constant
# $RATE requests/s for $REQUESTS requests ($PROMPT prompt tokens, $OUTPUT output tokens,
# streaming completions). The script prints each client's headline figures, or its exact
# failure, and the prompt tokens the server saw per request (the prefill's
# vllm:request_prompt_tokens sum / count). No traffic leaves loopback; pip uses the machine's
# configured package index. docs/LOADGEN.md explains each command.
#
# Environment: CACHE (/var/cache/zcube-lab/clients), LAB_PYTHON (the lab's Python; default
# .venv/bin/python of this checkout, else /work/main/.venv/bin/python), PORT (18731), RATE (5),
# REQUESTS (100), PROMPT (128), OUTPUT (32), OUT (a new /tmp/zcube-clients.* directory),
# PYTHON312 (a Python 3.12+ for inference-perf), AIPERF_CORPUS (1; 0 to reproduce the [UNK] prompts).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${CACHE:-/var/cache/zcube-lab/clients}
if [[ -z ${LAB_PYTHON:-} ]]; then
    LAB_PYTHON=$ROOT/.venv/bin/python
    [[ -x $LAB_PYTHON ]] || LAB_PYTHON=/work/main/.venv/bin/python
fi
PORT=${PORT:-18731}
RATE=${RATE:-5}
REQUESTS=${REQUESTS:-100}
PROMPT=${PROMPT:-128}
OUTPUT=${OUTPUT:-32}
OUT=${OUT:-$(mktemp -d /tmp/zcube-clients.XXXXXX)}
URL=http://127.0.0.1:$PORT
DURATION=$(((REQUESTS + RATE - 1) / RATE)) # seconds of load for duration-bounded clients
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 NO_PROXY=127.0.0.1

GUIDELLM=guidellm==0.8.1
INFERENCE_PERF=inference-perf==0.7.0
AIPERF=aiperf==0.13.0
SERVER_PID=
SUMMARY=$OUT/summary.txt
mkdir -p "$OUT" "$CACHE"

say() { printf '%s\n' "$*" | tee -a "$SUMMARY"; }

# install NAME SPEC [PYTHON]: a venv at $CACHE/NAME holding SPEC; 0 when usable.
install() {
    local name=$1 spec=$2 python=${3:-python3} dir=$CACHE/$1
    if [[ -f $dir/.zcube-installed && $(cat "$dir/.zcube-installed") == "$spec" ]]; then
        return 0
    fi
    rm -rf "$dir"
    "$python" -m venv "$dir" || return 1
    if ! "$dir/bin/pip" install -q "$spec" >"$OUT/$name-pip.log" 2>&1; then
        say "$name: pip install $spec failed (log $OUT/$name-pip.log):"
        grep -E '^ERROR|error:' "$OUT/$name-pip.log" | head -n 5 | tee -a "$SUMMARY"
        return 1
    fi
    echo "$spec" >"$dir/.zcube-installed"
}

# inference-perf declares Requires-Python >=3.12; Debian 12's python3 is 3.11. Use a Python 3.12
# or later when one is installed ($PYTHON312, python3.12, python3.13, pyenv's versions); without
# one, `pip install` on 3.11 prints why it cannot install and the client is skipped.
python312() {
    local py cands=("${PYTHON312:-}" python3.12 python3.13)
    if command -v pyenv >/dev/null; then
        cands+=("$(pyenv root)"/versions/3.1[2-9]*/bin/python3)
    fi
    for py in "${cands[@]}"; do
        [[ -n $py ]] || continue
        if "$py" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
            echo "$py"
            return 0
        fi
    done
    return 1
}

install_inference_perf() {
    local py
    if py=$(python312); then
        install inference-perf "$INFERENCE_PERF" "$py"
    else
        say "inference-perf: no Python 3.12 or later here; on $(python3 --version) pip says:"
        install inference-perf "$INFERENCE_PERF"
    fi
}

# tokenizer NAME OUTDIR [WORDS...]: the mock's tokenizer, built with client NAME's Python.
tokenizer() {
    local name=$1 out=$2
    shift 2
    local args=()
    for w in "$@"; do args+=(--words "$w"); done
    "$CACHE/$name/bin/python" "$ROOT/scripts/make_tokenizer.py" "$out" "${args[@]}" \
        >"$OUT/$name-tokenizer.log" 2>&1 || {
        say "$name: make_tokenizer.py failed:"
        tail -n 3 "$OUT/$name-tokenizer.log" | tee -a "$SUMMARY"
        return 1
    }
}

# figures CLIENT RESULT: one line of headline figures from the client's own result file, read
# with that client's Python (only the standard library).
figures() {
    "$CACHE/$1/bin/python" - "$1" "$2" <<'PY'
import json
import sys
from pathlib import Path

name, path = sys.argv[1], Path(sys.argv[2])


def line(ok, err, rps, prompt, ttft, itl):
    # ttft, itl: (p50, percentile label, value) in ms
    print(
        f"{name}: {ok} ok, {err} errors, {rps:.2f} req/s, {prompt:.1f} prompt tokens/request "
        f"(client's count), TTFT p50 {ttft[0]:.1f} ms {ttft[1]} {ttft[2]:.1f} ms, "
        f"ITL p50 {itl[0]:.2f} ms {itl[1]} {itl[2]:.2f} ms"
    )


if name == "guidellm":
    b = json.loads(path.read_text())["benchmarks"][0]
    m, made = b["metrics"], b["scheduler_metrics"]["requests_made"]

    def ok(key):
        return m[key]["successful"]

    line(
        made["successful"],
        made["errored"] + made["incomplete"],
        ok("requests_per_second")["mean"],
        ok("prompt_token_count")["mean"],
        (ok("time_to_first_token_ms")["median"], "p95", ok("time_to_first_token_ms")["percentiles"]["p95"]),
        (ok("inter_token_latency_ms")["median"], "p95", ok("inter_token_latency_ms")["percentiles"]["p95"]),
    )
elif name == "inference-perf":
    d = json.loads((path / "summary_lifecycle_metrics.json").read_text())
    s, lat = d["successes"], d["successes"]["latency"]
    ttft, itl = lat["time_to_first_token"], lat["inter_token_latency"]
    line(
        s["count"],
        d["failures"]["count"],
        s["throughput"]["requests_per_sec"],
        s["prompt_tokens"]["mean"],
        (ttft["median"] * 1e3, "p95", ttft["p95"] * 1e3),
        (itl["median"] * 1e3, "p95", itl["p95"] * 1e3),
    )
else:
    d = json.loads((path / "profile_export_aiperf.json").read_text())
    done = d["completed_request_count"]["avg"]
    ttft, itl = d["time_to_first_token"], d["inter_token_latency"]
    line(
        int(done),
        len(d["error_summary"]),
        d["request_throughput"]["avg"],
        d["input_sequence_length"]["avg"],
        (ttft["p50"], "p95", ttft["p95"]),
        (itl["p50"], "p95", itl["p95"]),
    )
    u = d["usage_prompt_tokens"]
    print(f"{name}: prompt tokens in the server's usage: mean {u['avg']:.1f}, min {u['min']:.0f}, max {u['max']:.0f}")
PY
}

start_server() {
    local log=$OUT/serve-$1.log
    env PYTHONPATH="$ROOT" "$LAB_PYTHON" -m zcube_lab.cli serve --local --port "$PORT" \
        --log-dir "$OUT/serve-$1" >"$log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 100); do
        if curl -sf "$URL/v1/models" >/dev/null 2>&1; then return 0; fi
        kill -0 "$SERVER_PID" 2>/dev/null || break
        sleep 0.2
    done
    say "serve --local did not come up on $URL (log $log)"
    return 1
}

# Prompt tokens per request as the prefill instances counted them (all prefills of the run).
server_prompt_tokens() {
    local sum=0 count=0 url s c
    local urls
    mapfile -t urls < <(awk '$1 == "prefill" {print $2}' "$OUT/serve-$1.log")
    for url in "${urls[@]}"; do
        s=$(curl -s "$url" | awk '/^vllm:request_prompt_tokens_sum/ {print $2}')
        c=$(curl -s "$url" | awk '/^vllm:request_prompt_tokens_count/ {print $2}')
        sum=$(awk -v a="$sum" -v b="${s:-0}" 'BEGIN {print a + b}')
        count=$(awk -v a="$count" -v b="${c:-0}" 'BEGIN {print a + b}')
    done
    awk -v s="$sum" -v c="$count" -v p="$PROMPT" 'BEGIN {
        printf "server: %d requests reached prefill, %.1f prompt tokens each (asked %d)\n",
            c, (c > 0 ? s / c : 0), p }'
}

stop_server() {
    if [[ -n $SERVER_PID ]]; then
        kill "$SERVER_PID" 2>/dev/null
        wait "$SERVER_PID" 2>/dev/null
        SERVER_PID=
    fi
}
trap stop_server EXIT

# run NAME: start the server, run client NAME (run_NAME), print the server's prompt tokens.
run() {
    local name=$1 rc
    start_server "$name" || return 1
    say "== $name: $(date -u +%FT%TZ), log $OUT/$name.log"
    "run_$name"
    rc=$?
    [[ $rc -eq 0 ]] || {
        say "$name: exited with $rc; last lines of its log:"
        grep -v '^\s*$' "$OUT/$name.log" | tail -n 8 | tee -a "$SUMMARY"
    }
    server_prompt_tokens "$name" | tee -a "$SUMMARY"
    stop_server
    return "$rc"
}

run_guidellm() {
    local bin=$CACHE/guidellm/bin
    tokenizer guidellm "$OUT/tok-guidellm" || return 1
    nice -n 19 "$bin/guidellm" run \
        --backend "kind=openai_http,target=$URL,model=tiny,request_format=/v1/completions" \
        --profile "kind=constant,rate=$RATE" \
        --constraint "kind=max_requests,count=$REQUESTS" \
        --data "kind=synthetic_text,prompt_tokens=$PROMPT,output_tokens=$OUTPUT" \
        --tokenizer "kind=hf_auto,model=$OUT/tok-guidellm" \
        --output "kind=json,path=$OUT/guidellm/benchmarks.json" \
        --disable-progress >"$OUT/guidellm.log" 2>&1 || return
    figures guidellm "$OUT/guidellm/benchmarks.json" | tee -a "$SUMMARY"
}

run_inference-perf() {
    local dir=$CACHE/inference-perf corpus
    corpus=$("$dir/bin/python" -c 'import inference_perf, pathlib
print(pathlib.Path(inference_perf.__file__).parent / "assets" / "shakespeare.txt")')
    tokenizer inference-perf "$OUT/tok-inference-perf" "$corpus" || return 1
    cat >"$OUT/inference-perf.yml" <<EOF
api:
  type: completion
  streaming: true
server:
  type: vllm
  model_name: tiny
  base_url: $URL
  ignore_eos: true
tokenizer:
  pretrained_model_name_or_path: $OUT/tok-inference-perf
data:
  type: synthetic
  input_distribution: {type: fixed, mean: $PROMPT, min: $PROMPT, max: $PROMPT, std_dev: 0}
  output_distribution: {type: fixed, mean: $OUTPUT, min: $OUTPUT, max: $OUTPUT, std_dev: 0}
load:
  type: constant
  stages:
  - {rate: $RATE, duration: $DURATION}
report:
  request_lifecycle: {summary: true, per_stage: false, per_request: false}
storage:
  local_storage: {path: $OUT/inference-perf}
EOF
    (cd "$OUT" && nice -n 19 "$dir/bin/inference-perf" --config_file "$OUT/inference-perf.yml") \
        >"$OUT/inference-perf.log" 2>&1 || return
    figures inference-perf "$OUT/inference-perf" | tee -a "$SUMMARY"
}

run_aiperf() {
    local dir=$CACHE/aiperf corpus snap repo=zcube-lab/mock-aiperf
    corpus=$("$dir/bin/python" -c 'import aiperf, pathlib
print(next(pathlib.Path(aiperf.__file__).parent.rglob("shakespeare.txt")))')
    # AIPerf with HF_HUB_OFFLINE hands a local tokenizer path to the hub downloader, which
    # rejects it; a tokenizer in the hub cache layout, named by a repo id, loads offline.
    snap=$OUT/hf-hub/models--${repo/\//--}/snapshots/0000000000000000000000000000000000000000
    # AIPERF_CORPUS=0 leaves AIPerf's corpus out of the tokenizer (its words become [UNK], which
    # AIPerf's prompts then carry as literal text: longer prompts than asked).
    if [[ ${AIPERF_CORPUS:-1} == 0 ]]; then
        tokenizer aiperf "$snap" || return 1
    else
        tokenizer aiperf "$snap" "$corpus" || return 1
    fi
    mkdir -p "$OUT/hf-hub/models--${repo/\//--}/refs"
    printf '%s' 0000000000000000000000000000000000000000 >"$OUT/hf-hub/models--${repo/\//--}/refs/main"
    (cd "$OUT" && HF_HUB_CACHE=$OUT/hf-hub nice -n 19 "$dir/bin/aiperf" profile \
        --model tiny --url "$URL" --endpoint-type completions --streaming \
        --tokenizer "$repo" \
        --synthetic-input-tokens-mean "$PROMPT" --synthetic-input-tokens-stddev 0 \
        --output-tokens-mean "$OUTPUT" --output-tokens-stddev 0 \
        --extra-inputs ignore_eos:true \
        --request-rate "$RATE" --request-count "$REQUESTS" \
        --artifact-dir "$OUT/aiperf" --ui-type none) >"$OUT/aiperf.log" 2>&1 || return
    figures aiperf "$OUT/aiperf" | tee -a "$SUMMARY"
}

main() {
    local clients=("$@") name failed=0
    [[ ${#clients[@]} -gt 0 ]] || clients=(guidellm inference-perf aiperf)
    say "results in $OUT"
    for name in "${clients[@]}"; do
        case $name in
        guidellm) install guidellm "$GUIDELLM" ;;
        aiperf) install aiperf "$AIPERF" ;;
        inference-perf) install_inference_perf ;;
        *)
            say "unknown client $name"
            false
            ;;
        esac || {
            failed=1
            continue
        }
        run "$name" || failed=1
    done
    say "summary in $SUMMARY"
    return "$failed"
}

main "$@"
