# Chapter 09's additions (included by tvlab_add_chapter, cmake/TvlabChapter.cmake): `moe_mpi`, the
# MoE layer with expert parallelism over MPI, and its tests under mpirun. Built only where MPI is
# found (Debian: openmpi-bin libopenmpi-dev); the libraries never depend on it.
find_package(MPI COMPONENTS CXX QUIET)
if(NOT MPI_CXX_FOUND)
  message(STATUS "tvlab: MPI not found, chapter ${number}'s expert parallelism (moe_mpi) is off")
  return()
endif()
# FindMPI's launcher (/usr/bin/mpiexec on Debian). Open MPI takes the folder it was started from
# for its installation prefix: /bin/mpirun (merged /usr) would give "/" and refuse to run.
set(TVLAB_MPIEXEC "${MPIEXEC_EXECUTABLE}")
message(STATUS "tvlab: MPI ${MPI_CXX_VERSION} found, chapter ${number}'s expert parallelism (moe_mpi) on")

add_library(tvlab_${chapter}_expert_parallel STATIC "${src}/expert_parallel.cpp")
target_include_directories(tvlab_${chapter}_expert_parallel PUBLIC "${src}" PRIVATE "${TVLAB_CBLAS_INCLUDE_DIR}")
target_link_libraries(tvlab_${chapter}_expert_parallel PUBLIC tvlab_optimized MPI::MPI_CXX PRIVATE BLAS::BLAS tvlab_flags)

add_executable(moe_mpi "${src}/moe_mpi.cpp")
set_target_properties(moe_mpi PROPERTIES RUNTIME_OUTPUT_DIRECTORY "${PROJECT_BINARY_DIR}/chapters")
target_link_libraries(moe_mpi PRIVATE tvlab_${chapter}_expert_parallel CLI11::CLI11 OpenMP::OpenMP_CXX tvlab_flags)
# `tvlab moe --ranks N` runs moe_mpi --step under this launcher (tvlab itself does not link MPI)
target_compile_definitions(tvlab_${chapter}_walkthrough PRIVATE TVLAB_MPIEXEC="${TVLAB_MPIEXEC}"
                           TVLAB_MOE_MPI="$<TARGET_FILE:moe_mpi>")
add_dependencies(tvlab moe_mpi)

if(TVLAB_BUILD_TESTS AND TVLAB_MPIEXEC)
  add_dependencies(tvlab_tests moe_mpi)
  # Open MPI refuses root unless told (the CI runs as root); more ranks than cores need
  # --oversubscribe; one thread per rank keeps four ranks on two cores quick. Under the
  # sanitizers, LeakSanitizer would report Open MPI's own allocations kept until exit.
  set(mpi_env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
      OMPI_MCA_btl_vader_single_copy_mechanism=none)
  if(TVLAB_SANITIZE)
    list(APPEND mpi_env ASAN_OPTIONS=detect_leaks=0)
  endif()
  set(mpirun "${TVLAB_MPIEXEC}" --oversubscribe)
  foreach(n 1 2 4)
    add_test(NAME ${label}.mpi_check_np${n} COMMAND ${mpirun} -np ${n} $<TARGET_FILE:moe_mpi> --check)
    set_tests_properties(${label}.mpi_check_np${n} PROPERTIES LABELS "${label};mpi" ENVIRONMENT "${mpi_env}" TIMEOUT 60
                         PASS_REGULAR_EXPRESSION "PASS: ${n} ranks agree" FAIL_REGULAR_EXPRESSION "MISMATCH|FAIL")
  endforeach()
  add_test(NAME ${label}.mpi_step_np2 COMMAND ${mpirun} -np 2 $<TARGET_FILE:moe_mpi> --step)
  set_tests_properties(${label}.mpi_step_np2 PROPERTIES LABELS "${label};mpi" ENVIRONMENT "${mpi_env}" TIMEOUT 60
                       PASS_REGULAR_EXPRESSION "4. combine")
  # Bad settings: one line from rank 0 naming the parameter, exit status 2.
  add_test(NAME ${label}.mpi_errors COMMAND bash "${tests}/mpi_errors_test.sh" "${TVLAB_MPIEXEC}" $<TARGET_FILE:moe_mpi>)
  set_tests_properties(${label}.mpi_errors PROPERTIES LABELS "${label};mpi" ENVIRONMENT "${mpi_env}" TIMEOUT 60)
endif()
