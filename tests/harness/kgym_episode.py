"""Drives one harness case (a solution or an exploit) through a real kgym-env over HTTP: a CPU
episode of the case's task, the template's CUDA example removed, the case's files uploaded the way
an agent's writes would land (a pure-Python case also gets the stub kernel of stub_kernel/, never
called, so that it compiles), Compile, then Submit. Used by test_rewards.py and
test_exploits_kgym.py."""
import json

import harness_cases

FIXED = ("model.py", "binding.cpp", "binding_registry.h")


def post_tool(client, ep, name, args):
    r = client.post(f"/v1/episodes/{ep}/tools/{name}", args)
    assert r.status == 200, (name, r)
    return r.json


def run_case(client, task, folder, variant="cpu", final_tool="Submit"):
    """Returns {"reward", "info", "content", "uploads": {path: status}, "compile": observation,
    "data": the observation's data}; final_tool "Verify" checks without ending the episode."""
    r = client.post("/v1/episodes", {"task_id": harness_cases.task_id(task), "options": {"variant": variant}})
    assert r.status == 201, r
    ep = r.json["episode_id"]
    try:
        files = harness_cases.case_files(folder)
        if variant == "cpu" and not any(rel.startswith("kernels/") and rel.endswith(".cpp") for rel in files):
            # a pure-Python case: add a stub kernel so that Compile succeeds and the evaluation
            # proper judges the case (otherwise every such exploit fails on NO_SOURCES, proving nothing)
            files.update(harness_cases.case_files(harness_cases.STUB_KERNEL))
        # The template's example (kernels/axpby.*) is CUDA; a CPU case brings its own kernels.
        if variant == "cpu":
            listing = client.get(f"/v1/episodes/{ep}/files/kernels")
            if listing.status == 200:
                keep = {rel for rel in files if rel.startswith("kernels/")}
                names = _listing_names(listing.json)
                stale = [f"kernels/{n}" for n in names if f"kernels/{n}" not in keep]
                if stale:
                    obs = post_tool(client, ep, "Bash", {"command": "rm -f -- " + " ".join(stale)})["observation"]
                    assert not obs["is_error"], obs
        uploads = {}
        for rel, data in files.items():
            resp = client.put(f"/v1/episodes/{ep}/files/{rel}", data)
            uploads[rel] = resp.status
            if rel in FIXED:
                # an exploit that edits a fixed file: the server must refuse it
                assert resp.status == 403, (rel, resp)
            else:
                assert resp.status in (200, 201), (rel, resp)
        compile_obs = post_tool(client, ep, "Compile", {})["observation"]
        out = post_tool(client, ep, final_tool, {})
        assert out.get("terminated") is (final_tool == "Submit"), out
        obs = out.get("observation") or {}
        return {"reward": out.get("reward"), "info": out.get("info", {}),
                "content": obs.get("content", ""), "uploads": uploads, "compile": compile_obs,
                "data": obs.get("data") or {}}
    finally:
        client.delete(f"/v1/episodes/{ep}")


def _listing_names(doc):
    """Plain file names of a directory listing (GET .../files/<dir>: {"path", "entries": [{name, type, size}]})."""
    return [e["name"] for e in doc.get("entries", []) if e.get("type") in ("file", "symlink")]


def describe(res):
    comp = res["info"].get("reward_components", {}) if isinstance(res["info"], dict) else {}
    keys = ("compiled", "correct", "checks_failed", "t_candidate_ms", "t_eager_ms", "t_compile_ms",
            "speedup_eager", "speedup_compile", "error_code", "error")
    return json.dumps({"reward": res["reward"], "eval_status": res["info"].get("eval_status"),
                       **{k: comp.get(k) for k in keys if k in comp}}, default=str)[:3000]
