#!/usr/bin/env bash
# A local Prometheus scraping `gdrtrace serve`, with gdrtrace's alerting
# rules loaded. Installs Debian's prometheus package when missing, then runs
# Prometheus in the foreground (Ctrl-C stops it).
#
#   bash scripts/prometheus.sh                      # scrapes 127.0.0.1:9464, UI on 127.0.0.1:9090
#   bash scripts/prometheus.sh --target HOST:PORT --listen 127.0.0.1:9091 \
#        --data DIR --scrape-interval 1s
#
# Then, e.g., the transport of every traced process:
#   curl -s 'http://127.0.0.1:9090/api/v1/query' --data-urlencode \
#     'query=max by (pod, pid, comm, communicator, transport) (gdrtrace_transport_verdict_info)'
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

target=127.0.0.1:9464
listen=127.0.0.1:9090
data=$repo/target/prometheus
interval=5s
while [ $# -gt 0 ]; do
  case "$1" in
    --target) target=$2; shift 2 ;;
    --listen) listen=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --scrape-interval) interval=$2; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "prometheus.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

if ! command -v prometheus >/dev/null 2>&1; then
  echo "prometheus.sh: installing Debian's prometheus package" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi

mkdir -p "$data"
cat > "$data/prometheus.yml" <<YAML
global:
  scrape_interval: $interval
  evaluation_interval: $interval
rule_files:
  - $repo/deploy/prometheus/rules.yaml
scrape_configs:
  - job_name: gdrtrace
    honor_labels: true
    static_configs:
      - targets: ['$target']
YAML
echo "prometheus.sh: scraping http://$target/metrics every $interval; UI and API on http://$listen" >&2
exec prometheus \
  --config.file="$data/prometheus.yml" \
  --storage.tsdb.path="$data/tsdb" \
  --web.listen-address="$listen" \
  --log.level=warn
