/* conv_simd_end.h - undoes the macros conv.c defines before each inclusion
 * of conv_simd.h (one inclusion per instruction set), so the next set can
 * define them afresh.  No include guard: it is meant to be included often. */
#undef SFX
#undef ATTR
#undef V
#undef VL
#undef MR2
#undef MR1
#undef VZERO
#undef VLD
#undef VST
#undef VBC
#undef VFMA
#undef VADD
#undef VLDM
#undef VSTN
#undef VLDB
#undef VLDBP
#undef VLDS2
#undef VTRANSPOSE
