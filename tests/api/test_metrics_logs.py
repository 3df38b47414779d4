"""GET /metrics (Prometheus text format) and the JSON request log on stderr."""
import re

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*"'
                    r'(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*")*)?\})? '
                    r'(-?[0-9.eE+-]+|NaN|\+Inf|-Inf)$')


def scrape(client, path="/metrics"):
    """{(name, labels): value} after checking the exposition format line by line."""
    r = client.get(path)
    assert r.status == 200, r
    assert r.header("content-type").startswith("text/plain")
    assert "version=0.0.4" in r.header("content-type")
    text = r.text
    assert text.endswith("\n")
    typed, helped, samples = {}, set(), {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            helped.add(line.split()[2])
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            assert kind in ("counter", "gauge", "histogram"), line
            typed[name] = kind
        else:
            m = SAMPLE.match(line)
            assert m, f"not a Prometheus sample line: {line!r}"
            name, labels, value = m.group(1), m.group(2) or "", m.group(3)
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            assert name in typed or base in typed, f"sample without # TYPE: {line!r}"
            assert (name, labels) not in samples, f"duplicate series: {line!r}"
            samples[(name, labels)] = float(value)
    assert set(typed) <= helped
    return samples


def val(samples, name, labels=""):
    return samples.get((name, labels), 0.0)


def test_metrics_format_and_gauges(client, episode):
    m = scrape(client)
    health = client.get("/v1/health").json
    assert val(m, "kgym_episodes_active") == health["active_episodes"] >= 1
    assert val(m, "kgym_episodes_max") == 1024
    assert val(m, "kgym_draining") == 0
    assert val(m, "kgym_steps_in_flight") == 0
    assert val(m, "kgym_uptime_seconds") > 0
    # Histogram buckets are cumulative and end with +Inf == _count.
    buckets = sorted(((k[1], v) for k, v in m.items()
                      if k[0] == "kgym_reset_duration_seconds_bucket"),
                     key=lambda kv: float(re.search(r'le="([^"]+)"', kv[0]).group(1)
                                          .replace("+Inf", "inf")))
    values = [v for _, v in buckets]
    assert values == sorted(values) and values
    assert 'le="+Inf"' in buckets[-1][0]
    assert values[-1] == val(m, "kgym_reset_duration_seconds_count") >= 1


def test_v1_metrics_alias(client):
    a = scrape(client, "/metrics")
    b = scrape(client, "/v1/metrics")
    assert {k[0] for k in a} <= {k[0] for k in b}


def test_counters_move(client):
    before = scrape(client)
    ep = client.create("fixture/alpha")["episode_id"]
    client.step(ep, actions=[{"tool": "Bash", "args": {"command": "true"}},
                             {"tool": "Bash", "args": {"command": "true"}},
                             {"tool": "Read", "args": {"file_path": "missing.txt"}}])
    client.step(ep, {"tool": "Nope", "args": {}})
    client.post(f"/v1/episodes/{ep}/step", b"{bad")
    client.delete(f"/v1/episodes/{ep}")
    after = scrape(client)

    def delta(name, labels=""):
        return val(after, name, labels) - val(before, name, labels)

    assert delta("kgym_episodes_created_total") == 1
    assert delta("kgym_episodes_ended_total", '{reason="closed"}') == 1
    assert delta("kgym_tool_calls_total", '{tool="Bash"}') == 2
    assert delta("kgym_tool_calls_total", '{tool="Read"}') == 1
    assert delta("kgym_tool_errors_total", '{tool="Read",code="FILE_NOT_FOUND"}') == 1
    assert delta("kgym_tool_errors_total", '{tool="unknown",code="UNKNOWN_TOOL"}') == 1
    assert delta("kgym_tool_duration_seconds_count", '{tool="Bash"}') == 2
    assert delta("kgym_http_requests_total",
                 '{route="/v1/episodes/{id}/step",status="200"}') == 2
    assert delta("kgym_http_requests_total",
                 '{route="/v1/episodes/{id}/step",status="400"}') == 1
    assert delta("kgym_http_requests_total", '{route="/v1/episodes",status="201"}') == 1
    assert delta("kgym_http_requests_total", '{route="/v1/episodes/{id}",status="200"}') == 1
    assert val(after, "kgym_episodes_active") == val(before, "kgym_episodes_active")


def test_metrics_labels_stay_bounded(client):
    """Unknown paths and ids do not become label values (bounded cardinality)."""
    client.get("/v1/no/such/route/with\"quote")
    client.get("/v1/episodes/ep_ffffffffffffffff")
    m = scrape(client)
    routes = {re.search(r'route="([^"]*)"', k[1]).group(1) for k in m
              if k[0] == "kgym_http_requests_total"}
    assert "other" in routes
    assert not any("ffffffffffffffff" in r or "such" in r for r in routes)


def test_request_log(srv, client, episode):
    r = client.post(f"/v1/episodes/{episode}/tools/Bash", {"command": "true"})
    rid = r.header("x-request-id")
    assert rid
    bad = client.get("/v1/episodes/ep_0000000000000000")
    bad_rid = bad.header("x-request-id")
    assert bad_rid != rid
    rec = srv.wait_for_log(lambda x: x.get("request_id") == bad_rid, 5)
    assert rec is not None
    records = srv.records()  # every stderr line is one JSON object
    reqs = [x for x in records if x.get("event") == "request"]
    assert reqs
    for x in reqs:
        assert {"request_id", "method", "path", "status", "ms", "ts", "level"} <= set(x), x
        assert isinstance(x["status"], int) and isinstance(x["ms"], (int, float))
        assert x["ms"] >= 0
        assert x["method"] in ("GET", "POST", "PUT", "DELETE", "PATCH")
    ids = [x["request_id"] for x in reqs]
    assert len(ids) == len(set(ids)), "request ids must be unique"
    mine = [x for x in reqs if x["request_id"] == rid]
    assert len(mine) == 1
    m = mine[0]
    assert m["method"] == "POST" and m["path"] == f"/v1/episodes/{episode}/tools/Bash"
    assert m["status"] == 200 and m["episode_id"] == episode and m["tool"] == "Bash"
    assert rec["status"] == 404 and rec["error"] == "EPISODE_NOT_FOUND"
    assert rec["method"] == "GET"


def test_request_log_never_leaks_bodies(srv, client, episode):
    secret = "s3cr3t-token-do-not-log"
    client.tool(episode, "Write", file_path="k.txt", content=secret)
    client.put(f"/v1/episodes/{episode}/files/k2.txt", secret.encode())
    assert secret not in srv.stderr_text()


def test_quiet_server_logs_no_requests(launch):
    s = launch(args=["--quiet"], name="quiet")
    c = s.client()
    assert c.get("/v1/health").status == 200
    c.create("fixture/alpha")
    c.close()
    recs = s.records()
    assert any(r.get("event") == "listening" for r in recs)
    assert not [r for r in recs if r.get("event") == "request"]
