#!/usr/bin/env python3
"""Runs the exercise test programs (the chapters' suites over exercises/*/student.cpp) and reads
their JSON reports, in which every test records the exercise it grades (TVLAB_EXERCISE in the
suites, tests/common/testing.hpp).

    scripts/check_exercises.py build/default
        CI, against the committed stubs: every exercise test must FAIL, and fail because of
        tvlab::NotImplemented (not pass, not skip, not crash); every test must name its exercise,
        and every exercise of every solution.cpp must have tests.
    scripts/check_exercises.py --summary build/default [00 | 00.2]
        for a student (`make exercises` runs it): which exercises are solved, which are started,
        which are not, and the command that reruns the first failing test of each.
"""
import json
import pathlib
import re
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
BEGIN = re.compile(r'^\s*// BEGIN EXERCISE (?P<id>\d\d\.\d+) "(?P<what>[^"]+)"')
NOT_IMPLEMENTED = "not implemented: exercise"


def exercises_of_solutions() -> dict:
    """{"00.1": "the numerically stable row softmax", ...} from every chapter's solution.cpp."""
    found = {}
    for solution in sorted(ROOT.glob("exercises/[0-9][0-9]_*/solution.cpp")):
        for line in solution.read_text().splitlines():
            if m := BEGIN.match(line):
                found[m["id"]] = m["what"]
    return found


def run_program(program: pathlib.Path):
    """The program's tests as a list of dicts (name, exercise, failures, skipped), or a crash message."""
    with tempfile.TemporaryDirectory() as tmp:
        report = pathlib.Path(tmp) / "report.json"
        run = subprocess.run([str(program), f"--gtest_output=json:{report}"], capture_output=True, text=True)
        if run.returncode not in (0, 1) or not report.exists():
            return f"crashed (exit {run.returncode})\n{run.stdout[-2000:]}{run.stderr[-2000:]}"
        data = json.loads(report.read_text())
    tests = []
    for suite in data["testsuites"]:
        for test in suite["testsuite"]:
            tests.append({
                "name": f"{suite['name']}.{test['name']}",
                # "01.1" or "01.1, 01.2" (a test that calls two exercises' functions)
                "exercises": test["exercise"].split(", ") if "exercise" in test else [],
                "failures": [f.get("failure", "") for f in test.get("failures", [])],
                "skipped": test.get("result") == "SKIPPED" or test.get("status") == "NOTRUN",
            })
    return tests


def programs_in(build: pathlib.Path, chapter: str = "") -> list:
    return sorted(build.glob(f"tests/test_{chapter}*_exercises"))


def check(build: pathlib.Path) -> int:
    programs = programs_in(build)
    if not programs:
        print(f"no exercise test programs under {build}/tests", file=sys.stderr)
        return 1
    problems, total, graded = [], 0, set()
    for program in programs:
        tests = run_program(program)
        if isinstance(tests, str):
            problems.append(f"{program.name}: {tests}")
            continue
        for test in tests:
            total += 1
            name = f"{program.name}: {test['name']}"
            if not test["exercises"]:
                problems.append(f"{name}: names no exercise (TVLAB_EXERCISE(impl, \"NN.M\") as its first line)")
            graded.update(test["exercises"])
            if test["skipped"]:
                problems.append(f"{name}: skipped")
            elif not test["failures"]:
                problems.append(f"{name}: passed against the stubs")
            elif not any(NOT_IMPLEMENTED in f for f in test["failures"]):
                problems.append(f"{name}: failed, but not with NotImplemented: {test['failures'][0][:300]}")
    if total == 0:
        problems.append("no exercise tests were run")
    for exercise in sorted(set(exercises_of_solutions()) - graded):
        problems.append(f"exercise {exercise}: no test names it")
    if problems:
        print("exercise check FAILED:", *problems, sep="\n  ")
        return 1
    print(f"{total} exercise tests, all failing with NotImplemented against the stubs, as they should; "
          f"every exercise graded ({', '.join(sorted(graded))})")
    return 0


def summary(build: pathlib.Path, selection: str) -> int:
    """Prints one line per exercise; exit status 1 unless every selected exercise is solved."""
    chapter = selection[:2]
    programs = programs_in(build, chapter)
    if not programs:
        print(f"no exercise test programs under {build}/tests" + (f" for chapter {chapter}" if chapter else ""),
              file=sys.stderr)
        return 1
    described = exercises_of_solutions()
    lines, all_solved = [], True
    for program in programs:
        tests = run_program(program)
        if isinstance(tests, str):
            lines.append(f"  {program.name} {tests.splitlines()[0]}: your code stopped the program; run it alone "
                         f"to see where:\n    {program}")
            all_solved = False
            continue
        by_exercise = {}
        for test in tests:
            for exercise in test["exercises"] or ["??"]:
                by_exercise.setdefault(exercise, []).append(test)
        for exercise in sorted(by_exercise):
            if selection and "." in selection and exercise != selection:
                continue
            group = by_exercise[exercise]
            failing = [t for t in group if t["failures"]]
            passed = sum(1 for t in group if not t["failures"] and not t["skipped"])
            skipped = sum(1 for t in group if t["skipped"])
            title = f"  {exercise:5} {described.get(exercise, '(tests that name no exercise)')}"
            counts = f"{passed}/{len(group)} tests pass" + (f", {skipped} skipped" if skipped else "")
            if not failing:
                lines.append(f"{title}\n        solved: {counts}")
                continue
            all_solved = False
            stubbed = all(any(NOT_IMPLEMENTED in f for f in t["failures"]) for t in failing)
            state = "not started (it still throws NotImplemented)" if stubbed and passed == 0 else "not solved yet"
            first = failing[0]["name"]
            lines.append(f"{title}\n        {state}: {counts}; first failing test, rerun it alone:\n"
                         f"        {program} --gtest_filter='{first}'")
    print("\nExercises (your code: exercises/NN_<topic>/student.cpp; what each asks: exercises.md beside it):")
    print(*lines, sep="\n")
    return 0 if all_solved else 1


def main() -> int:
    args = sys.argv[1:]
    if args and args[0] == "--summary":
        build = pathlib.Path(args[1] if len(args) > 1 else "build/default")
        return summary(build, args[2] if len(args) > 2 else "")
    return check(pathlib.Path(args[0] if args else "build/default"))


if __name__ == "__main__":
    sys.exit(main())
