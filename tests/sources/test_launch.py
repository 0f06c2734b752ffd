"""Starting a call's process: posix_spawn where it gives the child what Popen would, Popen where not; either
way the child has only the environment it is given, its own session, /dev/null for stdin, the default action
for SIGPIPE and no descriptor of npumon's beyond its pipes."""

import json
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# What a child reports of itself, as JSON on stdout.
CHILD = textwrap.dedent("""\
    import json, os, sys
    fds = sorted(int(fd) for fd in os.listdir("/proc/self/fd"))
    print(json.dumps({"env": dict(os.environ), "own_session": os.getsid(0) == os.getpid(),
                      "stdin": sys.stdin.read(), "fds": fds}))
""")

# Runs in a process of its own, started by subprocess (close_fds): no inheritable descriptor but those it makes.
DRIVER = textwrap.dedent("""\
    import json, os, sys
    sys.path.insert(0, {root!r})
    from npumon.sources import launch
    case, child_script, program_dir = sys.argv[1:4]
    env = {{"NPUMON_TEST_ONLY": "1", "LANG": "C.UTF-8", "PATH": os.environ["PATH"]}}  # LANG: no locale coercion
    argv = [sys.executable, "-c", child_script]
    if case == "inheritable":
        kept = os.open(os.devnull, os.O_RDONLY)
        os.set_inheritable(kept, True)
    if case == "own path":
        env["PATH"] = program_dir
        argv = ["npumon-test-python", "-c", child_script]


    def run(argv):
        child = launch.start(argv, env)
        out = child.stdout.read()
        child.stdout.close()
        child.stderr.close()
        return type(child).__name__, child.wait(), out.decode()

    how, status, out = run(argv)
    # Python ignores SIGPIPE in every process of its own: a C program shows what the child was given
    ignored = [line for line in run(["/bin/cat", "/proc/self/status"])[2].splitlines() if line.startswith("SigIgn:")]
    print(json.dumps({{"how": how, "status": status, "child": json.loads(out),
                      "sigpipe_ignored": bool(int(ignored[0].split()[1], 16) & (1 << 12))}}))
""").format(root=ROOT)


def _launch(case, tmp_path):
    (tmp_path / "npumon-test-python").symlink_to(sys.executable)
    done = subprocess.run([sys.executable, "-c", DRIVER, case, CHILD, str(tmp_path)], capture_output=True,
                          text=True, timeout=60, env=dict(os.environ, PATH=os.environ.get("PATH", os.defpath)))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _alike(child):
    assert child["env"] == {"NPUMON_TEST_ONLY": "1", "LANG": "C.UTF-8", "PATH": child["env"]["PATH"]}
    assert child["own_session"] and child["stdin"] == ""
    assert child["fds"][:3] == [0, 1, 2] and len(child["fds"]) <= 4  # + the listing's own descriptor


def test_a_plain_call_is_spawned(tmp_path):
    result = _launch("plain", tmp_path)
    assert (result["how"], result["status"], result["sigpipe_ignored"]) == ("Spawned", 0, False)
    _alike(result["child"])


def test_an_inheritable_descriptor_sends_the_call_through_popen_which_closes_it(tmp_path):
    result = _launch("inheritable", tmp_path)
    assert (result["how"], result["status"], result["sigpipe_ignored"]) == ("Popen", 0, False)
    _alike(result["child"])


def test_a_bare_name_on_a_path_of_the_childs_own_goes_through_popen(tmp_path):
    result = _launch("own path", tmp_path)
    assert (result["how"], result["status"]) == ("Popen", 0)
    _alike(result["child"])
    assert result["child"]["env"]["PATH"] == str(tmp_path)
