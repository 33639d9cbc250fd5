#!/usr/bin/env python3
"""Generate exercises/NN_<topic>/student.cpp from solution.cpp, and reset a student's exercises.

In solution.cpp every region
    // BEGIN EXERCISE <id> "<what>" "<section of the chapter README>"
    ...
    // END EXERCISE
becomes, in student.cpp, a stub between two marker lines that the student keeps:
    // EXERCISE <id> begins: <what>. ...
    throw tvlab::NotImplemented("exercise <id>: <what>; read chapters/NN_<topic>/README.md, section \"...\"");
    // EXERCISE <id> ends

student.cpp is the student's file. Its last header line is a fingerprint of the generated text,
so that this script can tell an untouched stub file (which it may overwrite) from a student's work
(which it refuses to overwrite unless --force, and then keeps a backup).

    scripts/make_student.py               regenerate every student.cpp that is still an untouched stub
                                          (maintainers, after editing a solution.cpp); refuses the others
    scripts/make_student.py --force       regenerate every student.cpp; edited ones are saved first as
                                          student.cpp.<date-time>.bak
    scripts/make_student.py --check       exit 1 if a student.cpp differs from the generated one (CI:
                                          the committed stubs); writes nothing
    scripts/make_student.py --reset 00.2  put exercise 00.2's stub back, keep the rest of the file
    scripts/make_student.py --reset 00    put chapter 00's whole student.cpp back
                                          (both save the replaced file as student.cpp.<date-time>.bak)
    --root DIR                            work on DIR instead of this checkout (the script's tests)
"""
import argparse
import datetime
import hashlib
import pathlib
import re
import sys

BEGIN = re.compile(r'^(?P<indent>\s*)// BEGIN EXERCISE (?P<id>\d\d\.\d+) "(?P<what>[^"]+)" "(?P<section>[^"]+)"\s*$')
END = re.compile(r'^\s*// END EXERCISE\s*$')
FINGERPRINT = re.compile(r"^// stub fingerprint: (?P<hash>[0-9a-f]{16})\n", re.MULTILINE)
EXERCISE_ID = re.compile(r"^\d\d(\.\d+)?$")


class Refused(Exception):
    """A request this script will not carry out; the message says why and what to do instead."""


def stub_begin(exercise: str) -> re.Pattern:
    return re.compile(rf"^\s*// EXERCISE {re.escape(exercise)} begins\b")


def stub_end(exercise: str) -> re.Pattern:
    return re.compile(rf"^\s*// EXERCISE {re.escape(exercise)} ends\s*$")


def header(chapter: str) -> str:
    return (f"// exercises/{chapter}/student.cpp: your code for this chapter's exercises (exercises.md).\n"
            "// Write each exercise between its \"EXERCISE NN.M begins\" and \"EXERCISE NN.M ends\" lines, in\n"
            "// place of the `throw tvlab::NotImplemented(...)`, then run `make exercises`. Keep those two\n"
            "// lines: `make reset-exercise EXERCISE=NN.M` finds an exercise by them and puts its stub back\n"
            "// (your version is saved beside this file as student.cpp.<date-time>.bak).\n"
            "// Made from solution.cpp by scripts/make_student.py, which does not overwrite your work.\n")


def fingerprint(text: str) -> str:
    """The hash of a student.cpp's text without its fingerprint line."""
    return hashlib.sha256(FINGERPRINT.sub("", text).encode()).hexdigest()[:16]


def is_untouched(text: str) -> bool:
    """True when the text is a generated stub file exactly as the generator wrote it."""
    recorded = FINGERPRINT.search(text)
    return recorded is not None and recorded["hash"] == fingerprint(text)


def exercise_ids(solution: pathlib.Path) -> list:
    return [m["id"] for line in solution.read_text().splitlines() if (m := BEGIN.match(line))]


def generate(solution: pathlib.Path) -> str:
    chapter = solution.parent.name
    out, inside = [], False
    for number, line in enumerate(solution.read_text().splitlines(), 1):
        begin = BEGIN.match(line)
        if begin:
            if inside:
                raise Refused(f"{solution}:{number}: nested BEGIN EXERCISE")
            inside = True
            ind, exercise = begin["indent"], begin["id"]
            message = (f'exercise {exercise}: {begin["what"]}; read chapters/{chapter}/README.md, '
                       f'section \\"{begin["section"]}\\"')
            out.append(f"{ind}// EXERCISE {exercise} begins: {begin['what']}. Replace the throw with your code.")
            out.append(f'{ind}throw tvlab::NotImplemented("{message}");')
            out.append(f"{ind}// EXERCISE {exercise} ends")
            continue
        if END.match(line):
            if not inside:
                raise Refused(f"{solution}:{number}: END EXERCISE without BEGIN")
            inside = False
            continue
        if not inside:
            out.append(line)
    if inside:
        raise Refused(f"{solution}: BEGIN EXERCISE without END")
    body = "\n".join(out) + "\n"
    # Drop the solution's own header comment (the first comment block) in favour of ours.
    body = re.sub(r"\A(//[^\n]*\n)+", "", body)
    text = header(chapter) + "// stub fingerprint: " + "0" * 16 + "\n" + body
    return FINGERPRINT.sub(f"// stub fingerprint: {fingerprint(text)}\n", text, count=1)


def backup(student: pathlib.Path) -> pathlib.Path:
    """Copies student.cpp to student.cpp.<date-time>.bak (never over an earlier backup)."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    target = student.with_name(f"{student.name}.{stamp}.bak")
    n = 1
    while target.exists():
        n += 1
        target = student.with_name(f"{student.name}.{stamp}-{n}.bak")
    target.write_text(student.read_text())
    return target


def solutions(root: pathlib.Path) -> list:
    found = sorted(root.glob("exercises/[0-9][0-9]_*/solution.cpp"))
    template = root / "exercises/_template/solution.cpp"
    return found + ([template] if template.exists() else [])


def regenerate(root: pathlib.Path, force: bool) -> int:
    refused = []
    for solution in solutions(root):
        student = solution.with_name("student.cpp")
        name = student.relative_to(root)
        text = generate(solution)
        if student.exists():
            current = student.read_text()
            if current == text:
                print(f"up to date {name}")
                continue
            if not is_untouched(current):
                if not force:
                    refused.append(str(name))
                    continue
                print(f"saved {backup(student).relative_to(root)} (it held edits)")
        student.write_text(text)
        print(f"wrote {name}")
    if refused:
        print("not overwritten, because they hold edits (a student's work):", *refused, sep="\n  ")
        print("To put one exercise's stub back: make reset-exercise EXERCISE=NN.M; a whole chapter's:\n"
              "make reset-exercise EXERCISE=NN (both keep a backup). To regenerate them anyway, each\n"
              "saved first as student.cpp.<date-time>.bak: make student-stubs FORCE=1.")
        return 1
    return 0


def check(root: pathlib.Path) -> int:
    stale = []
    for solution in solutions(root):
        student = solution.with_name("student.cpp")
        if not student.exists() or student.read_text() != generate(solution):
            stale.append(str(student.relative_to(root)))
    if stale:
        print("these student.cpp files differ from the stubs generated from solution.cpp\n"
              "(maintainers: run `make student-stubs` and commit):", *stale, sep="\n  ")
        return 1
    return 0


def chapter_solution(root: pathlib.Path, number: str) -> pathlib.Path:
    found = sorted(root.glob(f"exercises/{number}_*/solution.cpp"))
    if len(found) != 1:
        chapters = ", ".join(p.parent.name[:2] for p in sorted(root.glob("exercises/[0-9][0-9]_*/solution.cpp")))
        raise Refused(f"no chapter {number} among the exercises (chapters: {chapters})")
    return found[0]


def replace_region(text: str, exercise: str, stub_lines: list, name: str) -> str:
    """text with the lines from "EXERCISE <id> begins" to "EXERCISE <id> ends" replaced by stub_lines."""
    lines = text.splitlines(keepends=True)
    begins = [n for n, line in enumerate(lines) if stub_begin(exercise).match(line)]
    ends = [n for n, line in enumerate(lines) if stub_end(exercise).match(line)]
    if len(begins) != 1 or len(ends) != 1 or ends[0] < begins[0]:
        raise Refused(f"{name}: cannot find exercise {exercise} by its marker lines "
                      f"(\"// EXERCISE {exercise} begins: ...\" then \"// EXERCISE {exercise} ends\", once each); "
                      f"put them back around your code, or reset the whole chapter with "
                      f"`make reset-exercise EXERCISE={exercise[:2]}`")
    return "".join(lines[:begins[0]] + stub_lines + lines[ends[0] + 1:])


def reset(root: pathlib.Path, exercise: str) -> int:
    if not EXERCISE_ID.match(exercise):
        raise Refused(f"EXERCISE={exercise}: expected an exercise id such as 00.2, or a chapter number such as 00")
    solution = chapter_solution(root, exercise[:2])
    student = solution.with_name("student.cpp")
    name = student.relative_to(root)
    generated = generate(solution)
    if "." in exercise:
        ids = exercise_ids(solution)
        if exercise not in ids:
            raise Refused(f"no exercise {exercise} in {solution.relative_to(root)} (its exercises: {', '.join(ids)})")
        lines = generated.splitlines(keepends=True)
        first = next(n for n, line in enumerate(lines) if stub_begin(exercise).match(line))
        last = next(n for n, line in enumerate(lines) if stub_end(exercise).match(line))
        current = student.read_text() if student.exists() else generated
        text = replace_region(current, exercise, lines[first:last + 1], str(name))
    else:
        current = student.read_text() if student.exists() else None
        text = generated
    if current == text:
        print(f"{name}: exercise {exercise} is already the stub; nothing to do")
        return 0
    if current is not None and student.exists():
        print(f"saved {backup(student).relative_to(root)}")
    student.write_text(text)
    what = f"exercise {exercise}" if "." in exercise else f"every exercise of chapter {exercise}"
    print(f"{name}: {what} back to the stub")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare, write nothing (CI)")
    parser.add_argument("--force", action="store_true", help="overwrite edited student.cpp files, keeping a backup")
    parser.add_argument("--reset", metavar="ID", action="append", default=[],
                        help="an exercise (00.2) or a chapter (00) back to its stub, keeping a backup")
    parser.add_argument("--root", type=pathlib.Path, default=pathlib.Path(__file__).resolve().parent.parent)
    args = parser.parse_args()
    root = args.root.resolve()
    try:
        if args.check:
            return check(root)
        if args.reset:
            for exercise in args.reset:
                reset(root, exercise)
            return 0
        return regenerate(root, args.force)
    except Refused as why:
        print(why, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
