#!/usr/bin/env python3
"""Tests of scripts/make_student.py on a scratch copy of a chapter's exercises: what it writes,
what it refuses to overwrite, and how it resets one exercise or a chapter with a backup.

    python3 tests/scripts/make_student_test.py      (ctest: Exercises.make_student, label core)
"""
import pathlib
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts/make_student.py"

SOLUTION = """// exercises/07_toy/solution.cpp: the worked exercises of a toy chapter.

#include "tvlab/core/error.hpp"

namespace tvlab::student {

int twice(int x) {
  // BEGIN EXERCISE 07.1 "double a number" "Doubling"
  return 2 * x;
  // END EXERCISE
}

int thrice(int x) {
  // BEGIN EXERCISE 07.2 "triple a number" "Tripling"
  return 3 * x;
  // END EXERCISE
}

}  // namespace tvlab::student
"""


class MakeStudent(unittest.TestCase):
    def setUp(self):
        self.root = pathlib.Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, self.root)
        self.chapter = self.root / "exercises/07_toy"
        self.chapter.mkdir(parents=True)
        self.solution = self.chapter / "solution.cpp"
        self.student = self.chapter / "student.cpp"
        self.solution.write_text(SOLUTION)

    def run_script(self, *args):
        return subprocess.run([sys.executable, str(SCRIPT), "--root", str(self.root), *args],
                              capture_output=True, text=True)

    def backups(self):
        return sorted(self.chapter.glob("student.cpp.*.bak"))

    def solve(self, exercise, body):
        """What a student does: replace the exercise's throw (between its markers) with code."""
        lines = self.student.read_text().splitlines(keepends=True)
        begin = next(n for n, line in enumerate(lines) if f"// EXERCISE {exercise} begins" in line)
        self.assertIn("throw tvlab::NotImplemented", lines[begin + 1])
        lines[begin + 1] = f"  {body}\n"
        self.student.write_text("".join(lines))

    def test_generates_a_stub_per_exercise_between_markers(self):
        self.assertEqual(self.run_script().returncode, 0)
        text = self.student.read_text()
        for exercise, what, section in [("07.1", "double a number", "Doubling"), ("07.2", "triple a number", "Tripling")]:
            self.assertIn(f"// EXERCISE {exercise} begins: {what}.", text)
            self.assertIn(f'throw tvlab::NotImplemented("exercise {exercise}: {what}; read '
                          f'chapters/07_toy/README.md, section \\"{section}\\"");', text)
            self.assertIn(f"// EXERCISE {exercise} ends", text)
        self.assertNotIn("return 2 * x", text)
        self.assertNotIn("do not edit", text.lower())
        self.assertEqual(self.run_script("--check").returncode, 0)

    def test_regenerates_an_untouched_stub_after_the_solution_changes(self):
        self.run_script()
        self.solution.write_text(SOLUTION.replace("namespace tvlab::student {", "namespace tvlab::student {\n\nint kept();"))
        self.assertEqual(self.run_script("--check").returncode, 1)
        run = self.run_script()
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertIn("int kept();", self.student.read_text())
        self.assertEqual(self.backups(), [])
        # Twice in a row, as a maintainer editing the solution again before committing.
        self.solution.write_text(SOLUTION.replace("namespace tvlab::student {", "namespace tvlab::student {\n\nint again();"))
        self.assertEqual(self.run_script().returncode, 0)
        self.assertIn("int again();", self.student.read_text())
        self.assertEqual(self.run_script("--check").returncode, 0)

    def test_refuses_to_overwrite_a_students_work(self):
        self.run_script()
        self.solve("07.1", "return x + x;")
        work = self.student.read_text()
        self.solution.write_text(SOLUTION.replace("2 * x", "x * 2"))
        run = self.run_script()
        self.assertEqual(run.returncode, 1)
        self.assertIn("exercises/07_toy/student.cpp", run.stdout)
        self.assertIn("make reset-exercise", run.stdout)
        self.assertEqual(self.student.read_text(), work)
        self.assertEqual(self.backups(), [])

    def test_an_edit_outside_the_exercises_is_work_too(self):
        self.run_script()
        self.student.write_text(self.student.read_text().replace("int twice", "// my helper\nint twice"))
        self.assertEqual(self.run_script().returncode, 1)
        self.assertIn("// my helper", self.student.read_text())

    def test_force_overwrites_and_keeps_a_backup(self):
        self.run_script()
        self.solve("07.1", "return x + x;")
        work = self.student.read_text()
        run = self.run_script("--force")
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertNotIn("return x + x;", self.student.read_text())
        self.assertEqual([b.read_text() for b in self.backups()], [work])

    def test_reset_one_exercise_keeps_the_others_and_a_backup(self):
        self.run_script()
        stub = self.student.read_text()
        self.solve("07.1", "return x + x;")
        self.solve("07.2", "return x + x + x;")
        work = self.student.read_text()
        run = self.run_script("--reset", "07.2")
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        text = self.student.read_text()
        self.assertIn("return x + x;", text)
        self.assertNotIn("return x + x + x;", text)
        self.assertIn('throw tvlab::NotImplemented("exercise 07.2:', text)
        self.assertEqual([b.read_text() for b in self.backups()], [work])
        # Resetting the other one too gives back the untouched stub file, which may be regenerated.
        self.assertEqual(self.run_script("--reset", "07.1").returncode, 0)
        self.assertEqual(self.student.read_text(), stub)
        self.assertEqual(len(self.backups()), 2)
        self.assertEqual(self.run_script().returncode, 0)

    def test_reset_a_chapter(self):
        self.run_script()
        stub = self.student.read_text()
        self.solve("07.2", "return 3 * x;")
        run = self.run_script("--reset", "07")
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertEqual(self.student.read_text(), stub)
        self.assertEqual(len(self.backups()), 1)

    def test_reset_refuses_what_it_cannot_do_and_changes_nothing(self):
        self.run_script()
        self.solve("07.1", "return x + x;")
        work = self.student.read_text()
        for args, needle in [(["--reset", "07.9"], "no exercise 07.9"), (["--reset", "08"], "no chapter 08"),
                             (["--reset", "7.1"], "expected an exercise id")]:
            run = self.run_script(*args)
            self.assertEqual(run.returncode, 1, args)
            self.assertIn(needle, run.stderr)
        # Markers removed by the student: the exercise cannot be found, the file stays as it is.
        self.student.write_text(work.replace("// EXERCISE 07.1 ends\n", ""))
        run = self.run_script("--reset", "07.1")
        self.assertEqual(run.returncode, 1)
        self.assertIn("marker lines", run.stderr)
        self.assertEqual(self.backups(), [])


if __name__ == "__main__":
    unittest.main()
