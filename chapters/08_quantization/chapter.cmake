# Chapter 08's additions (included by tvlab_add_chapter, cmake/TvlabChapter.cmake): the sources of
# the reference and optimized libraries that must round every float operation on its own.
#
# ggml's block formats round a product and then a sum (Q4_0's code is floor(x (1 / d) + 8.5)); a
# fused multiply-add, which the compiler forms when the flags allow FMA instructions
# (-march=native), rounds once and moves a code by one on a tie. So these files are compiled with
# -ffp-contract=off, and without the precompiled header: GCC keeps the optimization flags a
# function was parsed with, and xsimd's operators, parsed in the header, would keep forming
# fused multiply-adds. (-Wno-uninitialized: GCC 12 warns inside its own AVX-512 headers, at the
# _mm512_undefined_*() that xsimd's min, max and conversions start from.)
foreach(library reference optimized)
  set(exact_sources "${PROJECT_SOURCE_DIR}/${library}/src/block_quant.cpp" "${PROJECT_SOURCE_DIR}/${library}/src/quantized_gemv.cpp")
  set_source_files_properties(${exact_sources} TARGET_DIRECTORY tvlab_${library}
                              PROPERTIES COMPILE_OPTIONS "-ffp-contract=off;-Wno-uninitialized" SKIP_PRECOMPILE_HEADERS ON)
endforeach()
