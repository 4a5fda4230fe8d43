#!/usr/bin/env bash
# What CURVE costs the default job: runs `osprey launch` on configs/local.yaml (security none) and
# configs/local-curve.yaml (security curve), each with every cluster.io_threads value asked for,
# interleaved round by round (so load drifts hit every case alike), and prints each case's
# samples/s (median of the rounds, and every round), its held-out AUC and the cost against none
# with the same io_threads.
#   bench/security/curve_cost.sh BIN_DIR [ROUNDS (3)] [IO_THREADS list (1,2)] [osprey launch args...]
set -u -o pipefail
bin=${1:?usage: $0 BIN_DIR [ROUNDS] [IO_THREADS,...] [launch args...]}
rounds=${2:-3}
io_list=${3:-1,2}
shift $(( $# < 3 ? $# : 3 ))
cd "$(dirname "$0")/../.."
work=$(mktemp -d /tmp/osprey-curve-cost.XXXXXX)
declare -A sps auc
IFS=, read -r -a ios <<<"$io_list"
for r in $(seq 1 "$rounds"); do
  for io in "${ios[@]}"; do
    for mode in none curve; do
      cfg=configs/local.yaml
      [ "$mode" = curve ] && cfg=configs/local-curve.yaml
      out="$work/$mode-$io-$r.txt"
      if ! "$bin/osprey" launch "$cfg" --bin-dir "$bin" --quiet --log-dir "$work/logs-$mode-$io-$r" \
          --set cluster.io_threads="$io" "$@" >"$out" 2>&1; then
        echo "curve_cost: $mode io_threads=$io round $r FAILED:" >&2
        tail -n 20 "$out" >&2
        exit 1
      fi
      sps[$mode-$io]+="$(awk '/samples\/s/{print $2}' "$out") "
      auc[$mode-$io]+="$(awk '/held-out AUC/{print $3}' "$out") "
    done
  done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END{print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
echo "curve_cost: $(nproc) cores, $rounds rounds interleaved, default job (configs/local*.yaml)"
printf "%-6s %-10s %12s %8s  %s\n" mode io_threads "samples/s" AUC "rounds"
for io in "${ios[@]}"; do
  base=$(median <<<"${sps[none-$io]}")
  for mode in none curve; do
    m=$(median <<<"${sps[$mode-$io]}")
    a=$(median <<<"${auc[$mode-$io]}")
    cost=""
    [ "$mode" = curve ] && cost=$(awk -v b="$base" -v c="$m" 'BEGIN{printf "cost %.1f%%", 100*(b-c)/b}')
    printf "%-6s %-10s %12s %8s  %s %s\n" "$mode" "$io" "$m" "$a" "${sps[$mode-$io]}" "$cost"
  done
done
rm -rf "$work"
