# tvlab_add_chapter(<NN_topic>): everything one chapter contributes to the build, found by
# convention in its four folders, so that adding a chapter edits no central file.
#
#   chapters/NN_topic/backends.cpp    the chapter's backend registry      -> tvlab_NN_topic_backends
#   chapters/NN_topic/walkthrough.cpp `tvlab NN_topic` (defines TVLAB_CHAPTER_ENTRY())
#                                                                         -> linked into `tvlab`
#   chapters/NN_topic/bench.cpp       its benchmarks (defines tvlab::bench::register_benchmarks();
#                                     main is the benchmark library's)       -> bench_NN_topic
#   tests/NN_topic/*suite_test.cpp    suites over the registry: run in the chapter's test program
#                                     over every backend, and in its exercise program over the
#                                     student's (the stubs)
#   tests/NN_topic/*_test.cpp         other tests (documents' numbers, analysis): test program only
#   tests/NN_topic/*.cpp              helpers of the tests (oracles)
#   tests/NN_topic/cli_test.sh        the chapter's command end to end
#   exercises/NN_topic/solution.cpp   the worked exercises (collected in exercises/CMakeLists.txt)
#   chapters/NN_topic/chapter.cmake   optional: anything else the chapter builds or sets (a program
#                                     that needs an optional package and its tests; properties of its
#                                     own sources in the libraries, by TARGET_DIRECTORY), included last, inside
#                                     this function: it sees the variables chapter ("09_mixture_of_experts"),
#                                     number ("09"), label ("ch09"), src (the chapter's folder) and
#                                     tests (its tests' folder), and the targets above
#
# Every chapter source sees TVLAB_CHAPTER_NAME ("04_flash_attention"); ctest labels are chNN,
# chNN-gpu (CUDA cases) and exercise-NN (which `ctest -L exercise` matches).
function(tvlab_add_chapter chapter)
  string(SUBSTRING "${chapter}" 0 2 number)
  set(label "ch${number}")
  set(src "${PROJECT_SOURCE_DIR}/chapters/${chapter}")
  set(tests "${PROJECT_SOURCE_DIR}/tests/${chapter}")

  # The chapter's identity, for its own sources (not for `tvlab` itself, which links them all).
  add_library(tvlab_${chapter}_identity INTERFACE)
  target_compile_definitions(tvlab_${chapter}_identity INTERFACE TVLAB_CHAPTER_NAME="${chapter}"
                             TVLAB_CHAPTER_ENTRY=chapter_${chapter})

  add_library(tvlab_${chapter}_backends STATIC "${src}/backends.cpp")
  target_include_directories(tvlab_${chapter}_backends PUBLIC "${src}")
  target_link_libraries(tvlab_${chapter}_backends PUBLIC tvlab_backend_registry tvlab_student_headers tvlab_flags
                        PRIVATE tvlab_${chapter}_identity)

  add_library(tvlab_${chapter}_walkthrough STATIC "${src}/walkthrough.cpp")
  target_link_libraries(tvlab_${chapter}_walkthrough PUBLIC tvlab_walkthrough tvlab_${chapter}_backends
                        PRIVATE tvlab_${chapter}_identity tvlab_flags)
  target_precompile_headers(tvlab_${chapter}_walkthrough REUSE_FROM tvlab_walkthrough)
  target_link_libraries(tvlab PRIVATE tvlab_${chapter}_walkthrough tvlab_${chapter}_backends)
  set_property(GLOBAL APPEND PROPERTY TVLAB_CHAPTERS "${chapter}")

  if(TVLAB_BUILD_BENCH AND EXISTS "${src}/bench.cpp")
    add_executable(bench_${chapter} "${src}/bench.cpp")
    set_target_properties(bench_${chapter} PROPERTIES RUNTIME_OUTPUT_DIRECTORY "${PROJECT_BINARY_DIR}/chapters")
    target_link_libraries(bench_${chapter} PRIVATE tvlab_bench tvlab_${chapter}_backends tvlab_exercises_student
                          tvlab_${chapter}_identity tvlab_flags)
    target_precompile_headers(bench_${chapter} REUSE_FROM tvlab_bench)
  endif()

  if(TVLAB_BUILD_TESTS)
    # The options every chapter has (--backend, --json, --markdown, --dump, ...), end to end.
    add_test(NAME ${label}.cli_standard COMMAND bash "${PROJECT_SOURCE_DIR}/tests/common/cli_test.sh"
             $<TARGET_FILE:tvlab> ${chapter})
    set_tests_properties(${label}.cli_standard PROPERTIES LABELS "${label};cli;cli-standard")
  endif()

  if(TVLAB_BUILD_TESTS AND EXISTS "${tests}")
    file(GLOB suites CONFIGURE_DEPENDS "${tests}/*suite_test.cpp")
    file(GLOB other_tests CONFIGURE_DEPENDS "${tests}/*_test.cpp")
    file(GLOB helpers CONFIGURE_DEPENDS "${tests}/*.cpp")
    if(suites)
      list(REMOVE_ITEM other_tests ${suites})
    endif()
    set(all_tests ${suites} ${other_tests})
    if(all_tests)
      list(REMOVE_ITEM helpers ${all_tests})
    endif()
    # The suites and helpers compile once and link into both programs.
    add_library(test_${chapter}_suites OBJECT ${suites} ${helpers})
    set_target_properties(test_${chapter}_suites PROPERTIES TVLAB_TEST_CODE ON)
    target_link_libraries(test_${chapter}_suites PUBLIC tvlab_test_common tvlab_${chapter}_backends
                          tvlab_${chapter}_identity tvlab_flags)
    target_precompile_headers(test_${chapter}_suites REUSE_FROM tvlab_test_common)

    add_executable(test_${chapter} $<TARGET_OBJECTS:test_${chapter}_suites> ${other_tests})
    set_target_properties(test_${chapter} PROPERTIES TVLAB_TEST_CODE ON)
    set_target_properties(test_${chapter} PROPERTIES RUNTIME_OUTPUT_DIRECTORY "${PROJECT_BINARY_DIR}/tests")
    target_link_libraries(test_${chapter} PRIVATE tvlab_test_main tvlab_test_common tvlab_${chapter}_backends
                          tvlab_exercises_solution tvlab_${chapter}_identity tvlab_flags)
    target_precompile_headers(test_${chapter} REUSE_FROM tvlab_test_common)
    # ctest -L matches labels as regular expressions: `-L ch04` runs the chapter with its CUDA
    # cases, `-L gpu` every CUDA case; the exercise programs are labelled apart (see below).
    gtest_discover_tests(test_${chapter} DISCOVERY_TIMEOUT 60 NO_PRETTY_VALUES TEST_FILTER "-*cuda*"
                         PROPERTIES LABELS "${label}")
    gtest_discover_tests(test_${chapter} DISCOVERY_TIMEOUT 60 NO_PRETTY_VALUES TEST_FILTER "*cuda*"
                         PROPERTIES LABELS "${label}-gpu")
    add_dependencies(tvlab_tests test_${chapter})

    # The same suites over the student's code (exercises/NN_topic/student.cpp): they fail with
    # NotImplemented until the exercises are solved.
    if(TVLAB_BUILD_EXERCISE_TESTS AND EXISTS "${PROJECT_SOURCE_DIR}/exercises/${chapter}/student.cpp" AND suites)
      add_executable(test_${chapter}_exercises $<TARGET_OBJECTS:test_${chapter}_suites>)
      set_target_properties(test_${chapter}_exercises PROPERTIES TVLAB_TEST_CODE ON)
      set_target_properties(test_${chapter}_exercises PROPERTIES RUNTIME_OUTPUT_DIRECTORY "${PROJECT_BINARY_DIR}/tests")
      target_link_libraries(test_${chapter}_exercises PRIVATE tvlab_exercise_main tvlab_test_common
                            tvlab_${chapter}_backends tvlab_exercises_student tvlab_flags)
      gtest_discover_tests(test_${chapter}_exercises TEST_PREFIX "exercise." DISCOVERY_TIMEOUT 60 NO_PRETTY_VALUES
                           PROPERTIES LABELS "exercise-${number}")  # `-L exercise` matches it too
      add_dependencies(tvlab_exercise_tests test_${chapter}_exercises)
    endif()

    if(EXISTS "${tests}/cli_test.sh")
      add_test(NAME ${label}.cli COMMAND bash "${tests}/cli_test.sh" $<TARGET_FILE:tvlab>)
      set_tests_properties(${label}.cli PROPERTIES LABELS "${label};cli")
    endif()
  endif()

  # The chapter's own additions, if any: a function's scope, so its variables stay the chapter's.
  include("${src}/chapter.cmake" OPTIONAL)
endfunction()

# After every chapter: the list `tvlab` iterates, generated from the chapters found.
function(tvlab_write_chapter_list)
  get_property(chapters GLOBAL PROPERTY TVLAB_CHAPTERS)
  set(declarations "")
  set(calls "")
  foreach(chapter IN LISTS chapters)
    string(APPEND declarations "Chapter chapter_${chapter}();\n")
    string(APPEND calls "      chapter_${chapter}(),\n")
  endforeach()
  set(out "${PROJECT_BINARY_DIR}/chapters/chapter_list.cpp")
  file(CONFIGURE OUTPUT "${out}" CONTENT [=[
// Generated by CMake (cmake/TvlabChapter.cmake) from the folders chapters/[0-9][0-9]_*: do not edit.
#include "common/walkthrough.hpp"

namespace tvlab::cli {

@declarations@
const std::vector<Chapter>& chapters() {
  static const std::vector<Chapter> all = {
@calls@  };
  return all;
}

}  // namespace tvlab::cli
]=] @ONLY)
  target_sources(tvlab PRIVATE "${out}")
  # Last on the link line: the registries above refer to tvlab::student.
  target_link_libraries(tvlab PRIVATE tvlab_exercises_student)
endfunction()
