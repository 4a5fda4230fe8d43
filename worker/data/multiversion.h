// OSPREY_MULTIVERSION: compiles a hot function three times, for the x86-64 baseline, AVX2 and
// x86-64-v4 (AVX-512), and lets the dynamic loader pick the best one for the CPU (GCC
// target_clones, an ifunc). The build keeps its portable baseline flags while the vectorised
// loops of the generator and the models run 2-4 lanes wider where the hardware allows.
//
// Results do not depend on the clone: the targets build with -ffp-contract=off (no FMA
// contraction), so every clone performs the same IEEE operations in the same order.
//
// Elsewhere (other compilers or architectures) the macro expands to nothing.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define OSPREY_MULTIVERSION __attribute__((target_clones("default", "avx2", "arch=x86-64-v4")))
#else
#define OSPREY_MULTIVERSION
#endif
