/* model_tiny.h - the hand-written test models of model_tiny.c. */
#ifndef AMPC_TEST_MODEL_TINY_H
#define AMPC_TEST_MODEL_TINY_H

#include "program.h"

extern const RtModel ampc_model;       /* fp32 MLP 64-32-10 */
extern const RtModel tiny_model_f16;   /* the same with fp16 storage and fp32 masters (AMP) */
extern const RtModel tiny_model_bf16;  /* the same with bfloat16 */

#endif
