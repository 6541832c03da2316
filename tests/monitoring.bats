#!/usr/bin/env bats
# What ships for operators' monitoring (monitoring/): the alerting rules,
# checked and unit-tested by promtool; a real Prometheus from Debian
# scraping a real agent, asked through its HTTP API; and the Grafana
# dashboard. Every metric the rules or the dashboard name must be one the
# agent serves.

load helpers/common
load helpers/fleet

setup() { fleet_setup; }
teardown() { bh_teardown; }

MONITORING="$BH_ROOT/monitoring"

# agent_with_metrics: Redis, host a with a fleet compartment [db]
# (fleet_limit 4) over the hold server and a plain one, [cache] (limit 7),
# nothing has connected to; its agent serving /metrics on $METRICS_PORT.
agent_with_metrics() {
    start_redis
    start_server srv -1
    host a 4 "$SERVER_PORT"
    printf '[cache]\nlimit = 7\nmatch = 127.0.0.1:9\n' >>"$T/a.ini"
    METRICS_PORT=$(free_port)
    bg "$T/agent.a" "$BULKHEAD" agent -v -c "$T/a.ini" --metrics "127.0.0.1:$METRICS_PORT"
    wait_for file_has "$T/agent.a.err" 'refresh'
    wait_for curl -sf -o "$T/metrics" "http://127.0.0.1:$METRICS_PORT/metrics"
}

# prom_value QUERY: the value of the one series QUERY gives in the
# Prometheus on $PROM_PORT, or nothing.
prom_value() {
    local answer
    answer=$(curl -sf -G "http://127.0.0.1:$PROM_PORT/api/v1/query" \
                 --data-urlencode "query=$1") || return 1
    python3 -c 'import json, sys
r = json.loads(sys.argv[1])["data"]["result"]
print(r[0]["value"][1] if len(r) == 1 else "")' "$answer"
}

# What each side had when a wait on Prometheus ran out: its answer, the
# agent's own line, what Prometheus said of the scrape and logged.
prom_seen() {
    echo "Prometheus: $(prom_value "$1" || echo "no answer")"
    echo "agent: $(curl -sf "http://127.0.0.1:$METRICS_PORT/metrics" | grep -F "${1%%\{*}" | head -3)"
    echo "scrape: $(curl -sf "http://127.0.0.1:$PROM_PORT/api/v1/targets" | head -c 600)"
    tail -n 5 "$T/prometheus.err"
}

prom_value_is() { [[ "$(prom_value "$1")" == "$2" ]]; }

@test "alerting rules: promtool finds them valid, and each alert fires in its unit test when it should and only then" {
    command -v promtool >/dev/null || fail "promtool is not installed (make deps)"
    run promtool check rules "$MONITORING/bulkhead.rules.yml"
    assert_success
    assert_line --partial "SUCCESS: 6 rules found"
    cd "$MONITORING"
    run promtool test rules bulkhead.rules.test.yml
    assert_success
    assert_line --partial "SUCCESS"
}

@test "a real Prometheus scraping the agent: every compartment of the rules is a series before its first connect, in use as the server saw it, and the alerting rules load" {
    command -v prometheus >/dev/null || fail "prometheus is not installed (make deps)"
    agent_with_metrics
    holders a 1 60000
    wait_for open_is srv 1
    PROM_PORT=$(free_port)
    # A scrape may take as long as its interval; 2 s, not 1, so that a
    # loaded machine's slow answer is not a failed scrape (its series
    # then go stale).
    cat >"$T/prometheus.yml" <<EOF2
global:
  scrape_interval: 2s
  evaluation_interval: 1s
rule_files:
  - $MONITORING/bulkhead.rules.yml
scrape_configs:
  - job_name: bulkhead
    static_configs:
      - targets: ['127.0.0.1:$METRICS_PORT']
EOF2
    bg "$T/prometheus" prometheus --config.file="$T/prometheus.yml" \
        --storage.tsdb.path="$T/prometheus-data" --web.listen-address="127.0.0.1:$PROM_PORT"
    wait_for -t 30 prom_value_is "up{job=\"bulkhead\"}" 1
    local in_use="bulkhead_permits_in_use{namespace=\"$NS-a\",compartment=\"db\"}"
    wait_for -t 30 prom_value_is "$in_use" 1 || fail "$(prom_seen "$in_use")"
    assert_equal "$(server_stat srv open)" 1
    assert_equal "$(prom_value "bulkhead_fleet_limit{namespace=\"$NS-a\",compartment=\"db\"}")" 4
    assert_equal "$(prom_value "bulkhead_permits_limit{namespace=\"$NS-a\",compartment=\"cache\"}")" 7
    assert_equal "$(prom_value "bulkhead_permits_in_use{namespace=\"$NS-a\",compartment=\"cache\"}")" 0
    run bash -c "curl -sf 'http://127.0.0.1:$PROM_PORT/api/v1/rules' | python3 -c '
import json, sys
rules = [r for g in json.load(sys.stdin)[\"data\"][\"groups\"] for r in g[\"rules\"]]
print(len(rules), sorted({r[\"health\"] for r in rules}))'"
    assert_output "6 ['ok']"
}

@test "the Grafana dashboard: every metric its expressions name is one the agent serves" {
    agent_with_metrics
    run python3 -c '
import json, re, sys
dashboard = json.load(open(sys.argv[1]))
served = set(re.findall(r"^# TYPE (\w+) ", open(sys.argv[2]).read(), re.M))
named = set()
for panel in dashboard["panels"]:
    for target in panel["targets"]:
        named |= set(re.findall(r"\bbulkhead_\w+", target["expr"]))
for variable in dashboard["templating"]["list"]:
    named |= set(re.findall(r"\bbulkhead_\w+", variable.get("query", "")))
family = lambda name: re.sub(r"_(bucket|sum|count)$", "", name) \
    if re.sub(r"_(bucket|sum|count)$", "", name) in served else name
missing = sorted(n for n in named if family(n) not in served)
print(len(dashboard["panels"]), "panels,", len(named), "metrics,", "missing:", missing)' \
        "$MONITORING/bulkhead.dashboard.json" "$T/metrics"
    assert_success
    assert_output --regexp '^9 panels, [0-9]+ metrics, missing: \[\]$'
}

@test "the alerting rules: every metric their expressions name is one the agent serves" {
    agent_with_metrics
    run python3 -c '
import re, sys, yaml
served = set(re.findall(r"^# TYPE (\w+) ", open(sys.argv[2]).read(), re.M))
rules = yaml.safe_load(open(sys.argv[1]))
exprs = [rule["expr"] for group in rules["groups"] for rule in group["rules"]]
named = set()
for expr in exprs:
    named |= set(re.findall(r"\bbulkhead_\w+", expr))
family = lambda name: re.sub(r"_(bucket|sum|count)$", "", name)
missing = sorted(n for n in named if n not in served and family(n) not in served)
print(len(exprs), "expressions,", len(named), "metrics,", "missing:", missing)' \
        "$MONITORING/bulkhead.rules.yml" "$T/metrics"
    assert_success
    assert_output --regexp '^6 expressions, [0-9]+ metrics, missing: \[\]$'
}
