"""bench/tools/perf_timeline.py on a synthetic `perf script` output: two processes whose threads run
one after the other, then together, with idle samples in between."""
import pathlib
import subprocess
import sys

TOOL = pathlib.Path(__file__).resolve().parents[2] / "bench" / "tools" / "perf_timeline.py"


def sample(comm, pid, tid, t, *frames):
    lines = [f"{comm:>16s} {pid:5d}/{tid:<5d} {t:.6f}: "]
    lines += [f"\t    {0x1000 + i:x} {f} (/bin/x)" for i, f in enumerate(frames or ("?",))]
    return "\n".join(lines) + "\n\n"


def run(text, *args):
    return subprocess.run([sys.executable, str(TOOL), "-", *args], input=text, capture_output=True,
                          text=True, check=True).stdout


def test_splits_wall_time_by_the_threads_active():
    text = ""
    t = 100.0
    for _ in range(10):  # 1 ms of the client alone, then 1 ms of the server alone
        text += sample("bench", 10, 10, t, "memmove", "osprey::worker::Client::Push")
        text += sample("swapper", 0, 0, t + 0.0001, "halt")
        t += 0.001
        text += sample("bench", 20, 21, t, "osprey::server::SgdLoop")
        t += 0.001
    for _ in range(5):  # 1 ms of both together
        text += sample("bench", 10, 10, t, "memmove")
        text += sample("bench", 20, 21, t + 0.0002, "osprey::server::SgdLoop")
        t += 0.001
    out = run(text, "--bin-us", "1000", "--min-share", "0")
    assert "P1/main" in out and "P2/bench.21" in out
    shares = {line.split("%", 1)[1].strip(): float(line.split("%", 1)[0])
              for line in out.split("wall time by")[1].splitlines()[1:] if "%" in line}
    assert abs(shares["P1/main"] - shares["P2/bench.21"]) < 5, out
    assert shares["P1/main + P2/bench.21"] > 10, out


def test_listing_names_the_first_osprey_frame():
    text = sample("bench", 10, 10, 5.0, "memmove", "osprey::worker::Client::Push")
    text += sample("bench", 10, 10, 5.002, "memmove", "osprey::worker::Client::Push")
    out = run(text, "--bin-us", "500", "--window", "2", "--min-share", "0")
    assert "P1/main:osprey::worker::Client::Push" in out, out


def test_says_what_is_wrong_with_empty_input():
    r = subprocess.run([sys.executable, str(TOOL), "-"], input="not perf output\n", capture_output=True, text=True)
    assert r.returncode != 0 and "no samples" in r.stderr
