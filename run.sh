#!/usr/bin/env bash
# The project's one entry script.
#   ./run.sh demo    set up, then fine-tune a real pre-trained BERT on real data, evaluate, predict
#   ./run.sh test [--fast] [PYTEST ARGS]   the test suite on TF 1.15 (Python 3.7) and TF 2.15
#                    (Python 3.9-3.11); --fast runs the quick tier only
#   ./run.sh test hf   the optional tier: Hugging Face's transformers on PyTorch (downloads it)
#   ./run.sh pythons   the interpreter of each environment (fetched with uv where none is found)
#   ./run.sh benchmark [ARGS]   fine-tuning speed against Google's run_classifier (tools/benchmark.py);
#                    --variants ...,hf adds Hugging Face's Trainer (creates .venvs/hf once)
#   ./run.sh benchmark quality [ARGS]   time to quality: the real MiniLM, one epoch, each code
#                    path, wall time and held-out ROC-AUC (tools/time_to_quality.py)
#   ./run.sh benchmark fast-paths [ARGS]   whether the fast training paths (the fused kernels)
#                    train as well as TensorFlow's own ops: held-out AUC and the bias metric
#                    over seeds, both runtimes (tools/fast_path_quality.py)
#   ./run.sh benchmark decisions [ARGS]   --calibrate and --tune_thresholds on real tweets:
#                    held-out F1, log-loss and calibration error before and after, over seeds
#                    (tools/decision_figures.py)
#   ./run.sh benchmark long-texts [ARGS]   --doc_stride's windows against head_tail truncation
#                    on real long comments: held-out ROC-AUC and time, over seeds
#                    (tools/long_text_figures.py)
#   ./run.sh benchmark predictor [ARGS]   the predictor against --do_predict (tools/bench_predictor.py)
#   ./run.sh benchmark serve [ARGS]   the HTTP server: requests/s, p50/p99 at 1, 8, 32 clients
#   ./run.sh benchmark table SUMMARIES...   runs' run_summary.json as a wall-time table (tools/run_table.py)
#   ./run.sh benchmark hosts [RESULTS.csv...]   the benchmark's ratios over every committed run,
#                               each run's host named by its matmul peak (tools/host_ratios.py)
#   ./run.sh benchmark profile [ARGS]   where a training step's time goes (tools/profile_step.py)
#   ./run.sh benchmark scale [ARGS]   Jigsaw at Kaggle's size: featurisation time, peak memory,
#                    warm-cache start, prediction rows/s (tools/bench_scale.py)
#   ./run.sh reproduce jigsaw2019 --device=cpu|gpu|tpu --data_dir=DIR --output_dir=DIR
#                    (--model_dir=DIR | --hub=HANDLE) [ARGS] [-- RUN_CLASSIFIER FLAGS]   the 2019
#                    Jigsaw GPU-against-TPU run on this device, and the table with 2019's rows
#                    (tools/reproduce.py; docs/reproduce/jigsaw2019.md)
#   ./run.sh serve OUTPUT_OR_EXPORT_DIR [--port 8501] [--backend=onnx] [ARGS]   serve a
#                    fine-tuned model over HTTP in TF Serving's REST shape, on TensorFlow or
#                    on onnxruntime (serving/server.py; --help lists ARGS)
#   ./run.sh setup   create both Python environments from requirements.txt
#   ./run.sh setup --cuda   add TF 2.15's GPU libraries to its environment, and keep them
#                    (tools/requirements-cuda.txt; --no-cuda removes them)
#   ./run.sh setup hf   create the optional Hugging Face environment (tools/requirements-hf.txt)
#   ./run.sh setup onnx   create the optional ONNX environment: onnxruntime on Python 3.12,
#                    no TensorFlow (tools/requirements-onnx.txt)
#   ./run.sh predict-onnx EXPORT [--int8] < TEXTS   predict with an export's ONNX model in that
#                    environment, one text a line in, one JSON result a line out
#   ./run.sh shell tf1|tf2 -- CMD...   run a command inside one environment
set -Eeuo pipefail
CALLER_DIR=$(pwd)  # (where a path given to ./run.sh serve is relative to)
cd "$(dirname "$0")"
ROOT=$(pwd)
VENVS="$ROOT/.venvs"
CUDA_MARK="$VENVS/.tf2-cuda"  # (present: .venvs/tf2 keeps TF 2.15's CUDA extra)

trap 'echo "run.sh: a command failed (line $LINENO); see the output above" >&2' ERR

say() { printf '\n==> %s\n' "$*"; }
die() { printf 'run.sh: %s\n' "$*" >&2; exit 1; }

# The interpreter for a runtime: $PYTHON37 / $PYTHON311, then pyenv's versions, then PATH.
# Each candidate must run and report the right version (a pyenv shim may exist yet not run).
find_python() {
  local runtime=$1 candidates=() versions
  if [ "$runtime" = tf1 ]; then
    versions="(3, 7)"
    candidates=("${PYTHON37:-}" "$HOME"/.pyenv/versions/3.7*/bin/python3.7 python3.7)
  elif [ "$runtime" = hf ]; then  # (its pinned transformers and numpy need 3.11)
    versions="(3, 11)"
    candidates=("${PYTHON311:-}" "$HOME"/.pyenv/versions/3.11*/bin/python3.11 python3.11)
  elif [ "$runtime" = onnx ]; then  # (a current Python, where no TensorFlow runs)
    versions="(3, 12)"
    candidates=("${PYTHON312:-}" "$HOME"/.pyenv/versions/3.12*/bin/python3.12 python3.12)
  else
    versions="(3, 9) (3, 10) (3, 11)"
    candidates=("${PYTHON311:-}" "$HOME"/.pyenv/versions/3.11*/bin/python3.11 python3.11
                "$HOME"/.pyenv/versions/3.10*/bin/python3.10 python3.10
                "$HOME"/.pyenv/versions/3.9*/bin/python3.9 python3.9 python3)
  fi
  local c path version
  for c in "${candidates[@]}"; do
    [ -n "$c" ] || continue
    path=$(command -v "$c" 2>/dev/null) || continue
    version=$("$path" -c 'import sys; print(tuple(sys.version_info[:2]))' 2>/dev/null) || continue
    case " $versions " in *" $version "*) echo "$path"; return 0 ;; esac
  done
  return 1
}

# The Python version to fetch for a runtime when none is found.
fetch_version() {
  case $1 in tf1) echo 3.7 ;; onnx) echo 3.12 ;; *) echo 3.11 ;; esac
}

# The runtime's interpreter: found (find_python), or else fetched with uv, which manages
# interpreters of its own (a machine whose only Python is 3.12 or newer has neither 3.7 nor
# 3.11). uv itself comes from the package index, into .venvs/.uv. Says what it does on
# stderr; fails when neither works (RUN_SH_NO_UV=1: never fetch).
python_for() {
  local runtime=$1 found version uv
  found=$(find_python "$runtime") && { echo "$found"; return 0; }
  [ "${RUN_SH_NO_UV:-}" = 1 ] && return 1
  version=$(fetch_version "$runtime")
  uv=$(uv_command) || return 1
  found=$("$uv" python find "$version" 2>/dev/null) && [ -n "$found" ] && {
    echo "$found"; return 0; }
  echo "run.sh: no Python $version here for $runtime: fetching one with uv ($uv python install $version)" >&2
  "$uv" python install "$version" >&2 || return 1
  "$uv" python find "$version"
}

# uv: on PATH, or installed earlier into .venvs/.uv, or now with pip from the package index.
uv_command() {
  command -v uv 2>/dev/null && return 0
  [ -x "$VENVS/.uv/bin/uv" ] && { echo "$VENVS/.uv/bin/uv"; return 0; }
  local py
  py=$(command -v python3 2>/dev/null) || return 1
  echo "run.sh: installing uv from the package index into $VENVS/.uv, to fetch a Python" >&2
  "$py" -m pip install --quiet --disable-pip-version-check --target "$VENVS/.uv" uv >&2 ||
    return 1
  [ -x "$VENVS/.uv/bin/uv" ] && echo "$VENVS/.uv/bin/uv"
}

# What to do when a runtime's Python can be neither found nor fetched.
NO_PYTHON_FIX="install uv (python3 -m pip install uv) and run again, or pyenv, or your distribution's python3.11 (and python3.7 for TF 1.15); or name them with PYTHON311=/path/to/python3.11 and PYTHON37=/path/to/python3.7"

# Creates (or reuses, when its requirements are unchanged) .venvs/<runtime>: tf1 and tf2
# from requirements.txt; hf, the optional Hugging Face environment of the benchmark, from
# tools/requirements-hf.txt with TF 2.15's interpreter; onnx, the optional TensorFlow-free
# environment of ONNX exports, from tools/requirements-onnx.txt on Python 3.12.
setup_env() {
  local runtime=$1 python venv="$VENVS/$1" stamp requirements=requirements.txt
  if [ "$runtime" = hf ]; then
    requirements=tools/requirements-hf.txt
    python=$(python_for hf) || die "the Hugging Face path needs Python 3.11: $NO_PYTHON_FIX"
  elif [ "$runtime" = onnx ]; then
    requirements=tools/requirements-onnx.txt
    python=$(python_for onnx) || die "the ONNX environment needs Python 3.12: $NO_PYTHON_FIX"
  else
    python=$(python_for "$runtime") || return 1
  fi
  local extra=()
  if [ "$runtime" = tf2 ] && [ -f "$CUDA_MARK" ]; then extra=(tools/requirements-cuda.txt); fi
  stamp=$( (cat "$requirements" ${extra[@]+"${extra[@]}"}; "$python" --version 2>&1) |
           sha256sum | cut -c1-16)
  if [ -f "$venv/.stamp" ] && [ "$(cat "$venv/.stamp")" = "$stamp" ]; then
    return 0
  fi
  say "creating $runtime environment with $("$python" --version 2>&1) in $venv"
  rm -rf "$venv"
  "$python" -m venv "$venv"
  if [ "$runtime" = tf1 ]; then
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade "pip<24.1"
  else
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
  fi
  # (--no-compile: pip would byte-compile each package's files on one core; compileall
  # below does it on every core, beside the kernels' build, at a lower priority: the
  # kernels' compile is the longer of the two)
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-compile \
    -r "$requirements" ${extra[@]+-r "${extra[@]}"}
  local compiling
  ( nice -n 10 "$venv/bin/python" -m compileall -q -j 0 \
      "$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
      > /dev/null 2>&1 || true ) &  # (files of other Python versions fail, as in pip: skipped)
  compiling=$!
  if [ "$runtime" = tf1 ] || [ "$runtime" = tf2 ]; then
    # The encoder's fused CPU kernels for this TensorFlow (modeling/fused.py; a few
    # seconds; without a compiler, runs use TensorFlow's own ops and say so).
    (cd "$ROOT" && "$venv/bin/python" -m modeling.fused 2>/dev/null) || true
  fi
  wait "$compiling"
  echo "$stamp" > "$venv/.stamp"
}

# Creates or updates several environments at the same time (downloads and unpacking
# overlap: from scratch, about a minute less than one after the other); each one's
# output is shown when all have ended, and a failure names its environment.
setup_envs_at_once() {
  local r logdir failed=() pids=()
  logdir=$(mktemp -d "${TMPDIR:-/tmp}/run-setup.XXXXXX")
  for r in "$@"; do
    ( setup_env "$r" > "$logdir/$r.log" 2>&1 ) &
    pids+=($!)
  done
  local i=0
  for r in "$@"; do
    wait "${pids[$i]}" || failed+=("$r")
    cat "$logdir/$r.log"
    i=$((i + 1))
  done
  rm -rf "$logdir"
  [ "${#failed[@]}" -eq 0 ] || die "could not build the environment of: ${failed[*]} (see above)"
}

# The runtimes whose interpreter exists here. In CI both must exist.
available_runtimes() {
  local r
  for r in tf1 tf2; do
    if python_for "$r" >/dev/null; then echo "$r"
    elif [ "${CI:-}" = true ]; then die "CI needs both runtimes, but no Python for $r could be found or fetched: $NO_PYTHON_FIX"
    else
      case $r in
        tf1) echo "run.sh: no Python 3.7 found or fetched: the TF 1.15 runtime is skipped ($NO_PYTHON_FIX)" >&2 ;;
        tf2) echo "run.sh: no Python 3.9-3.11 found or fetched: the TF 2.15 runtime is skipped ($NO_PYTHON_FIX)" >&2 ;;
      esac
    fi
  done
}

cmd_setup() {
  local r runtimes
  case "${1:-}" in
    hf|onnx) setup_env "$1"; return ;;
    --cuda|--no-cuda)
      python_for tf2 >/dev/null || die "$1 is about TF 2.15's environment, and no Python 3.9-3.11 could be found or fetched: $NO_PYTHON_FIX"
      mkdir -p "$VENVS"
      if [ "$1" = --no-cuda ]; then rm -f "$CUDA_MARK"; setup_env tf2; return; fi
      [ "$(uname -s)" = Linux ] || die "--cuda: TF 2.15's CUDA libraries are for Linux only"
      touch "$CUDA_MARK"
      # (kept only once the environment is built: else later runs would retry the extra)
      local status=0
      set +e
      ( setup_env tf2 )  # (a subshell outside a condition: set -e stops it at a failure)
      status=$?
      set -e
      if [ "$status" -ne 0 ]; then
        rm -f "$CUDA_MARK"
        die "the CUDA extra could not be installed (see above): ./run.sh setup --no-cuda builds the CPU environment again"
      fi
      return ;;
    "") ;;
    *) die "setup takes hf, onnx, --cuda or --no-cuda, not $1" ;;
  esac
  runtimes=$(available_runtimes)
  [ -n "$runtimes" ] || die "neither Python 3.7 nor Python 3.9-3.11 could be found or fetched: $NO_PYTHON_FIX"
  for r in $runtimes; do setup_env "$r"; done
}

# The suite's training runs write checkpoints under the temp folder, up to about a
# gigabyte at once; a full disk would fail tests far from the cause. ($TEST_SPACE_MB sets
# what is required.)
TEST_SPACE_MB=${TEST_SPACE_MB:-2000}
check_test_space() {
  local dir=${TMPDIR:-/tmp} free_mb
  case $TEST_SPACE_MB in
    ''|*[!0-9]*) die "TEST_SPACE_MB=$TEST_SPACE_MB must be a whole number of megabytes" ;;
  esac
  [ -d "$dir" ] || die "the temp folder $dir (TMPDIR) does not exist: create it, or unset TMPDIR"
  free_mb=$(df -Pm "$dir" | awk 'NR == 2 {print $4}') || die "cannot read the free space of $dir"
  [ "$free_mb" -ge "$TEST_SPACE_MB" ] || die "the tests need ${TEST_SPACE_MB} MB free in $dir (their checkpoints go there), which has ${free_mb} MB: free some space, or set TMPDIR to a folder on a larger disk"
}

# One runtime's suite: a header naming Python and TensorFlow, then pytest; its exit code.
run_suite() {
  local r=$1; shift
  say "tests on $r: $("$VENVS/$r/bin/python" -c 'import sys, tensorflow as t; print("Python %s, TensorFlow %s" % (sys.version.split()[0], t.__version__))' 2>/dev/null)"
  "$VENVS/$r/bin/python" -m pytest tests "$@"
}

# How far each runtime's suite is, from pytest's "[ 40%]" marks in its log.
suite_progress() {
  local logdir=$1 r mark line=""; shift
  for r in "$@"; do
    if [ -f "$logdir/$r.status" ]; then mark="done"
    else mark=$( (grep -o '\[ *[0-9]*%\]' "$logdir/$r.log" 2>/dev/null || true) | tail -1 | tr -d '[] ')
    fi
    line="$line $r ${mark:-starting},"
  done
  echo "${line%,}"
}

cmd_test() {
  local r runtimes failed=() status args=() start logdir pids=()
  if [ "${1:-}" = hf ]; then  # the optional tier: its tests alone, its environment built
    shift
    export TEST_HF_TIER=1
    set -- -m hf "$@"
  fi
  # --fast: the quick tier only (no end-to-end runs, no full data sets), for day-to-day work.
  for a in "$@"; do
    if [ "$a" = "--fast" ]; then args+=(-m "not slow and not extended"); else args+=("$a"); fi
  done
  runtimes=$(available_runtimes)
  [ -n "$runtimes" ] || die "neither Python 3.7 nor Python 3.9-3.11 could be found or fetched: $NO_PYTHON_FIX"
  check_test_space
  # The ONNX environment (onnxruntime without TensorFlow: small) is built with the
  # runtimes; the Hugging Face one (transformers on PyTorch, several GB) only for the
  # optional tier, ./run.sh test hf, whose tests are left out otherwise (one line says so).
  local environments="$runtimes onnx"
  if [ "${TEST_HF_TIER:-}" = 1 ]; then environments="$environments hf"; fi
  setup_envs_at_once $environments
  start=$SECONDS  # the suite's time, without building environments
  export TESTED_RUNTIMES="$(echo $runtimes)"  # a one_runtime test runs on the runtime it names
  if [ "${TEST_ONE_RUNTIME_AT_A_TIME:-}" = 1 ] || [ "$(echo $runtimes | wc -w)" -lt 2 ]; then
    for r in $runtimes; do
      status=0
      run_suite "$r" ${args[@]+"${args[@]}"} || status=$?  # (pytest reports its failures)
      [ "$status" -eq 0 ] || failed+=("$r (pytest exit $status)")
    done
  else
    # The runtimes' suites run at the same time: one alone keeps about one of two cores
    # busy (process start-ups, Python between TensorFlow's ops), and together they end
    # in about two thirds of the time. Each one's output is shown when it ends.
    # Each TensorFlow process would start thread pools as wide as the machine, and the
    # two suites' processes would then contend for the same cores: each suite's
    # TensorFlow is given its share of the cores instead (on 2 cores, one thread each).
    # A value the caller set is kept.
    local share=$(( $(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2) / $(echo $runtimes | wc -w) ))
    [ "$share" -ge 1 ] || share=1
    export TF_NUM_INTRAOP_THREADS=${TF_NUM_INTRAOP_THREADS:-$share}
    export TF_NUM_INTEROP_THREADS=${TF_NUM_INTEROP_THREADS:-$share}
    logdir=$(mktemp -d "${TMPDIR:-/tmp}/run-tests.XXXXXX")
    trap 'for p in ${pids[*]}; do pkill -P "$p"; kill "$p"; done 2>/dev/null; rm -rf "$logdir"; exit 130' INT TERM
    say "tests on $(echo $runtimes | sed 's/ / and /') at the same time (TEST_ONE_RUNTIME_AT_A_TIME=1: one after the other); each one's output follows when it ends"
    for r in $runtimes; do
      ( export PYTHONUNBUFFERED=1; status=0
        run_suite "$r" ${args[@]+"${args[@]}"} > "$logdir/$r.log" 2>&1 || status=$?
        echo "$status" > "$logdir/$r.status" ) &
      pids+=($!)
    done
    local shown="" next_report=$((SECONDS + 60))
    while [ "$(echo $shown | wc -w)" -lt "$(echo $runtimes | wc -w)" ]; do
      for r in $runtimes; do
        case " $shown " in *" $r "*) continue ;; esac
        [ -f "$logdir/$r.status" ] || continue
        cat "$logdir/$r.log"
        status=$(cat "$logdir/$r.status")
        [ "$status" -eq 0 ] || failed+=("$r (pytest exit $status)")
        shown="$shown $r"
      done
      sleep 1
      if [ "$SECONDS" -ge "$next_report" ]; then
        echo "... $(( (SECONDS - start) / 60 )) min:$(suite_progress "$logdir" $runtimes)"
        next_report=$((next_report + 60))
      fi
    done
    wait
    trap - INT TERM
    rm -rf "$logdir"
  fi
  if [ "${#failed[@]}" -gt 0 ]; then
    die "tests failed on: ${failed[*]}"
  fi
  say "all tests passed on: $(echo $runtimes), in $(( (SECONDS - start) / 60 )) min $(( (SECONDS - start) % 60 )) s"
}

cmd_shell() {
  local runtime=${1:-}; shift || true
  [ "${1:-}" = "--" ] && shift
  [ -x "$VENVS/$runtime/bin/python" ] || setup_env "$runtime" || die "no environment $runtime"
  PATH="$VENVS/$runtime/bin:$PATH" "$@"
}

# The runtime of one-runtime commands: TF 2.15 (faster on modern CPUs), or TF 1.15 when only
# Python 3.7 exists. $1 names the command for the error.
one_runtime() {
  local r
  for r in tf2 tf1; do
    if python_for "$r" >/dev/null; then echo "$r"; return 0; fi
  done
  die "$1 needs Python 3.9-3.11 (TF 2.15) or Python 3.7 (TF 1.15): $NO_PYTHON_FIX"
}

cmd_demo() {
  local runtime
  runtime=$(one_runtime "the demo")
  setup_env "$runtime"
  say "demo on $runtime"
  TF_CPP_MIN_LOG_LEVEL=2 "$VENVS/$runtime/bin/python" -m tools.demo "$@"
}

# Whether a benchmark command needs the Hugging Face environment: --variants naming hf,
# or time to quality unless --skip_hf or a --paths without hf.
wants_hf() {
  local a previous="" option=--variants
  if [ "${1:-}" = quality ]; then
    case " $* " in *" --skip_hf "*|*" --help "*|*" -h "*) return 1 ;; esac
    case " $* " in *" --paths"*) option=--paths ;; *) return 0 ;; esac
  fi
  for a in "$@"; do
    case "$previous $a" in
      "$option "*hf*|*" $option="*hf*) return 0 ;;
    esac
    previous=$a
  done
  return 1
}

cmd_benchmark() {
  cmd_setup
  if wants_hf "$@"; then setup_env hf; fi
  local runner=tf2
  [ -x "$VENVS/tf2/bin/python" ] || runner=tf1
  if [ "${1:-}" = predictor ]; then
    shift
    TF_CPP_MIN_LOG_LEVEL=2 "$VENVS/$runner/bin/python" -m tools.bench_predictor "$@"
  elif [ "${1:-}" = serve ]; then
    shift
    TF_CPP_MIN_LOG_LEVEL=2 "$VENVS/$runner/bin/python" -m tools.bench_serve "$@"
  elif [ "${1:-}" = profile ]; then
    shift
    TF_CPP_MIN_LOG_LEVEL=2 "$VENVS/$runner/bin/python" -m tools.profile_step "$@"
  elif [ "${1:-}" = quality ]; then
    shift
    TF_CPP_MIN_LOG_LEVEL=2 "$VENVS/$runner/bin/python" -m tools.time_to_quality "$@"
  elif [ "${1:-}" = decisions ]; then
    shift
    TF_CPP_MIN_LOG_LEVEL=2 "$VENVS/$runner/bin/python" -m tools.decision_figures "$@"
  elif [ "${1:-}" = long-texts ]; then
    shift
    TF_CPP_MIN_LOG_LEVEL=2 "$VENVS/$runner/bin/python" -m tools.long_text_figures "$@"
  elif [ "${1:-}" = fast-paths ]; then
    shift
    TF_CPP_MIN_LOG_LEVEL=2 "$VENVS/$runner/bin/python" -m tools.fast_path_quality "$@"
  elif [ "${1:-}" = table ]; then
    shift
    "$VENVS/$runner/bin/python" -m tools.run_table "$@"
  elif [ "${1:-}" = hosts ]; then
    shift
    "$VENVS/$runner/bin/python" -m tools.host_ratios "$@"
  elif [ "${1:-}" = scale ]; then
    shift
    TF_CPP_MIN_LOG_LEVEL=2 "$VENVS/$runner/bin/python" -m tools.bench_scale "$@"
  else
    TF_CPP_MIN_LOG_LEVEL=2 "$VENVS/$runner/bin/python" -m tools.benchmark "$@"
  fi
}

# A module of the project run where ./run.sh was called (its relative paths are the
# caller's), on TF 2.15 where it can: in_caller_dir WHAT MODULE ARGS...
in_caller_dir() {
  local runtime what=$1 module=$2
  shift 2
  runtime=$(one_runtime "$what")
  setup_env "$runtime" >&2
  cd "$CALLER_DIR"
  PYTHONPATH="$ROOT" TF_CPP_MIN_LOG_LEVEL=2 exec "$VENVS/$runtime/bin/python" -m "$module" "$@"
}

cmd_reproduce() { in_caller_dir "reproducing a comparison" tools.reproduce "$@"; }

# The server runs on TensorFlow, or with --backend=onnx in the TensorFlow-free ONNX
# environment (the export's onnx/ folder in onnxruntime).
cmd_serve() {
  case " $* " in
    *" --backend=onnx "*|*" --backend onnx "*) in_onnx_env serving.server "$@" ;;
  esac
  in_caller_dir "serving" serving.server "$@"
}

# A module of the project run in the TensorFlow-free ONNX environment, where ./run.sh was
# called: in_onnx_env MODULE ARGS...
in_onnx_env() {
  local module=$1
  shift
  setup_env onnx >&2
  cd "$CALLER_DIR"
  PYTHONPATH="$ROOT" exec "$VENVS/onnx/bin/python" -m "$module" "$@"
}

# Predicting with an export's ONNX model in the TensorFlow-free environment.
cmd_predict_onnx() { in_onnx_env serving.onnx_predictor "$@"; }

# Which interpreter each environment is built with (fetched with uv where none is found).
cmd_pythons() {
  local r path status=0
  for r in tf1 tf2 onnx hf; do
    if path=$(python_for "$r"); then echo "$r: $path ($("$path" --version 2>&1))"
    else echo "$r: none ($NO_PYTHON_FIX)"; status=1; fi
  done
  return $status
}

case "${1:-}" in
  pythons) shift; cmd_pythons ;;
  predict-onnx) shift; cmd_predict_onnx "$@" ;;
  benchmark) shift; cmd_benchmark "$@" ;;
  serve) shift; cmd_serve "$@" ;;
  reproduce) shift; cmd_reproduce "$@" ;;
  demo) shift; cmd_demo "$@" ;;
  setup) shift; cmd_setup "$@" ;;
  test) shift; cmd_test "$@" ;;
  shell) shift; cmd_shell "$@" ;;
  *) sed -n '2,/^set /s/^# \{0,1\}//p' "$0"; exit 2 ;;
esac
