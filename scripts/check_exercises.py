#!/usr/bin/env python3
"""Every exercise test program (the chapters' suites over exercises/*/student.cpp, the stubs)
must FAIL each test, and fail because of tvlab::NotImplemented: not pass, not skip, not crash.

    scripts/check_exercises.py build/default
"""
import json
import pathlib
import subprocess
import sys
import tempfile


def main() -> int:
    build = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "build/default")
    programs = sorted(build.glob("tests/test_*_exercises"))
    if not programs:
        print(f"no exercise test programs under {build}/tests", file=sys.stderr)
        return 1
    problems, total = [], 0
    for program in programs:
        with tempfile.TemporaryDirectory() as tmp:
            report = pathlib.Path(tmp) / "report.json"
            run = subprocess.run([str(program), f"--gtest_output=json:{report}"], capture_output=True, text=True)
            if run.returncode not in (0, 1) or not report.exists():
                problems.append(f"{program.name}: crashed (exit {run.returncode})\n{run.stdout[-2000:]}{run.stderr[-2000:]}")
                continue
            data = json.loads(report.read_text())
        for suite in data["testsuites"]:
            for test in suite["testsuite"]:
                total += 1
                name = f"{program.name}: {suite['name']}.{test['name']}"
                if test.get("result") == "SKIPPED" or test.get("status") == "NOTRUN":
                    problems.append(f"{name}: skipped")
                    continue
                failures = test.get("failures", [])
                if not failures:
                    problems.append(f"{name}: passed against the stubs")
                elif not any("not implemented: exercise" in f.get("failure", "") for f in failures):
                    problems.append(f"{name}: failed, but not with NotImplemented: {failures[0].get('failure', '')[:300]}")
    if total == 0:
        problems.append("no exercise tests were run")
    if problems:
        print("exercise check FAILED:", *problems, sep="\n  ")
        return 1
    print(f"{total} exercise tests, all failing with NotImplemented against the stubs, as they should")
    return 0


if __name__ == "__main__":
    sys.exit(main())
