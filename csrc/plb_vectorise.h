/* plb_vectorise.h - PLB_VECTORISE, for the shim's reductions over whole
 * arrays (C only, not bound).
 *
 * A loop that folds every entry of an index array into one value (a minimum,
 * an OR of differences) costs a fraction of a nanosecond per entry
 * vectorised, and about one otherwise: GCC does not vectorise at the
 * extension's -O2 (GCC 12), so such a function is marked PLB_VECTORISE.
 * clang vectorises at -O2 and ignores the attribute. Write the loop without
 * an early exit and with additions rather than multiplications for the
 * index arithmetic, so the vectoriser has nothing to refuse.
 */
#ifndef PLB_VECTORISE_H
#define PLB_VECTORISE_H

#if defined(__GNUC__) && !defined(__clang__)
#define PLB_VECTORISE __attribute__((optimize("tree-vectorize")))
#else
#define PLB_VECTORISE
#endif

#endif
