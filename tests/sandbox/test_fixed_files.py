"""The task's fixed files (model.py, binding.cpp, binding_registry.h) cannot be written, removed,
renamed, replaced or re-permissioned from Bash, and the tools and uploads refuse them too."""
import os
import stat

from kgym_sbx import FIXED_FILES, TEMPLATE, api

# One line per attack: "<name> $?"; each must fail for a fixed file.
ATTACKS = [
    ("append", 'echo pwned >> "$f"'),
    ("truncate", ': > "$f"'),
    ("rm", 'rm -f "$f"'),
    ("unlink", 'unlink "$f"'),
    ("mv", 'mv "$f" "$f.moved"'),
    ("rename_over", 'echo pwned > x.tmp && mv -f x.tmp "$f"'),
    ("symlink_over", 'ln -sf /etc/passwd "$f"'),
    ("chmod", 'chmod 666 "$f"'),
    ("chown", 'chown "$(id -u)" "$f"'),
    ("touch", 'touch "$f"'),
    ("py_truncate", 'python3 -c "import os, sys; os.truncate(sys.argv[1], 0)" "$f"'),
    ("py_open_w", 'python3 -c "import sys; open(sys.argv[1], \'r+\').write(\'x\')" "$f"'),
]


def attack_script(files):
    lines = ["exec 2>/dev/null"]
    for f in files:
        lines.append(f'f={f}')
        for name, cmd in ATTACKS:
            lines.append(f'{cmd}; echo "$f {name} $?"')
    return "\n".join(lines)


def parse(out):
    res = {}
    for line in out.splitlines():
        f, name, rc = line.split()
        res[(f, name)] = int(rc)
    return res


def expected_contents():
    model = api.FIXTURE_TASKS["alpha"][1].encode()
    return {"model.py": model,
            "binding.cpp": (TEMPLATE / "binding.cpp").read_bytes(),
            "binding_registry.h": (TEMPLATE / "binding_registry.h").read_bytes()}


def test_fixed_files_resist_bash(new_episode):
    ep = new_episode()
    want = expected_contents()
    for f in FIXED_FILES:
        assert ep.read_file(f) == want[f]

    # control: the very same attacks all work on files the agent owns, one fresh copy each
    ctl = ep.sh("for i in $(seq 12); do cp model_new.py ctl$i.py; done\n" + "\n".join(
        f'f=ctl{i + 1}.py; {cmd} 2>/dev/null; echo "$f {name} $?"'
        for i, (name, cmd) in enumerate(ATTACKS)))
    assert all(rc == 0 for rc in parse(ctl).values()), ctl

    res = parse(ep.sh(attack_script(FIXED_FILES)))
    assert len(res) == len(FIXED_FILES) * len(ATTACKS)
    worked = [k for k, rc in res.items() if rc == 0]
    assert not worked, worked

    for f in FIXED_FILES:
        assert ep.read_file(f) == want[f], f
        st = os.lstat(ep.host_workspace / f)
        assert stat.S_ISREG(st.st_mode) and st.st_uid == 0 and st.st_gid == 0, (f, st)
        assert stat.S_IMODE(st.st_mode) == 0o444, (f, oct(st.st_mode))
    names = {e["name"] for e in ep.get("").json["entries"]}
    assert not {f + ".moved" for f in FIXED_FILES} & names, names


def test_fixed_files_resist_tools_and_uploads(new_episode):
    ep = new_episode()
    want = expected_contents()
    # control: the same tools write an ordinary file
    assert not ep.tool("Write", file_path="model_new.py", content="ok\n")["is_error"]
    assert ep.put("kernels/upload.cu", b"ok").status == 201

    # a symlink the agent points at a fixed file does not open a way around the rule
    ep.sh("ln -s model.py alias_model.py && ln -s ./binding.cpp kernels/../alias_binding.cpp")
    for f in FIXED_FILES + ("alias_model.py", "alias_binding.cpp"):
        for path in (f, f"/workspace/{f}", f"./{f}", f"kernels/../{f}"):
            obs = ep.tool("Write", file_path=path, content="pwned\n")
            assert obs["is_error"] and obs["data"]["error_code"] == "READ_ONLY_FILE", (path, obs)
        target = f if f in FIXED_FILES else ("model.py" if "model" in f else "binding.cpp")
        first_line = want[target].decode().splitlines()[0]
        obs = ep.tool("Edit", file_path=f, old_string=first_line, new_string="pwned")
        assert obs["is_error"] and obs["data"]["error_code"] == "READ_ONLY_FILE", (f, obs)
        obs = ep.tool("MultiEdit", file_path=f,
                      edits=[{"old_string": first_line, "new_string": "pwned"}])
        assert obs["is_error"] and obs["data"]["error_code"] == "READ_ONLY_FILE", (f, obs)
        r = ep.put(f, b"pwned")
        assert r.status == 403 and r.error()["code"] == "READ_ONLY_FILE", (f, r)
    for f in FIXED_FILES:
        assert ep.read_file(f) == want[f], f
        assert (ep.host_workspace / f).read_bytes() == want[f]
